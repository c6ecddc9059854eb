package proc

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
)

// TestAConfinedProcessWritesOnlyItsWorkspaceTempAndState runs a shell as a
// confined agent and, with the same script, unconfined: confined, it writes
// its workspace, its $TMPDIR and its state directory (created for it) but
// neither a file elsewhere nor another file of the home directory, and its
// temp dir is gone once it is.
func TestAConfinedProcessWritesOnlyItsWorkspaceTempAndState(t *testing.T) {
	for _, mode := range []sandbox.Mode{sandbox.WorkspaceWrite, sandbox.Unconfined} {
		t.Run(string(mode), func(t *testing.T) {
			if abi, reason := sandbox.ABI(); mode.Confined() && abi < 1 {
				t.Skip("no Landlock: " + reason)
			}
			home, cwd, outside := t.TempDir(), t.TempDir(), t.TempDir()
			t.Setenv("HOME", home)
			state := filepath.Join(home, ".agent")
			script := `mkdir -p "$HOME/.agent" && echo w > ws.txt && echo t > "$TMPDIR/t.txt" && echo s > "$HOME/.agent/s.txt" && echo "$TMPDIR";` +
				` echo o > ` + outside + `/o.txt; echo h > "$HOME/h.txt"; true`
			p, err := Start(Spec{Path: "/bin/sh", Args: []string{"-c", script}, Dir: cwd,
				Env:     []string{"HOME=" + home, "PATH=/usr/bin:/bin"},
				Confine: sandbox.Agent{Mode: mode, StateDirs: []string{state}}})
			if err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(p.Stdout)
			if err := p.Wait(context.Background()); err != nil {
				t.Fatalf("%v: %s", err, p.Stderr())
			}
			tmp := strings.TrimSpace(string(out))
			for _, f := range []string{filepath.Join(cwd, "ws.txt"), filepath.Join(state, "s.txt")} {
				if _, err := os.Stat(f); err != nil {
					t.Errorf("not written: %v (stderr %q)", err, p.Stderr())
				}
			}
			if mode.Confined() {
				if tmp == "" || tmp == os.Getenv("TMPDIR") {
					t.Errorf("TMPDIR = %q, want a temp dir of the process's own", tmp)
				}
				if _, err := os.Stat(tmp); !os.IsNotExist(err) {
					t.Errorf("the temp dir %s outlived the process: %v", tmp, err)
				}
			}
			for _, f := range []string{filepath.Join(outside, "o.txt"), filepath.Join(home, "h.txt")} {
				_, err := os.Stat(f)
				if wrote := err == nil; wrote == mode.Confined() {
					t.Errorf("%s written = %v in mode %s (stderr %q)", f, wrote, mode, p.Stderr())
				}
			}
		})
	}
}

// TestAConfinedStartOfAMissingExecutableFails: no temp dir or supervisor
// is left behind, and the error is Start's.
func TestAConfinedStartOfAMissingExecutableFails(t *testing.T) {
	if abi, reason := sandbox.ABI(); abi < 1 {
		t.Skip("no Landlock: " + reason)
	}
	_, err := Start(Spec{Path: "/no/such/agent", Confine: sandbox.Agent{Mode: sandbox.WorkspaceWrite}})
	if err == nil {
		t.Fatal("a missing executable started")
	}
}
