//go:build linux

package subreaper

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
)

// A process deep in a confined command's tree (it left the shell's
// session and was re-parented) is found in it, tracked or not (another
// process's supervisor, by its command line); the same tree unconfined is
// not, so the check is not "everything is confined".
func TestInConfinedTreeFindsAConfinedCommandsDescendants(t *testing.T) {
	if abi, reason := sandbox.ABI(); abi < 1 {
		t.Skip("needs Landlock: " + reason)
	}
	for _, c := range []struct {
		name            string
		confined, track bool
	}{{"confined and tracked", true, true}, {"confined, another process's", true, false}, {"unconfined", false, false}} {
		t.Run(c.name, func(t *testing.T) {
			// A double fork out of the shell's session: the sleeper's
			// parent exits, and it is re-parented to the supervisor.
			cmd := supervised(t, c.confined, `(setsid /bin/sleep 300 & echo $!); exec /bin/sleep 300`)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if c.track {
				defer Track(cmd.Process.Pid)()
			}
			defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				t.Fatalf("reading the sleeper's pid: %v", err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(line))
			if err != nil {
				t.Fatal(err)
			}
			err = InConfinedTree(pid)
			var tree *ConfinedTreeError
			switch {
			case c.confined && (!errors.As(err, &tree) || tree.Supervisor != cmd.Process.Pid || tree.PID != pid):
				t.Errorf("InConfinedTree(%d) = %v; want its supervisor %d named", pid, err, cmd.Process.Pid)
			case !c.confined && err != nil:
				t.Errorf("InConfinedTree(%d) of an unconfined command = %v; want nil", pid, err)
			}
			// This process is in no confined tree.
			if err := InConfinedTree(os.Getpid()); err != nil {
				t.Errorf("InConfinedTree(self) = %v", err)
			}
		})
	}
}

// A process that is gone cannot be vouched for: refused, not passed.
func TestInConfinedTreeRefusesAProcessThatIsGone(t *testing.T) {
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	err := InConfinedTree(cmd.Process.Pid)
	var tree *ConfinedTreeError
	if err == nil || errors.As(err, &tree) {
		t.Errorf("InConfinedTree of an exited process = %v; want an error saying it cannot be read", err)
	}
}

// supervised is script under a supervisor, confined (workspace-write in a
// fresh workspace, the home a temporary directory) or not, with its Dir
// and Env set.
func supervised(t *testing.T, confined bool, script string) *exec.Cmd {
	t.Helper()
	base := t.TempDir()
	ws, tmp := filepath.Join(base, "ws"), filepath.Join(base, "tmp")
	for _, d := range []string{ws, tmp} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"PATH=/usr/bin:/bin"}
	cmd, _ := Command(time.Second, "/bin/sh", "-c", script)
	if confined {
		pol := sandbox.Policy{Mode: sandbox.WorkspaceWrite, Workspace: ws, TempDir: tmp, Home: base}
		var err error
		if cmd, err = Confined(time.Second, pol, "/bin/sh", "-c", script); err != nil {
			t.Fatal(err)
		}
		env = pol.Env(env)
	}
	cmd.Dir, cmd.Env = ws, env
	return cmd
}
