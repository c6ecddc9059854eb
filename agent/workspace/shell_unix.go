//go:build unix

package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
	"github.com/mcp-subagent/mcp-subagent/internal/subreaper"
)

// outputGrace is how long run_shell waits, once the process group is gone,
// for output from processes that left the group and still hold the pipe.
const outputGrace = 2 * time.Second

func (w *workspace) runShellTool() (agent.Tool, error) {
	params := []param{
		{name: "command", kind: kindString, required: true, nonEmpty: true,
			desc: "The shell command line, run with /bin/sh -c in the workspace root directory, e.g. \"go test ./...\"."},
	}
	desc := fmt.Sprintf("Run a shell command with /bin/sh -c, starting in the workspace root directory, and return its combined stdout and stderr followed by its exit code. "+
		"There is no terminal and no input (stdin is empty), so interactive programs fail. "+
		"The command is killed together with every process it started after %s, or when the turn is cancelled; "+
		"processes still running in the background when the command finishes are killed too, so start nothing meant to outlive the call. "+
		"Output beyond %s is cut in the middle (its beginning and end are kept). "+
		"Environment variables whose names suggest credentials (KEY, TOKEN, SECRET, PASSWORD, AUTH, ...) are removed.%s",
		duration(w.shellTimeout), size(w.maxOutput), sandboxNote(w.sandbox))
	return newTool(nameRunShell, desc, params, w.runShell), nil
}

// sandboxNote tells the model what the sandbox allows, so that it does not
// spend steps on what must fail.
func sandboxNote(p sandbox.Policy) string {
	if !p.Mode.Confined() {
		return ""
	}
	var b strings.Builder
	b.WriteString(" The command runs in a sandbox: ")
	if p.Mode == sandbox.ReadOnly {
		b.WriteString("it can read the workspace but not change it, and write only in $TMPDIR")
	} else {
		b.WriteString("it can write only inside the workspace and in $TMPDIR")
	}
	b.WriteString(" ($TMPDIR is a fresh directory for each command, removed after it); files outside the workspace in the user's home directory cannot be read; ")
	if p.Network {
		b.WriteString("network access is allowed. ")
	} else {
		b.WriteString("there is no network (connections, DNS and downloads fail: do not try to install or fetch anything; use what is already installed). ")
	}
	b.WriteString("Build and tool caches (GOCACHE, npm, pip, cargo) are private to this agent.")
	return b.String()
}

// command makes the run_shell command, confined unless the mode is
// unconfined, and a func removing what it made (the temp dir).
func (w *workspace) command(line string) (cmd *exec.Cmd, supervised bool, cleanup func(), err error) {
	if !w.sandbox.Mode.Confined() {
		cmd, supervised = subreaper.Command(0, "/bin/sh", "-c", line)
		cmd.Env = shellEnv(os.Environ())
		return cmd, supervised, func() {}, nil
	}
	pol := w.sandbox
	if pol.CacheDir != "" {
		if _, err := os.Stat(pol.CacheDir); errors.Is(err, fs.ErrNotExist) && pol.GoCacheSeed != "" {
			// Best effort: without the seed, the first build compiles
			// the standard library itself.
			_ = sandbox.SeedCache(filepath.Join(pol.CacheDir, "go-build"), pol.GoCacheSeed)
		}
		if err := os.MkdirAll(pol.CacheDir, 0o700); err != nil {
			return nil, false, nil, err
		}
	}
	tmp, err := os.MkdirTemp(pol.TempDir, "run-shell-")
	if err != nil {
		return nil, false, nil, err
	}
	cleanup = func() { _ = sandbox.RemoveAll(tmp) }
	pol.TempDir = tmp
	if cmd, err = subreaper.Confined(0, pol, "/bin/sh", "-c", line); err != nil {
		cleanup()
		return nil, false, nil, err
	}
	cmd.Env = pol.Env(shellEnv(os.Environ()))
	return cmd, true, cleanup, nil
}

