package manager_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// gatedProvider is bubbleProvider with drivers that, as the agent loop
// does, ask the budget hook before the model call and before a tool round
// (manager.GatedDriver).
type gatedProvider struct {
	bubbleProvider
	mu     sync.Mutex
	rounds []error // what each tool round's hook answered
}

func (p *gatedProvider) NewDriver(_ context.Context, r seam.DriverRequest) (seam.Driver, error) {
	return &gatedDriver{bubbleDriver: &bubbleDriver{p: &p.bubbleProvider, j: r.Journal, self: r.Self}, hook: r.Budget, p: p}, nil
}

type gatedDriver struct {
	*bubbleDriver
	hook func(call bool) error
	p    *gatedProvider
}

func (*gatedDriver) GatesSideEffects() {}

// RunTurn "calls the model" (asks the hook), runs one tool round (asks
// again, recording the answer), then is a bubble turn.
func (d *gatedDriver) RunTurn(ctx context.Context, in []agent.Input) agent.TurnResult {
	if err := d.hook(true); err != nil {
		return agent.TurnResult{StopReason: agent.StopBudget, Diagnostic: err.Error()}
	}
	err := d.hook(false)
	d.p.mu.Lock()
	d.p.rounds = append(d.p.rounds, err)
	d.p.mu.Unlock()
	if err != nil {
		return agent.TurnResult{StopReason: agent.StopError, Diagnostic: err.Error()}
	}
	return d.bubbleDriver.RunTurn(ctx, in)
}

func (p *gatedProvider) roundsDone() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]error(nil), p.rounds...)
}

// heldStore holds every child write until released (closing release),
// counting them.
type heldStore struct {
	seam.Store
	release chan struct{}
	fail    error // when set, every held write fails with it
	mu      sync.Mutex
	writes  int
}

func (s *heldStore) WriteChild(ctx context.Context, id string, w seam.ChildWrite) error {
	<-s.release
	s.mu.Lock()
	s.writes++
	s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	return s.Store.WriteChild(ctx, id, w)
}

// A waited start on a gated driver returns at once and its turn starts
// while the record is still being committed; the tool round waits for the
// commit, and until it lands a listing does not show the child.
func TestAGatedToolRoundWaitsForTheRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &heldStore{Store: memstore.New(), release: make(chan struct{})}
		p := &gatedProvider{}
		m, s := startWaited(t, st, p)
		synctest.Wait() // the record lingered, then its commit is held
		if got := p.roundsDone(); len(got) != 0 {
			t.Fatalf("the tool round ran before the record was committed: %v", got)
		}
		if page, err := m.List(bubbleRoot, manager.ListQuery{Status: manager.StatusRunning}); err != nil || len(page.Rows) != 0 {
			t.Errorf("a listing before the record is stored = %+v, %v; want no row", page.Rows, err)
		}
		close(st.release)
		synctest.Wait()
		if got := p.roundsDone(); len(got) != 1 || got[0] != nil {
			t.Fatalf("tool rounds after the commit = %v, want one that passed", got)
		}
		if page, err := m.List(bubbleRoot, manager.ListQuery{Status: manager.StatusRunning}); err != nil || len(page.Rows) != 1 {
			t.Errorf("a listing once the record is stored = %+v, %v; want the child", page.Rows, err)
		}
		p.current(t, s.ChildID).end <- agent.StopCompleted
		if res, ok := s.Wait(context.Background()); !ok || res.StopReason != agent.StopCompleted {
			t.Fatalf("Wait = %+v, %v", res, ok)
		}
		if err := s.Committed(); err != nil {
			t.Fatal(err)
		}
		if err := m.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// startWaited starts a manager over st with p registered, and one child
