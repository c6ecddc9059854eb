// Package subreaper runs a command under a supervisor so that nothing the
// command starts outlives it: not a background job, not a process that
// moved to its own process group or session (setsid, a double fork,
// nohup), not one that cleared its environment.
//
// The supervisor is this same binary, re-executed (the pattern of moby's
// reexec): a binary that starts commands through [Command] calls [Main]
// first thing in main (and in TestMain), and Main turns the process into
// a supervisor when it was started as one. The supervisor marks itself a
// child subreaper (prctl PR_SET_CHILD_SUBREAPER), so every orphan among
// its descendants is re-parented to it rather than to init: the command's
// whole tree stays its descendants, found by walking /proc. It starts the
// command with its own stdin, stdout and stderr (and then lets go of
// them) in a process group of its own, and ends when the tree is empty:
//
//   - when the command exits, every descendant still running is killed
//     (SIGKILL);
//   - on SIGTERM, SIGINT or SIGHUP (a stop), every descendant is sent
//     SIGTERM, and after the grace period SIGKILL;
//   - it reaps everything, and exits once it has no child left — with a
//     subreaper that means no descendant is left — with the command's exit
//     status (dying of the same signal when the command was killed).
//
// So the supervisor's exit, which its starter waits for, means the whole
// tree is gone, and with it every holder of the command's pipes: reading
// them to EOF cannot hang. To stop the command, signal the supervisor
// (SIGTERM), not a group: a SIGKILL to the supervisor would leave the tree
// behind.
//
// [Confined] starts the command the same way, with the supervisor confined
// first (package sandbox): Landlock, seccomp and no capabilities, inherited
// by the whole tree.
//
// Caveats: only on Linux; elsewhere, or in a binary that did not call
// Main, Command runs the command directly and the caller's process-group
// kill is all there is. A process that leaves the tree on purpose beyond
// what a subreaper sees (ptrace games, asking a daemon such as systemd to
// start something) is out of reach. If the supervisor itself is killed
// with SIGKILL, what remains is re-parented to the next subreaper or init;
// the starter should make it die with a catchable signal when the starter
// dies (Pdeathsig = SIGTERM).
package subreaper

import (
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
)

// supervisorArg is the first argument of a re-executed supervisor.
const supervisorArg = "__mcp-subagent-subreaper__"

// self is how the supervisor is started: the running binary's own image,
// even if its file has since been replaced or removed.
const self = "/proc/self/exe"

// wired is set by Main: this binary can act as a supervisor.
var wired atomic.Bool

// Main makes this process a supervisor when it was started as one, and then
// never returns; otherwise it records that the binary can supervise, and
// returns. Call it first in main and in the TestMain of tests that start
// commands through Command.
func Main() {
	wired.Store(true)
	mainSupervisor()
}

// Supervised reports whether Command runs commands under a supervisor.
func Supervised() bool { return wired.Load() && supported }

// Command returns a command running path with args under a supervisor
// whose grace (SIGTERM to SIGKILL on a stop) is grace, and whether it is
// supervised; when it is not (see Supervised) it is exec.Command(path,
// args...). path is looked up as exec.Command would, so a missing
// executable fails at Start. The caller sets Dir, Env, the standard
// streams and SysProcAttr on the result as for any command; the
// supervisor and the command share them.
func Command(grace time.Duration, path string, args ...string) (*exec.Cmd, bool) {
	if !Supervised() {
		return exec.Command(path, args...), false
	}
	resolved := path
	if !strings.Contains(path, "/") {
		var err error
		if resolved, err = exec.LookPath(path); err != nil {
			// exec.Command records the same error, and Start returns it.
			return exec.Command(path, args...), false
		}
	}
	// A path with a slash goes as it is: relative to Dir, the
	// supervisor's working directory, as exec would take it.
	return supervisorCommand(grace, "", resolved, args), true
}

// supervisorCommand starts the supervisor: its arguments are the grace in
// milliseconds, the sandbox policy ("" for none), the command's path and
// its arguments.
func supervisorCommand(grace time.Duration, policy, path string, args []string) *exec.Cmd {
	argv := append([]string{supervisorArg, strconv.FormatInt(grace.Milliseconds(), 10), policy, path}, args...)
	return exec.Command(self, argv...)
}

// Confined is [Command] with the command and everything it starts confined
// to policy: the supervisor applies it to itself ([sandbox.Apply]) before
// it starts the command, so that every descendant inherits it while the
// supervisor can still signal and reap them. The policy's mode must be a
// confined one. Confined never runs the command unconfined: when the
// binary cannot supervise (see [Supervised]) it returns an error, and a
// supervisor that cannot apply the policy exits with status 126 and the
// reason on the command's stderr, before the command starts. The caller
// sets Env with [sandbox.Policy.Env] and creates and removes the policy's
// TempDir.
func Confined(grace time.Duration, policy sandbox.Policy, path string, args ...string) (*exec.Cmd, error) {
	if err := policy.Check(); err != nil {
		return nil, err
	}
	if !policy.Mode.Confined() {
		return nil, fmt.Errorf("subreaper: mode %q is not a confined mode", policy.Mode)
	}
	if !Supervised() {
		return nil, errors.New("cannot confine the command: this binary has no supervisor on this system (Linux only)")
	}
	resolved := path
	if !strings.Contains(path, "/") {
		var err error
		if resolved, err = exec.LookPath(path); err != nil {
			return nil, err
		}
	}
	return supervisorCommand(grace, policy.Encode(), resolved, args), nil
}
