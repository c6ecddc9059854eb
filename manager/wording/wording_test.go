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
	if got := Report("agent-1", "half way"); got != "Background subagent agent-1 reported:\nhalf way" {
		t.Fatalf("Report = %q", got)
	}
}
