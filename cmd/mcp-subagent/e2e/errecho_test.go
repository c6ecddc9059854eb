//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"
)

// A 5,000-character id to show, tail, interrupt, send or worktree rm comes
// back in no error whole.
func TestOverlongIDsAreNotEchoedByTheCLI(t *testing.T) {
	dataDir := t.TempDir()
	for _, cmd := range [][]string{{"show"}, {"tail"}, {"interrupt"}, {"send", "", "hi"}, {"worktree", "rm"}} {
		argv := append(append([]string{}, cmd...), strings.Repeat("s", 5000))
		if cmd[0] == "send" {
			argv = []string{"send", strings.Repeat("s", 5000), "hi"}
		}
		code, _, stderr := runOut(t, 20*time.Second, nil, append(argv, "--data-dir", dataDir)...)
		if code == 0 || len(stderr) > 1024 || !strings.Contains(stderr, "no subagent id") {
			t.Errorf("%s with a 5,000-character id: exit %d, %d bytes of stderr %q; want refused in under 1 KiB", cmd[0], code, len(stderr), stderr[:min(len(stderr), 300)])
		}
	}
}
