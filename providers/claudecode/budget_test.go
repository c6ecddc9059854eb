package claudecode

import (
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// An external child is stopped at its budget, mid-turn, by the manager:
// at its seconds (the CLI hangs, ignoring SIGTERM) or at its steps (its
// first answer, as recorded in the journal while it streams). The turn
// ends budget with the diagnostic and the partial output, and no process
// of its group is left.
func TestAnExternalChildIsStoppedAtItsBudget(t *testing.T) {
	for _, tc := range []struct {
		name   string
		budget seam.Budget
		diag   []string // in order
	}{
		// Long enough for the fake (the test binary, slow to start under
		// -race) to get going and write its pid.
		{"seconds", seam.Budget{Seconds: 3}, []string{"budget exhausted: seconds ", " of 3 (tokens ", ", steps 1)"}},
		{"steps", seam.Budget{Steps: 1}, []string{"budget exhausted: steps 1 of 1 (tokens ", "s)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			m := newManager(t, memstore.New(), f.options(t), nil)
			b := tc.budget
			_, res := startAndWait(t, m, f, seam.StartRequest{Prompt: "SCENARIO:sleep-stubborn", Budget: &b})
			if res.StopReason != agent.StopBudget || !inOrder(res.Diagnostic, tc.diag) {
				t.Errorf("stop %s, diagnostic %q; want budget, %q", res.StopReason, res.Diagnostic, tc.diag)
			}
			if res.Output != "working on it" {
				t.Errorf("partial output = %q", res.Output)
			}
			pgid := f.pids(t)[0]
			assertNoLiveMember(t, pgid)
			waitGroupGone(t, pgid)
		})
	}
}

// inOrder reports whether s starts with parts[0] and holds the rest in
// order after it.
func inOrder(s string, parts []string) bool {
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	for _, p := range parts {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return true
}
