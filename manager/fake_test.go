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
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// fakeProvider is a one-shot provider whose capabilities and driver the
// test decides. By default NewDriver returns a watchDriver: its turn ends
// aborted when its context is cancelled, or with whatever result the test
// releases it with.
type fakeProvider struct {
	name string
	caps seam.Capabilities
	// driver, when set, builds the driver instead (and may block, or fail).
	driver func(ctx context.Context, req seam.DriverRequest) (seam.Driver, error)

	mu      sync.Mutex
	reqs    []seam.StartRequest
	dreqs   []seam.DriverRequest
	drivers []*watchDriver
}

func (p *fakeProvider) Name() string                    { return p.name }
func (p *fakeProvider) Capabilities() seam.Capabilities { return p.caps }
func (p *fakeProvider) InheritsParentContext() bool     { return false }

func (p *fakeProvider) Prepare(_ context.Context, req seam.StartRequest) (seam.CreationInputs, error) {
	p.mu.Lock()
	p.reqs = append(p.reqs, req)
	p.mu.Unlock()
	return seam.CreationInputs{}, nil
}

func (p *fakeProvider) NewDriver(ctx context.Context, req seam.DriverRequest) (seam.Driver, error) {
	p.mu.Lock()
	p.dreqs = append(p.dreqs, req)
	p.mu.Unlock()
	if p.driver != nil {
		return p.driver(ctx, req)
	}
	d := newWatchDriver(req.Journal)
	p.mu.Lock()
	p.drivers = append(p.drivers, d)
	p.mu.Unlock()
	return d, nil
}

// calls returns the requests the provider was asked to prepare.
func (p *fakeProvider) calls() []seam.StartRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]seam.StartRequest(nil), p.reqs...)
}

// selves returns the Self of each driver request: how each child calls
// the delegation tools.
func (p *fakeProvider) selves() []seam.ParentRef {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []seam.ParentRef
	for _, r := range p.dreqs {
		out = append(out, r.Self)
	}
	return out
}

// run returns the i-th watchDriver the default NewDriver made.
func (p *fakeProvider) run(t *testing.T, i int) *watchDriver {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if i >= len(p.drivers) {
		t.Fatalf("provider %q made %d drivers, want at least %d", p.name, len(p.drivers), i+1)
	}
	return p.drivers[i]
}

// namedProvider is a fakeProvider that knows its tools' names.
type namedProvider struct {
	*fakeProvider
	tools []string
}

func (p namedProvider) ToolNames() []string { return append([]string(nil), p.tools...) }

var allCaps = seam.Capabilities{OutputSchema: true, DepthLimit: true, ToolFilter: true, Persona: true}

// watchDriver behaves like the in-process agent: its turn works until it
// is released with a result, or until its context is cancelled (then it
// ends aborted). disposed counts Close.
type watchDriver struct {
	j        *agent.Journal
	release  chan agent.TurnResult
	disposed atomic.Int32
}

func newWatchDriver(j *agent.Journal) *watchDriver {
	return &watchDriver{j: j, release: make(chan agent.TurnResult, 1)}
}

// finish ends the turn with res.
func (d *watchDriver) finish(res agent.TurnResult) { d.release <- res }

func (d *watchDriver) RunTurn(ctx context.Context, _ []agent.Input) agent.TurnResult {
	select {
	case res := <-d.release:
		return res
	case <-ctx.Done():
		return agent.TurnResult{StopReason: agent.StopAborted, Diagnostic: "the run was cancelled"}
	}
}
func (d *watchDriver) Journal() *agent.Journal { return d.j }
func (d *watchDriver) Close() error            { d.disposed.Add(1); return nil }

// doneDriver's turn ends at once with res.
type doneDriver struct {
	j   *agent.Journal
	res agent.TurnResult
}

func (d doneDriver) RunTurn(context.Context, []agent.Input) agent.TurnResult { return d.res }
func (d doneDriver) Journal() *agent.Journal                                 { return d.j }
func (doneDriver) Close() error                                              { return nil }

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
func waitDone(t *testing.T, run seam.Run) {
	t.Helper()
	select {
	case <-run.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the run did not end within 5s")
	}
}

func newManager(t *testing.T, opts manager.Options, providers ...seam.Provider) *manager.Manager {
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

func prompt(s string) seam.StartRequest {
	return seam.StartRequest{Label: "test", Prompt: s, Parent: seam.ParentRef{Principal: "local", Cwd: "/work"}}
}

// wantCode fails unless err is a *seam.Error with code (errors.Is and
// CodeOf agree).
func wantCode(t *testing.T, err error, sentinel *seam.Error) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s", sentinel.Code)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("errors.Is(%v, %s) = false", err, sentinel.Code)
	}
	if got := seam.CodeOf(err); got != sentinel.Code {
		t.Fatalf("CodeOf(%v) = %q, want %q", err, got, sentinel.Code)
	}
}
