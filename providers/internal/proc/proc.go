// Package proc runs an external agent's process the way every external
// provider must: in its own process group, with only the environment it is
// given, stderr captured (bounded) for the diagnostic, and a stop that ends
// every process it started and reaps them, so no orphan or zombie outlives
// a child.
//
// Where the binary is wired for it ([subreaper.Main] in main, Linux), the
// process runs under a supervisor that is a child subreaper: everything
// the process starts, also what leaves its process group or session
// (setsid, a double fork, nohup), is killed when the process exits or is
// stopped, and [Process.Done] is closed only once all of it is gone. So
// Stdout reaches EOF and the stderr capture is complete by then. Without
// the supervisor, only the process group is killed, and a process that
// left it may survive and hold the pipes.
//
// With Spec.Confine in a confined mode, the supervisor confines itself
// first (sandbox.Agent: the workspace-write file-system policy with the
// network on and the agent's state directories writable), so the agent and
// all it starts inherit it; Start never falls back to an unconfined run.
// The process gets a temp dir of its own ($TMPDIR, the build tools'
// caches), removed once the supervisor has exited.
package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
	"github.com/mcp-subagent/mcp-subagent/internal/subreaper"
)

// supervisorSlack is how long past the grace a stop waits for the
// supervisor to report the tree gone before it kills the supervisor's
// group itself (the supervisor does the killing; this is a last resort).
const supervisorSlack = 3 * time.Second

// unsupervisedIODelay bounds, without a supervisor, how long Wait waits for
// the stderr pipe once the process exited: a process that left the group
// may hold it forever.
const unsupervisedIODelay = 2 * time.Second

// Spec describes a process to start.
type Spec struct {
	Path string   // the executable
	Args []string // arguments, without the executable
	Dir  string   // working directory
	// Env is the whole environment of the process: nothing of the server's
	// own environment leaks in unless it is listed here.
	Env []string
	// StderrLimit bounds the captured stderr; zero: 16 KiB (the tail is kept).
	StderrLimit int
	// Grace is how long a stop waits after SIGTERM before SIGKILL; zero: 2s.
	Grace time.Duration
	// Confine, in a confined mode, runs the process and everything it
	// starts under the sandbox (Landlock, seccomp, no capabilities; see
	// sandbox.Agent): Start fails rather than run it unconfined. Zero: none.
	Confine sandbox.Agent
}

// Process is a started process group.
type Process struct {
	cmd    *exec.Cmd
	Stdin  io.WriteCloser
	Stdout io.ReadCloser // read it to EOF; close it when done
	stderr *tail
	done   chan struct{}
	err    error // the Wait result, once done
	once   sync.Once
	grace  time.Duration
	// supervised: cmd is the subreaper supervisor, in a group of its own;
	// the agent leads another group below it.
	supervised bool
}

