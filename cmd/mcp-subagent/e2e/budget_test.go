//go:build e2e

package e2e

import (
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
)

// Through the built binary: a child whose model never stops calling tools
// ends at its budget, and the client gets an error result with stop
// reason budget, the diagnostic and the partial output; a call that gives
// no budget gets the config's limits.budget.default, and one asking for
// more than limits.budget.max is capped.
func TestARunawayChildStopsAtItsBudgetThroughTheBinary(t *testing.T) {
	fake := fakeopenai.New(func(int, fakeopenai.Request) fakeopenai.Reply {
		return fakeopenai.Reply{Text: "still looking", ToolCalls: []fakeopenai.ToolCall{{Name: "list_dir", Arguments: `{"path":"."}`}}}
	})
	defer fake.Close()
	s := start(t, fake, serverOpts{config: `{"limits": {"budget": {"default": {"steps": 2}, "max": {"steps": 4}}}}`})
	ctx := testCtx(t)
	for _, tc := range []struct {
		budget map[string]any
		steps  int
		diag   string
	}{
		{nil, 2, "budget exhausted: steps 2 of 2 (tokens 30, "},
		{map[string]any{"steps": 3}, 3, "budget exhausted: steps 3 of 3 (tokens 45, "},
		{map[string]any{"steps": 40}, 4, "budget exhausted: steps 4 of 4 (tokens 60, "},
		{map[string]any{"tokens": 20}, 2, "budget exhausted: tokens 30 of 20 (steps 2, "},
	} {
		before := len(fake.Requests())
		args := map[string]any{"description": "runaway", "prompt": "look around"}
		if tc.budget != nil {
			args["budget"] = tc.budget
		}
		r := s.call(t, ctx, "subagent", args)
		fg := structured(t, r)
		if !r.IsError || fg.StopReason != "budget" || !strings.HasPrefix(fg.Diagnostic, tc.diag) || fg.Output != "still looking" {
			t.Errorf("budget %v: error %v, %+v; want an error with stop reason budget and diagnostic %q", tc.budget, r.IsError, fg, tc.diag)
		}
		if txt := text(r); !strings.Contains(txt, "ran out of its budget") || !strings.Contains(txt, tc.diag) {
			t.Errorf("budget %v: text %q", tc.budget, txt)
		}
		if n := len(fake.Requests()) - before; n != tc.steps {
			t.Errorf("budget %v: %d model requests; want %d", tc.budget, n, tc.steps)
		}
	}
	r := s.call(t, ctx, "subagent", map[string]any{"description": "bad", "prompt": "x", "budget": map[string]any{"steps": -1}})
	if !r.IsError || !strings.Contains(text(r), "budget") {
		t.Errorf("a negative budget: %q; want an error naming the field", text(r))
	}
}

// Through the built binary: a child that spent four of its five steps
// before the daemon stopped gets exactly one more model request after it
// starts again, and send_message's result is an error with stop reason
// budget and the diagnostic naming the limit and the usage.
func TestABudgetSurvivesADaemonRestartThroughTheBinary(t *testing.T) {
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		if req.LastUserText() == "look around" && n == 3 {
			return fakeopenai.Reply{Text: "looked"}
		}
		return fakeopenai.Reply{Text: "still looking", ToolCalls: []fakeopenai.ToolCall{{Name: "list_dir", Arguments: `{"path":"."}`}}}
	})
	defer fake.Close()
	s := start(t, fake, serverOpts{})
	ctx := testCtx(t)
	r := s.call(t, ctx, "subagent", map[string]any{"description": "careful", "prompt": "look around", "budget": map[string]any{"steps": 5}})
	fg := structured(t, r)
	if r.IsError || fg.StopReason != "completed" || len(fake.Requests()) != 4 {
		t.Fatalf("first turn: error %v, %+v after %d requests; want completed after 4", r.IsError, fg, len(fake.Requests()))
	}
	s.stop(t)

	s2 := start(t, fake, serverOpts{dataDir: s.dataDir, workspace: s.workspace})
	res, sent := callSend(t, s2, ctx, fg.AgentID, "more", 30)
	const diag = "budget exhausted: steps 5 of 5 (tokens 75, "
	if !res.IsError || sent.Route != "resumed" || sent.Outcome == nil || sent.Outcome.StopReason != "budget" ||
		!strings.HasPrefix(sent.Outcome.Diagnostic, diag) || sent.Outcome.Output != "still looking" {
		t.Errorf("send_message after the restart: error %v, %+v (outcome %+v); want resumed, an error with stop reason budget and %q",
			res.IsError, sent, sent.Outcome, diag)
	}
	if n := len(fake.Requests()); n != 5 {
		t.Errorf("the model got %d requests in all; want 5: one after the restart, what the budget had left", n)
	}
}
