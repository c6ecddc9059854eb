package codex

import (
	"testing"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// A call's model and effort reach Codex's command line (-m, and
// model_reasoning_effort last among the -c overrides, over the
// deployment's), on the first turn, a follow-up and a cold resume.
func TestTheCallsModelAndEffortReachEveryTurnsCommandLine(t *testing.T) {
	f := newFixture(t, func(o *Options) {
		o.Model = "deployment-model"
		o.Config = []string{`model_reasoning_effort="minimal"`}
	})
	st, res := f.start("one", func(r *seam.StartRequest) { r.Model, r.Effort = "gpt-5-codex", seam.Effort(llm.EffortHigh) })
	if res.StopReason != agent.StopCompleted {
		t.Fatalf("stop = %q (%s)", res.StopReason, res.Diagnostic)
	}
	f.followup(f.m, st.ChildID, "two")
	if err := f.m.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	f.followup(f.newManager(), st.ChildID, "three")
	calls := f.calls()
	if len(calls) != 3 {
		t.Fatalf("calls = %d", len(calls))
	}
	for i, c := range calls {
		if c.Flags["-m"] != "gpt-5-codex" || c.Config["model_reasoning_effort"] != `"high"` {
			t.Errorf("call %d: -m %q, model_reasoning_effort %s; want gpt-5-codex, \"high\"\nargv %q",
				i+1, c.Flags["-m"], c.Config["model_reasoning_effort"], c.Argv)
		}
	}
}

// Without a model or effort in the call, the deployment's model is used
// and no effort is set by the provider.
func TestWithoutACallModelTheDeploymentsIsUsed(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Model = "deployment-model" })
	if _, res := f.start("one", nil); res.StopReason != agent.StopCompleted {
		t.Fatalf("stop = %q (%s)", res.StopReason, res.Diagnostic)
	}
	c := f.calls()[0]
	if _, set := c.Config["model_reasoning_effort"]; c.Flags["-m"] != "deployment-model" || set {
		t.Errorf("-m %q, config %v", c.Flags["-m"], c.Config)
	}
}
