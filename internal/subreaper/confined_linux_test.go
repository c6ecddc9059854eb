//go:build linux

package subreaper

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
	"github.com/mcp-subagent/mcp-subagent/internal/subreaper/leaktest"
)

// confinedScript writes in the workspace, tries to write outside and to
// signal a process outside, starts escapes, and says what happened.
const confinedScript = `echo in > "$WS/in"
if { echo out > "$OUT/x"; } 2>/dev/null; then echo wrote-outside; else echo write-blocked; fi
if kill -0 "$SLEEPER" 2>/dev/null; then echo signalled; else echo signal-blocked; fi
`

// A confined command cannot write outside its workspace or signal outside
// its tree, and what it starts is still killed and reaped when it exits;
// the same script run unsupervised-but-unconfined (Command) can, so the
// probe is not broken.
func TestAConfinedCommandStaysInItsWorkspaceAndItsTreeStillDies(t *testing.T) {
	if abi, reason := sandbox.ABI(); abi < 6 {
		t.Skip("needs Landlock ABI 6 for the signal scope: " + reason)
	}
	for _, confined := range []bool{true, false} {
		base := t.TempDir()
		ws, out, tmp := filepath.Join(base, "ws"), filepath.Join(base, "out"), filepath.Join(base, "tmp")
		for _, d := range []string{ws, out, tmp} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		sleeper := exec.Command("/bin/sleep", "300")
		if err := sleeper.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })

		mark := leaktest.Mark(t)
		script := confinedScript + leaktest.Escapes(20) + "; echo done"
		var cmd *exec.Cmd
		pol := sandbox.Policy{Mode: sandbox.WorkspaceWrite, Workspace: ws, TempDir: tmp, Home: base}
		if confined {
			var err error
			if cmd, err = Confined(time.Second, pol, "/bin/sh", "-c", script); err != nil {
				t.Fatal(err)
			}
		} else {
			cmd, _ = Command(time.Second, "/bin/sh", "-c", script)
		}
		cmd.Dir = ws
		cmd.Env = pol.Env([]string{"PATH=/usr/bin:/bin", mark, "WS=" + ws, "OUT=" + out, "SLEEPER=" + strconv.Itoa(sleeper.Process.Pid)})
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("confined=%v: %v\n%s", confined, err, b)
		}
		want := "write-blocked\nsignal-blocked\ndone\n"
		if !confined {
			want = "wrote-outside\nsignalled\ndone\n"
		}
		if string(b) != want {
			t.Errorf("confined=%v: output %q, want %q", confined, b, want)
		}
		if _, err := os.Stat(filepath.Join(ws, "in")); err != nil {
			t.Errorf("confined=%v: the workspace write: %v", confined, err)
		}
		if live := leaktest.Live(mark); len(live) > 0 {
			t.Errorf("confined=%v: %d processes outlived the command: %v", confined, len(live), live)
		}
	}
}

// On a kernel without Landlock (simulated), a confined command is refused
// by the supervisor before it starts: never run unconfined.
func TestWithoutLandlockAConfinedCommandDoesNotRun(t *testing.T) {
	base := t.TempDir()
	pol := sandbox.Policy{Mode: sandbox.WorkspaceWrite, Workspace: base, TempDir: base, Home: t.TempDir()}
	cmd, err := Confined(time.Second, pol, "/bin/sh", "-c", "echo ran > ran")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Dir = base
	cmd.Env = []string{"PATH=/usr/bin:/bin", sandbox.ABIEnv + "=0"}
	b, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 126 || !strings.Contains(string(b), "cannot confine") {
		t.Errorf("exit %v, output %q: want 126 and the reason", err, b)
	}
	if _, err := os.Stat(filepath.Join(base, "ran")); err == nil {
		t.Error("the command ran")
	}
}

func TestConfinedRefusesAModeThatDoesNotConfine(t *testing.T) {
	for _, m := range []sandbox.Mode{sandbox.Off, sandbox.Unconfined, "bogus"} {
		if _, err := Confined(time.Second, sandbox.Policy{Mode: m}, "/bin/true"); err == nil {
			t.Errorf("mode %q accepted", m)
		}
	}
}