// on it whose first turn the caller waits for.
func startWaited(t *testing.T, st seam.Store, p seam.Provider) (*manager.Manager, *manager.Started) {
	t.Helper()
	m := manager.New(manager.Options{Store: st})
	if err := m.Register(p); err != nil {
		t.Fatal(err)
	}
	s, err := m.StartContinuable(context.Background(), "bubble", seam.StartRequest{Label: "l", Prompt: "go", Parent: bubbleRoot}, true)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

// shortGatedTurn runs one short waited first turn of a child on p (whose
// turns bp records) inside the calling bubble, and returns the child's id,
// the store and the child writes committed, in order.
func shortGatedTurn(t *testing.T, p seam.Provider, bp *bubbleProvider) (string, *writeCounter, []seam.ChildWrite) {
	t.Helper()
	st := &writeCounter{Store: memstore.New()}
	m, s := startWaited(t, st, p)
	synctest.Wait() // the turn runs (and reached its tool round, if it has one)
	bp.current(t, s.ChildID).end <- agent.StopCompleted
	if res, ok := s.Wait(context.Background()); !ok || res.StopReason != agent.StopCompleted {
		t.Fatalf("Wait = %+v, %v", res, ok)
	}
	if err := s.Committed(); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return s.ChildID, st, append([]seam.ChildWrite(nil), st.writes...)
}

// A gated turn's tool round hurries its lingering record out: one commit
// for the record before the round; once the record is stored, the turn's
// start (this driver journals its inputs after the round) is committed
// before the driver goes on, then the rest.
func TestAGatedToolRoundCommitsTheRecordFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &gatedProvider{}
		_, _, writes := shortGatedTurn(t, p, &p.bubbleProvider)
		if len(writes) != 3 || writes[0].Create == nil || len(writes[1].Dequeue) != 1 || writes[2].Settle == nil {
			t.Errorf("%d commits with a tool round, want 3: the record, the turn's start, then the rest", len(writes))
		}
	})
}

// A gated turn that makes no tool round (a model call and an answer, the
// common short delegation) commits its whole life once.
func TestAGatedAnswerWithoutToolsCommitsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &bubbleProvider{}
		id, st, writes := shortGatedTurn(t, answerOnly{p}, p)
		if len(writes) != 1 || writes[0].Create == nil || writes[0].Settle == nil {
			t.Fatalf("%d commits, want 1 holding the record and the settlement", len(writes))
		}
		if n, err := st.JournalLen(context.Background(), id); err != nil || n != 5 {
			t.Errorf("stored journal = %d events, %v; want the turn's 4 and its budget grant", n, err)
		}
		if q, err := st.Queued(context.Background(), id); err != nil || len(q) != 0 {
			t.Errorf("stored inbox = %+v, %v; want the first message taken", q, err)
		}
	})
}

// answerOnly is bubbleProvider whose drivers are gated and never run a
// tool round.
type answerOnly struct{ *bubbleProvider }

func (p answerOnly) NewDriver(ctx context.Context, r seam.DriverRequest) (seam.Driver, error) {
	d, _ := p.bubbleProvider.NewDriver(ctx, r)
	return gatedOnly{d.(*bubbleDriver)}, nil
}

type gatedOnly struct{ *bubbleDriver }

func (gatedOnly) GatesSideEffects() {}

// When the deferred record cannot be stored, the tool round never runs,
// the caller gets the failure and no id, and nobody is told of a child
// that never existed.
func TestAFailedDeferredRecordHandsOutNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		broken := errors.New("disk on fire")
		st := &heldStore{Store: memstore.New(), release: make(chan struct{}), fail: broken}
		close(st.release)
		p := &gatedProvider{}
		m, s := startWaited(t, st, p)
		res, ok := s.Wait(context.Background())
		if !ok || res.StopReason == agent.StopCompleted {
			t.Errorf("Wait = %+v, %v; want the failure", res, ok)
		}
		if err := s.Committed(); !errors.Is(err, broken) {
			t.Errorf("Committed = %v, want the store's failure", err)
		}
		synctest.Wait()
		if got := p.roundsDone(); len(got) != 1 || got[0] == nil {
			t.Errorf("tool rounds = %v; want the one refused", got)
		}
		if ns := m.TakeNotices(bubbleRoot.Principal, ""); len(ns) != 0 {
			t.Errorf("notices = %+v; nobody was given the id", ns)
		}
		if err := m.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}
