package edge

import (
	"context"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// subagent and send_message hand the budget they are given to the manager;
// a bad value is refused naming the field; a child that ran out is an
// error result saying so, with the diagnostic and the partial output.
func TestBudgetsReachTheManagerAndRunningOutIsAnError(t *testing.T) {
	out := seam.Result{StopReason: agent.StopBudget, Output: "half of it",
		Diagnostic: "budget exhausted: steps 5 of 5 (tokens 75, 0.1s)"}
	var asked *seam.Budget
	f := &fakeManager{
		start: func(req seam.StartRequest, wait bool) (*manager.Started, error) {
			asked = req.Budget
			return &manager.Started{ChildID: "agent-1", MessageID: "msg-1", Turn: fakeTurn{ok: true, res: out}}, nil
		},
		followup: func(caller seam.ParentRef, childID, content string, wait bool) (*manager.Sent, error) {
			return &manager.Sent{MessageID: "msg-2", Route: manager.RouteResumed, ChildID: childID, Turn: fakeTurn{}}, nil
		},
	}
	f.treeUsage = func(string) (seam.Usage, error) { return seam.Usage{}, nil }
	s := fakeServer(t, f)
	r := s.tool("subagent").handle(context.Background(), rootCall(s, map[string]any{
		"description": "loop", "prompt": "go", "budget": map[string]any{"steps": 5, "cost_usd": 0.5}}))
	if asked == nil || *asked != (seam.Budget{Steps: 5, CostUSD: 0.5}) {
		t.Errorf("the manager was asked for budget %+v", asked)
	}
	text := ResultText(r)
	for _, w := range []string{"Error: subagent ran out of its budget before it finished", "stop reason budget", out.Diagnostic, "Partial output before the run ended:\nhalf of it"} {
		if !r.IsError || !strings.Contains(text, w) {
			t.Errorf("result (error %v) %q lacks %q", r.IsError, text, w)
		}
	}
	if m := structured(t, r); m["stop_reason"] != "budget" || m["diagnostic"] != out.Diagnostic {
		t.Errorf("structuredContent = %v", m)
	}

	r = s.tool("send_message").handle(context.Background(), rootCall(s, map[string]any{
		"subagent_id": "agent-1", "message": "more", "budget": map[string]any{"tokens": 1000}}))
	if r.IsError || len(f.budgets) != 1 || f.budgets[0] == nil || f.budgets[0].Tokens != 1000 {
		t.Errorf("send_message: %q; granted %+v", ResultText(r), f.budgets)
	}
	for _, tool := range []string{"subagent", "send_message"} {
		args := map[string]any{"description": "loop", "prompt": "go", "subagent_id": "agent-1", "message": "more", "budget": map[string]any{"tokens": -1}}
		if tool == "subagent" {
			delete(args, "subagent_id")
			delete(args, "message")
		} else {
			delete(args, "description")
			delete(args, "prompt")
		}
		r := s.tool(tool).handle(context.Background(), rootCall(s, args))
		if !r.IsError || !strings.Contains(ResultText(r), "budget") || !strings.Contains(ResultText(r), "tokens") {
			t.Errorf("%s with a negative budget: %q; want an error naming budget.tokens", tool, ResultText(r))
		}
	}
}
