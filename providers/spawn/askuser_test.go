package spawn_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/llm/openai"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/providers/spawn"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// asking is a manager over a spawn provider with opts, whose model asks
// the person "Which colour?" through ask_user when it has the tool, and
// ends its turn with what came back (or "NO ask_user TOOL").
type asking struct {
	m     *manager.Manager
	store *memstore.Store
	fake  *fakeopenai.Server
	root  seam.ParentRef
}

func newAskingSpawn(t *testing.T, opts spawn.Options) asking {
	t.Helper()
	a := asking{store: memstore.New(), root: seam.ParentRef{Principal: "p", Cwd: t.TempDir()}}
	a.fake = fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		if res, ok := req.LastToolResult(); ok {
			return fakeopenai.Reply{Text: "GOT: " + res}
		}
		if !req.HasTool("ask_user") {
			return fakeopenai.Reply{Text: "NO ask_user TOOL"}
		}
		return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "ask_user", Arguments: `{"question":"Which colour?"}`}}}
	})
	t.Cleanup(a.fake.Close)
	opts.Client, opts.Model = openai.New(transport.Config{BaseURL: a.fake.URL(), APIKey: "k", RetryBaseDelay: time.Millisecond}), "m"
	a.m = manager.New(manager.Options{Store: a.store})
	if err := a.m.Register(spawn.New(opts)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.m.Close(context.Background()) })
	return a
}

// start starts a background child and returns its id.
func (a asking) start(t *testing.T) *manager.Started {
	t.Helper()
	st, err := a.m.StartContinuable(context.Background(), "spawn", seam.StartRequest{Label: "l", Prompt: "pick a colour", Parent: a.root}, true)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// question waits for the question's notice to reach the principal.
func (a asking) question(t *testing.T) seam.Notice {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		for _, n := range a.m.WaitNotices(ctx, "p", "") {
			if n.Source == agent.SourceQuestion {
				return n
			}
		}
	}
	t.Fatal("no question notice reached the principal")
	return seam.Notice{}
}

// An in-process child with ask_user asks the person a free question; the
// person's answer (send_message's path: Manager.Answer) is the tool's
// result, and the question is stored answered by the person.
func TestAskUserIsAnsweredByThePerson(t *testing.T) {
	a := newAskingSpawn(t, spawn.Options{AskUser: true, QuestionTimeout: time.Minute})
	st := a.start(t)
	n := a.question(t)
	if !strings.Contains(n.Text, "Which colour?") || !strings.Contains(n.Text, st.ChildID) {
		t.Fatalf("the notice: %+v", n)
	}
	page, err := a.m.List(a.root, manager.ListQuery{Status: manager.StatusInputRequired})
	if err != nil || len(page.Rows) != 1 || len(page.Rows[0].Questions) != 1 || page.Rows[0].Questions[0].Kind != string(seam.QuestionFree) {
		t.Fatalf("listing input_required: %+v, %v", page.Rows, err)
	}
	if _, err := a.m.Answer(context.Background(), a.root, st.ChildID, "", "blue, please"); err != nil {
		t.Fatal(err)
	}
	if res := waitTurn(t, st); res.StopReason != agent.StopCompleted || !strings.Contains(res.Output, "GOT: The person answered: blue, please") {
		t.Errorf("the turn: %+v", res)
	}
	qs, _ := a.store.Questions(context.Background(), st.ChildID)
	if len(qs) != 1 || qs[0].Answer == nil || qs[0].Answer.By != seam.ByPerson || qs[0].Answer.Text != "blue, please" {
		t.Errorf("stored: %+v", qs)
	}
}

// Nobody answering within the question timeout is the policy's answer,
// recorded as timed out (never a person's); the child is told and goes on.
func TestAskUserTimesOut(t *testing.T) {
	a := newAskingSpawn(t, spawn.Options{AskUser: true, QuestionTimeout: 300 * time.Millisecond})
	st := a.start(t)
	res := waitTurn(t, st)
	if res.StopReason != agent.StopCompleted || !strings.Contains(res.Output, "GOT: Nobody answered within 300ms") {
		t.Errorf("the turn: %+v", res)
	}
	qs, _ := a.store.Questions(context.Background(), st.ChildID)
	if len(qs) != 1 || qs[0].Answer == nil || qs[0].Answer.By != seam.ByDeadline || qs[0].Answer.Outcome != seam.OutcomeTimedOut {
		t.Errorf("stored: %+v", qs)
	}
}

// An interrupt withdraws the question: the turn ends aborted, the question
// is stored cancelled, never answered by anyone.
func TestAskUserEndsWithAnInterrupt(t *testing.T) {
	a := newAskingSpawn(t, spawn.Options{AskUser: true})
	st := a.start(t)
	a.question(t)
	if err := a.m.Interrupt(a.root, st.ChildID); err != nil {
		t.Fatal(err)
	}
	if res := waitTurn(t, st); res.StopReason != agent.StopAborted {
		t.Errorf("the turn: %+v", res)
	}
	qs, _ := a.store.Questions(context.Background(), st.ChildID)
	if len(qs) != 1 || qs[0].Answer == nil || qs[0].Answer.Outcome != seam.OutcomeCancelled {
		t.Errorf("stored: %+v", qs)
	}
}

// Without AskUser nothing changes: no ask_user tool, no question.
func TestNoAskUserWithoutAsk(t *testing.T) {
	if names := spawn.New(spawn.Options{}).ToolNames(); slices.Contains(names, "ask_user") {
		t.Errorf("ToolNames() = %v", names)
	}
	if names := spawn.New(spawn.Options{AskUser: true}).ToolNames(); !slices.Contains(names, "ask_user") {
		t.Errorf("with AskUser: ToolNames() = %v", names)
	}
	a := newAskingSpawn(t, spawn.Options{})
	st := a.start(t)
	if res := waitTurn(t, st); !strings.Contains(res.Output, "NO ask_user TOOL") {
		t.Errorf("the turn: %+v", res)
	}
	if qs, _ := a.store.Questions(context.Background(), st.ChildID); len(qs) != 0 {
		t.Errorf("questions: %+v", qs)
	}
}