// Start starts the process in a new process group. The process is not tied
// to ctx: stop it with Stop (a provider does so on cancel, timeout and
// shutdown).
func Start(s Spec) (*Process, error) {
	if s.Path == "" {
		return nil, errors.New("proc: no executable")
	}
	grace := s.Grace
	if grace <= 0 {
		grace = 2 * time.Second
	}
	var cmd *exec.Cmd
	supervised := true
	tmp := "" // the confined process's temp dir, removed once it is gone
	env := s.Env
	if s.Confine.Confined() {
		var err error
		if cmd, tmp, env, err = confinedCommand(s, grace); err != nil {
			return nil, err
		}
	} else {
		cmd, supervised = subreaper.Command(grace, s.Path, s.Args...)
	}
	cmd.Dir = s.Dir
	cmd.Env = env
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(cmd.SysProcAttr, supervised)
	if !supervised {
		cmd.WaitDelay = unsupervisedIODelay
	}
	limit := s.StderrLimit
	if limit <= 0 {
		limit = 16 << 10
	}
	p := &Process{cmd: cmd, stderr: &tail{limit: limit}, done: make(chan struct{}), grace: grace, supervised: supervised}
	// exec copies stderr into the tail and Wait waits for that copy to
	// end: the capture is complete once done is closed, not before.
	cmd.Stderr = p.stderr
	var err error
	cleanup := func() {
		if tmp != "" {
			_ = os.RemoveAll(tmp)
		}
	}
	if p.Stdin, err = cmd.StdinPipe(); err != nil {
		cleanup()
		return nil, err
	}
	// Our own pipe, not cmd.StdoutPipe: Wait closes that one as soon as the
	// process exits, losing the last lines still unread (a CLI's final
	// result). With an *os.File as Stdout, the read end is ours and yields
	// everything up to EOF.
	r, w, err := os.Pipe()
	if err != nil {
		cleanup()
		return nil, err
	}
	cmd.Stdout = w
	p.Stdout = r
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		cleanup()
		return nil, err
	}
	w.Close() // the child holds the write end now
	go func() {
		p.err = cmd.Wait()
		cleanup() // the supervisor exited: nothing of the tree is left to write there
		close(p.done)
	}()
	return p, nil
}

// confinedCommand is the supervisor command that runs s confined, its
// fresh temp dir and the process's environment.
func confinedCommand(s Spec, grace time.Duration) (*exec.Cmd, string, []string, error) {
	resolved, err := exec.LookPath(s.Path)
	if err != nil {
		return nil, "", nil, err
	}
	tmp, err := os.MkdirTemp(s.Confine.TempRoot, "mcp-subagent-agent-")
	if err != nil {
		return nil, "", nil, fmt.Errorf("the confined agent's temp dir: %w", err)
	}
	pol, err := s.Confine.Policy(s.Path, resolved, s.Dir, tmp)
	if err == nil {
		var cmd *exec.Cmd
		if cmd, err = subreaper.Confined(grace, pol, resolved, s.Args...); err == nil {
			return cmd, tmp, sandbox.AgentEnv(pol, s.Env), nil
		}
	}
	_ = os.RemoveAll(tmp)
	return nil, "", nil, fmt.Errorf("confining the agent: %w", err)
}

// PID returns the id of the process started: the supervisor's when
// supervised, else the agent's own, which is also its process group id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Supervised reports whether the process runs under the subreaper
// supervisor, so that Done means everything it started is gone and
// Stdout is sure to reach EOF once it is.
func (p *Process) Supervised() bool { return p.supervised }

// Done is closed once the process has exited and been reaped, its stderr
// captured to the end, and (supervised) every process it started killed
// and reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the process to exit, or ctx to end (then it stops the
// group first), and returns the exit error.
func (p *Process) Wait(ctx context.Context) error {
	select {
	case <-p.done:
	case <-ctx.Done():
		p.Stop()
	}
	return p.err
}

// Stderr returns the captured tail of stderr. It may miss the last lines
// until Done is closed: a reader that learns of the process's end some
// other way (its stdout ended) must wait for Done, or Stop, first.
func (p *Process) Stderr() string { return p.stderr.String() }

// Stop ends the process and everything it started: SIGTERM, then SIGKILL
// after the grace period, and waits until all of it is reaped. Safe to
// call more than once.
func (p *Process) Stop() {
	p.once.Do(func() {
		pgid := p.cmd.Process.Pid
		if p.supervised {
			// The supervisor's group is the supervisor alone; it passes the
			// stop on to the whole tree, escalates after the grace, and
			// exits when the tree is gone.
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			select {
			case <-p.done:
				return
			case <-time.After(p.grace + supervisorSlack):
			}
		} else {
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(p.grace):
			}
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	})
}

// tail keeps the last limit bytes written to it.
type tail struct {
	mu    sync.Mutex
	limit int
	buf   []byte
	cut   bool
}

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.limit; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.cut = true
	}
	return len(b), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cut {
		return "…" + string(t.buf)
	}
	return string(t.buf)
}