func (w *workspace) runShell(ctx context.Context, a args) (string, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return "", fmt.Errorf("cannot run the command: %s", bareError(err))
	}
	defer pr.Close()
	// Under the subreaper supervisor where the binary has one: then not
	// even a process that left the group (setsid) outlives the call. The
	// supervisor confines itself, and so the command, first.
	cmd, supervised, cleanup, err := w.command(a.str("command", ""))
	if err != nil {
		pw.Close()
		return "", fmt.Errorf("cannot run the command: %s", bareError(err))
	}
	defer cleanup()
	cmd.Dir = w.real
	cmd.Stdout, cmd.Stderr = pw, pw // an *os.File: no copying goroutine in exec
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	pw.Close()
	if err != nil {
		return "", fmt.Errorf("cannot run the command: %s", bareError(err))
	}
	if w.sandbox.Mode.Confined() {
		// Known as confined until reaped (below, cmd.Wait): the daemon
		// refuses its tree on its socket.
		defer subreaper.Track(cmd.Process.Pid)()
	}
	// Setpgid with Pgid 0: the process started leads a new group (the
	// supervisor, with the shell in a group of its own below it, or the
	// shell itself).
	pgid := cmd.Process.Pid
	stop := func() { killGroup(pgid) }
	if supervised {
		// Not SIGKILL: the supervisor must live to kill the tree (its
		// grace is zero), and it exits when the tree is gone.
		stop = func() { _ = syscall.Kill(pgid, syscall.SIGTERM) }
	}

	out := newHeadTail(w.maxOutput)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(out, pr)
	}()

	// Wait for the shell to exit. Where possible (Linux) without reaping
	// it, so that its pid, and with it the group id, cannot be reused
	// before the group is killed below.
	exited := make(chan struct{})
	var waitErr error
	reaped := false
	go func() {
		defer close(exited)
		if waitExited(cmd.Process.Pid) != nil {
			waitErr, reaped = cmd.Wait(), true
		}
	}()

	timer := time.NewTimer(w.shellTimeout)
	defer timer.Stop()
	var stopped string
	select {
	case <-exited:
	case <-timer.C:
		stopped = "timeout"
		stop()
		<-exited
	case <-ctx.Done():
		stopped = "cancel"
		stop()
		<-exited
	}
	// Whatever the command left behind in its group dies with it
	// (supervised, it is dead already).
	killGroup(pgid)
	if !reaped {
		waitErr = cmd.Wait()
	}

	// Everything in the group is dead, so the pipe closes unless a process
	// moved to another group kept it open (not possible supervised); do
	// not wait for that one.
	grace := time.NewTimer(outputGrace)
	defer grace.Stop()
	select {
	case <-copied:
	case <-grace.C:
		pr.Close()
		<-copied
	}

	switch stopped {
	case "cancel":
		return "", fmt.Errorf("the command was cancelled and killed with its process group: %w", context.Cause(ctx))
	case "timeout":
		return result(out.String(), fmt.Sprintf("[timed out after %s: the command and every process it started were killed; run something quicker, or split the work]", duration(w.shellTimeout))), nil
	}
	return result(out.String(), exitNote(waitErr)), nil
}

func result(output, note string) string {
	if output == "" {
		return "(no output)\n" + note
	}
	if !strings.HasSuffix(output, "\n") {
		output += "\n"
	}
	return output + note
}

func exitNote(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "[exit code 0]"
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Sprintf("[killed by signal %d (%s)]", int(ws.Signal()), ws.Signal())
		}
		return fmt.Sprintf("[exit code %d]", ee.ExitCode())
	}
	return fmt.Sprintf("[the command failed: %s]", bareError(err))
}

// killGroup kills every process in the group pgid.
func killGroup(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// secretWords mark environment variables not passed to run_shell.
var secretWords = []string{"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "AUTH", "COOKIE", "PRIVATE"}

// shellEnv returns env without the variables whose names suggest secrets:
// the server's own API keys must not reach the model through `env`.
func shellEnv(env []string) []string {
	out := make([]string, 0, len(env))
next:
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		upper := strings.ToUpper(name)
		for _, w := range secretWords {
			if strings.Contains(upper, w) {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}
