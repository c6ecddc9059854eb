// Package proc runs an external agent's process the way every external
// provider must: in its own process group, with only the environment it is
// given, stderr captured (bounded) for the diagnostic, and a stop that ends
// the whole group and reaps it, so no orphan or zombie outlives a child.
package proc

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

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
}

// Start starts the process in a new process group. The process is not tied
// to ctx: stop it with Stop (a provider does so on cancel, timeout and
// shutdown).
func Start(s Spec) (*Process, error) {
	if s.Path == "" {
		return nil, errors.New("proc: no executable")
	}
	cmd := exec.Command(s.Path, s.Args...)
	cmd.Dir = s.Dir
	cmd.Env = s.Env
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(cmd.SysProcAttr)
	limit := s.StderrLimit
	if limit <= 0 {
		limit = 16 << 10
	}
	p := &Process{cmd: cmd, stderr: &tail{limit: limit}, done: make(chan struct{}), grace: s.Grace}
	if p.grace <= 0 {
		p.grace = 2 * time.Second
	}
	cmd.Stderr = p.stderr
	var err error
	if p.Stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	// Our own pipe, not cmd.StdoutPipe: Wait closes that one as soon as the
	// process exits, losing the last lines still unread (a CLI's final
	// result). With an *os.File as Stdout, the read end is ours and yields
	// everything up to EOF.
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = w
	p.Stdout = r
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	w.Close() // the child holds the write end now
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// PID returns the process id, which is also its process group id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and been reaped.
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

// Stderr returns the captured tail of stderr.
func (p *Process) Stderr() string { return p.stderr.String() }

// Stop ends the whole process group: SIGTERM, then SIGKILL after the grace
// period, and waits until the leader is reaped. Members that outlive the
// leader are killed too. Safe to call more than once.
func (p *Process) Stop() {
	p.once.Do(func() {
		pgid := p.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(p.grace):
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
