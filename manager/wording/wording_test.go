package wording

import (
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

func TestASettlementSaysHowTheEpochEnded(t *testing.T) {
	for _, c := range []struct {
		last seam.Result
		says []string
	}{
		{seam.Result{StopReason: agent.StopCompleted, Output: "all done"}, []string{"Background subagent agent-1 finished", "Its closing message:\nall done"}},
		{seam.Result{StopReason: agent.StopBudget, Diagnostic: "budget exhausted: steps 5 of 5"}, []string{"ran out of its budget", "new budget", "Diagnostic: budget exhausted", "It left no closing message."}},
		{seam.Result{StopReason: agent.StopAborted}, []string{"was stopped before it finished"}},
		{seam.Result{StopReason: "weird"}, []string{"failed before it finished"}},
	} {
		got := Settled("agent-1", c.last)
		for _, s := range c.says {
			if !strings.Contains(got, s) {
				t.Errorf("Settled(%s) = %q, want it to say %q", c.last.StopReason, got, s)
			}
		}
	}
	w := &seam.Worktree{Path: "/wt/agent-1", Branch: "subagent/agent-1", Base: "abc"}
	changed := Settled("agent-1", seam.Result{StopReason: agent.StopCompleted, Worktree: w,
		Changes: &seam.Changes{Diffstat: "1 file changed", Added: []string{"pkg/new.txt"}}})
	if !strings.Contains(changed, "committed on branch subagent/agent-1 in worktree /wt/agent-1 (base abc): 1 file changed. Added: pkg/new.txt.") {
		t.Errorf("Settled with changes = %q, want where they are", changed)
	}
	if same := Settled("agent-1", seam.Result{Worktree: w, Changes: &seam.Changes{}}); !strings.Contains(same, "changed nothing in its worktree, which is removed") {
		t.Errorf("Settled without changes = %q", same)
	}
	if got := Report("agent-1", "half way"); got != "Background subagent agent-1 reported:\nhalf way" {
		t.Fatalf("Report = %q", got)
	}
}
