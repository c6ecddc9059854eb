package claudecode

import (
	"testing"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// A call's model and effort reach claude's command line (--model,
// --effort) on the first turn, a follow-up and a cold resume; without
// them the deployment's model is used and no effort is set.
func TestTheCallsModelAndEffortReachEveryTurnsCommandLine(t *testing.T) {
	f := newFake(t)
	store := memstore.New()
	opts := f.options(t)
	opts.Model = "deployment-model"
	m1 := newManager(t, store, opts, nil)
	id, res := startAndWait(t, m1, f, seam.StartRequest{Prompt: "one", Model: "opus", Effort: seam.Effort(llm.EffortLow)})
	if res.StopReason != agent.StopCompleted {
		t.Fatalf("stop = %q (%s)", res.StopReason, res.Diagnostic)
	}
	followup(t, m1, id, "two")
	if err := m1.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	followup(t, newManager(t, store, opts, nil), id, "three")
	calls := f.calls(t)
	if len(calls) != 3 {
		t.Fatalf("%d calls, want 3", len(calls))
	}
	for i, c := range calls {
		if c.Flags.Model != "opus" || c.Flags.Effort != "low" {
			t.Errorf("call %d: --model %q --effort %q; want opus, low\nargs %q", i+1, c.Flags.Model, c.Flags.Effort, c.Args)
		}
	}
}

func TestWithoutACallModelTheDeploymentsIsUsed(t *testing.T) {
	f := newFake(t)
	opts := f.options(t)
	opts.Model = "deployment-model"
	if _, res := startAndWait(t, newManager(t, memstore.New(), opts, nil), f, seam.StartRequest{Prompt: "one"}); res.StopReason != agent.StopCompleted {
		t.Fatalf("stop = %q (%s)", res.StopReason, res.Diagnostic)
	}
	if c := f.lastCall(t); c.Flags.Model != "deployment-model" || c.Flags.Effort != "" {
		t.Errorf("--model %q --effort %q", c.Flags.Model, c.Flags.Effort)
	}
}
