package manager_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
)

// fakeProvider is a provider whose capabilities and Start the test decides.
// By default Start returns a watchRun: a run that ends aborted when its
// context is cancelled, or with whatever result the test releases it with.
type fakeProvider struct {
	name  string
	caps  manager.Capabilities
	start func(ctx context.Context, req manager.StartRequest) (manager.Run, error)

	mu   sync.Mutex
	reqs []manager.StartRequest
	runs []*watchRun
}

func (p *fakeProvider) Name() string                       { return p.name }
func (p *fakeProvider) Capabilities() manager.Capabilities { return p.caps }
func (p *fakeProvider) InheritsParentContext() bool        { return false }

func (p *fakeProvider) Start(ctx context.Context, req manager.StartRequest) (manager.Run, error) {
	p.mu.Lock()
	p.reqs = append(p.reqs, req)
	p.mu.Unlock()
	if p.start != nil {
		return p.start(ctx, req)
	}
	r := newWatchRun(ctx, req.ID)
	p.mu.Lock()
	p.runs = append(p.runs, r)
	p.mu.Unlock()
	return r, nil
}

// calls returns the requests Start was called with.
func (p *fakeProvider) calls() []manager.StartRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]manager.StartRequest(nil), p.reqs...)
}

// run returns the i-th watchRun the default Start made.
func (p *fakeProvider) run(t *testing.T, i int) *watchRun {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if i >= len(p.runs) {
		t.Fatalf("provider %q made %d runs, want at least %d", p.name, len(p.runs), i+1)
	}
	return p.runs[i]
}

// namedProvider is a fakeProvider that knows its tools' names.
type namedProvider struct {
	*fakeProvider
	tools []string
}

func (p namedProvider) ToolNames() []string { return append([]string(nil), p.tools...) }

var allCaps = manager.Capabilities{OutputSchema: true, DepthLimit: true, ToolFilter: true, Persona: true}

// watchRun behaves like the in-process runs: it works until it is released
// with a result, or until its context is cancelled (then it ends aborted).
// Dispose cancels it and waits for it to end.
type watchRun struct {
	id       string
	cancel   context.CancelFunc
	release  chan finish
	done     chan struct{}
	res      manager.Result
	err      error
	disposed atomic.Int32
}

type finish struct {
	res manager.Result
	err error
}

func newWatchRun(ctx context.Context, id string) *watchRun {
	ctx, cancel := context.WithCancel(ctx)
	r := &watchRun{id: id, cancel: cancel, release: make(chan finish, 1), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		defer cancel()
		select {
		case f := <-r.release:
			r.res, r.err = f.res, f.err
		case <-ctx.Done():
			r.res = manager.Result{StopReason: agent.StopAborted, Diagnostic: "the run was cancelled"}
		}
	}()
	return r
}

// finish ends the run with res and err.
func (r *watchRun) finish(res manager.Result, err error) { r.release <- finish{res, err} }

func (r *watchRun) ID() string                      { return r.id }
func (r *watchRun) Agent() *agent.Agent             { return nil }
func (r *watchRun) Done() <-chan struct{}           { return r.done }
func (r *watchRun) Result() (manager.Result, error) { <-r.done; return r.res, r.err }
func (r *watchRun) Dispose() {
	r.disposed.Add(1)
	r.cancel()
	<-r.done
}

// doneRun is a run that has already ended with res when it is returned.
type doneRun struct {
	id  string
	res manager.Result
}

var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (r *doneRun) ID() string                      { return r.id }
func (r *doneRun) Agent() *agent.Agent             { return nil }
func (r *doneRun) Done() <-chan struct{}           { return closedCh }
func (r *doneRun) Result() (manager.Result, error) { return r.res, nil }
func (r *doneRun) Dispose()                        {}

// recorder collects lifecycle events.
type recorder struct {
	mu     sync.Mutex
	events []manager.Event
	ended  chan manager.Event
}

func record(m *manager.Manager) (*recorder, func()) {
	r := &recorder{ended: make(chan manager.Event, 64)}
	cancel := m.Subscribe(func(e manager.Event) {
		r.mu.Lock()
		r.events = append(r.events, e)
		r.mu.Unlock()
		if e.Type == manager.EventEnd {
			r.ended <- e
		}
	})
	return r, cancel
}

func (r *recorder) all() []manager.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]manager.Event(nil), r.events...)
}

func (r *recorder) count(typ manager.EventType) int {
	n := 0
	for _, e := range r.all() {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// waitEnd waits for the next end event.
func (r *recorder) waitEnd(t *testing.T) manager.Event {
	t.Helper()
	select {
	case e := <-r.ended:
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no subagent/end event within 5s")
		return manager.Event{}
	}
}

// waitDone waits for run to end.
func waitDone(t *testing.T, run manager.Run) {
	t.Helper()
	select {
	case <-run.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the run did not end within 5s")
	}
}

func newManager(t *testing.T, opts manager.Options, providers ...manager.Provider) *manager.Manager {
	t.Helper()
	m := manager.New(opts)
	for _, p := range providers {
		if err := m.Register(p); err != nil {
			t.Fatalf("Register(%q): %v", p.Name(), err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	})
	return m
}

func prompt(s string) manager.StartRequest {
	return manager.StartRequest{Label: "test", Prompt: s, Parent: manager.ParentRef{Principal: "local", Cwd: "/work"}}
}

// wantCode fails unless err is a *manager.Error with code (errors.Is and
// CodeOf agree).
func wantCode(t *testing.T, err error, sentinel *manager.Error) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s", sentinel.Code)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("errors.Is(%v, %s) = false", err, sentinel.Code)
	}
	if got := manager.CodeOf(err); got != sentinel.Code {
		t.Fatalf("CodeOf(%v) = %q, want %q", err, got, sentinel.Code)
	}
}
