//go:build postgres

package manager_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// A server killed the moment its child's turn calls the model — its
// writes stop landing there and then, as with kill -9 — has already
// taken the turn's message out of the stored inbox: the server that takes
// the child over closes the cut-off turn and does not run the message
// again. (Before, the turn's start lingered 10 ms in the writer, so a kill
// in that window left the message queued, and it ran twice.)
func TestAKilledTurnsMessageDoesNotRunAgain(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		ctx := context.Background()
		root := seam.ParentRef{Principal: "p", Cwd: "/work"}
		calls := &modelCalls{n: map[string]int{}}
		dead := &killable{Store: st, Waker: st.(seam.Waker), killed: make(chan struct{})}

		a := serverOn(t, manager.Options{Store: dead, OwnerID: "server-a", LeaseTTL: time.Minute}, &callProvider{calls: calls, kill: dead.kill})
		notices := make(chan seam.Notice, 8)
		b := serverOn(t, manager.Options{Store: st, OwnerID: "server-b", LeaseTTL: 150 * time.Millisecond,
			OnNotice: func(_ string, n seam.Notice) { notices <- n }}, &callProvider{calls: calls})

		s, err := a.StartContinuable(ctx, "model", seam.StartRequest{Label: "l", Prompt: "first", Parent: root}, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := waitSettled(ctx, st, s.ChildID); err != nil {
			t.Fatal(err)
		}
		// A follow-up resumes the child at A; its turn's model call kills A.
		// (Before the fix the kill could come before the follow-up's own
		// commit; unacknowledged, it must still run at most once.)
		if _, err := a.Followup(ctx, root, s.ChildID, "kill", false); err != nil {
			t.Logf("the follow-up was not acknowledged: %v", err)
		}
		select {
		case <-dead.killed:
		case <-time.After(30 * time.Second):
			t.Fatal("the follow-up's turn never called the model")
		}
		if err := b.Recover(ctx); err != nil { // B sweeps from now on, at each renewal
			t.Fatal(err)
		}
		// A's lease runs out: B's sweep takes the child over.
		if err := st.Renew(ctx, seam.Owner{ID: "server-a", Expires: time.Now().Add(-time.Second)}); err != nil {
			t.Fatal(err)
		}
		if err := waitSettled(ctx, st, s.ChildID); err != nil {
			t.Fatal(err)
		}
		if n := calls.count("kill"); n != 1 {
			t.Fatalf("the follow-up reached the model %d times; want once (the turn the kill cut is closed, not re-run)", n)
		}
		takenOver(t, notices, s.ChildID)
		checkStoredTranscript(t, st, s.ChildID, []string{"first", "kill"}, "done: kill")
	})
}

// A turn whose taking write is refused — another server took the child
// over just before, so the message is still queued there for the new
// owner — never calls the model: the turn is cancelled first.
func TestATurnWhoseTakingIsRefusedNeverCallsTheModel(t *testing.T) {
	ctx := context.Background()
	root := seam.ParentRef{Principal: "p", Cwd: "/work"}
	calls := &modelCalls{n: map[string]int{}, ended: make(chan string, 4)}
	st := &refuseTaking{Store: memstore.New()}
	m := serverOn(t, manager.Options{Store: st, OwnerID: "server-a", LeaseTTL: time.Minute}, &callProvider{calls: calls})
	s, err := m.StartContinuable(ctx, "model", seam.StartRequest{Label: "l", Prompt: "first", Parent: root}, true)
	if err != nil {
		t.Fatal(err)
	}
	if res, ok := s.Wait(ctx); !ok || res.StopReason != agent.StopCompleted {
		t.Fatalf("the first turn = %+v, %v", res, ok)
	}
	st.refuse.Store(true)
	// The refusal fails the send itself when the message's own commit
	// carries its taking too; either way its turn must not call the model.
	if sent, err := m.Followup(ctx, root, s.ChildID, "refused", true); err == nil {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if res, ok := sent.Wait(wctx); !ok || res.StopReason == agent.StopCompleted {
			t.Fatalf("the follow-up's turn = %+v, %v; want it failed: its message was never taken here", res, ok)
		}
	}
	select {
	case <-calls.ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the follow-up's turn never ended")
	}
	if n := calls.count("refused"); n != 0 {
		t.Fatalf("the model was called %d times for a message this server could not take", n)
	}
}

// refuseTaking refuses, once refuse is set, every write that takes
// messages out of a child's inbox, as a store does once another owner
// took the child over.
type refuseTaking struct {
	seam.Store
	refuse atomic.Bool
}

func (s *refuseTaking) WriteChild(ctx context.Context, id string, w seam.ChildWrite) error {
	if s.refuse.Load() && len(w.Dequeue) > 0 {
		return fmt.Errorf("child %s was taken over: %w", id, seam.ErrOwned)
	}
	return s.Store.WriteChild(ctx, id, w)
}

// modelCalls counts a provider's model calls by their input, across
// servers.
type modelCalls struct {
	mu    sync.Mutex
	n     map[string]int
	ended chan string // when set, gets each turn's input as the turn ends (turns after the first)
}

func (c *modelCalls) add(in string) {
	c.mu.Lock()
	c.n[in]++
	c.mu.Unlock()
}

func (c *modelCalls) count(in string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[in]
}

// callProvider runs continuable children whose turns journal their inputs
// and then call the model (counted): it answers at once, except for the
// input "kill", on which kill (when set) is called first, and the call
// then hangs until the turn is cancelled, like a server that died in it.
// With held set, a turn whose input starts with "hold" hands a gate on it
// after its model call and answers once the gate is closed.
type callProvider struct {
	calls *modelCalls
	kill  func()
	held  chan chan struct{}
}

func (p *callProvider) Name() string                    { return "model" }
func (p *callProvider) Capabilities() seam.Capabilities { return seam.Capabilities{} }
func (p *callProvider) InheritsParentContext() bool     { return false }
func (p *callProvider) Continuable()                    {}
func (p *callProvider) Prepare(context.Context, seam.StartRequest) (seam.CreationInputs, error) {
	return seam.CreationInputs{}, nil
}
func (p *callProvider) NewDriver(_ context.Context, r seam.DriverRequest) (seam.Driver, error) {
	return &callDriver{p: p, j: r.Journal}, nil
}

type callDriver struct {
	p *callProvider
	j *agent.Journal
}

func (d *callDriver) Journal() *agent.Journal { return d.j }
func (d *callDriver) Close() error            { return nil }

func (d *callDriver) RunTurn(ctx context.Context, inputs []agent.Input) agent.TurnResult {
	if c := d.p.calls.ended; c != nil && inputs[0].Text != "first" {
		defer func() { c <- inputs[len(inputs)-1].Text }()
	}
	turn := d.j.NextTurn()
	d.j.Append(agent.Event{Kind: agent.EventTurnStart, Turn: turn})
	for _, in := range inputs {
		d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: turn, Source: in.Source, Message: &seam.Message{Role: seam.RoleUser, Content: in.Text}})
	}
	text := inputs[len(inputs)-1].Text
	if ctx.Err() != nil { // as the agent's loop: no model call for a cancelled turn
		d.j.Append(agent.Event{Kind: agent.EventTurnEnd, Turn: turn, StopReason: agent.StopAborted})
		return agent.TurnResult{StopReason: agent.StopAborted}
	}
	d.p.calls.add(text)
	if text == "kill" && d.p.kill != nil {
		d.p.kill()
		<-ctx.Done()
		return agent.TurnResult{StopReason: agent.StopAborted}
	}
	if strings.HasPrefix(text, "hold") && d.p.held != nil {
		gate := make(chan struct{})
		d.p.held <- gate
		select {
		case <-gate:
		case <-ctx.Done():
			d.j.Append(agent.Event{Kind: agent.EventTurnEnd, Turn: turn, StopReason: agent.StopAborted})
			return agent.TurnResult{StopReason: agent.StopAborted}
		}
	}
	d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: turn, Message: &seam.Message{Role: seam.RoleAssistant, Content: "done: " + text}})
	d.j.Append(agent.Event{Kind: agent.EventTurnEnd, Turn: turn, StopReason: agent.StopCompleted})
	return agent.TurnResult{Output: "done: " + text, StopReason: agent.StopCompleted}
}

// killable is a server's store that stops taking writes once killed, as
// the server's process would by dying: nothing it writes after that lands.
type killable struct {
	seam.Store
	seam.Waker
	once   sync.Once
	killed chan struct{}
}

var errKilled = errors.New("the server was killed")

func (k *killable) kill() { k.once.Do(func() { close(k.killed) }) }

func (k *killable) dead() bool {
	select {
	case <-k.killed:
		return true
	default:
		return false
	}
}

func (k *killable) WriteChild(ctx context.Context, id string, w seam.ChildWrite) error {
	if k.dead() {
		return errKilled
	}
	return k.Store.WriteChild(ctx, id, w)
}

func (k *killable) Renew(ctx context.Context, o seam.Owner) error {
	if k.dead() {
		return errKilled
	}
	return k.Store.Renew(ctx, o)
}

// A server that starts after another died takes that one's children over
// in its Recover and runs what was queued for them, as a sweep does: a
// follow-up another instance acknowledged while the dead owner's lease
// still ran must not wait for a next send. (Before, Recover closed the
// epoch and left the message in the stored inbox.)
func TestRecoverRunsWhatWasQueuedForAChildItTakesOver(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		ctx := context.Background()
		root := seam.ParentRef{Principal: "p", Cwd: "/work"}
		calls := &modelCalls{n: map[string]int{}}
		dead := &killable{Store: st, Waker: st.(seam.Waker), killed: make(chan struct{})}

		a := serverOn(t, manager.Options{Store: dead, OwnerID: "server-a", LeaseTTL: time.Minute}, &callProvider{calls: calls, kill: dead.kill})
		b := serverOn(t, manager.Options{Store: st, OwnerID: "server-b", LeaseTTL: time.Minute}, &callProvider{calls: calls})
		s, err := a.StartContinuable(ctx, "model", seam.StartRequest{Label: "l", Prompt: "kill", Parent: root}, false)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-dead.killed:
		case <-time.After(30 * time.Second):
			t.Fatal("the first turn never called the model")
		}
		// A holds the child, dead; B forwards a follow-up to its stored inbox.
		sent, err := b.Followup(ctx, root, s.ChildID, "queued", false)
		if err != nil {
			t.Fatal(err)
		}
		if sent.Route != "forwarded" {
			t.Fatalf("route %q; want forwarded (A still holds the child)", sent.Route)
		}
		if err := st.Renew(ctx, seam.Owner{ID: "server-a", Expires: time.Now().Add(-time.Second)}); err != nil {
			t.Fatal(err)
		}
		c := serverOn(t, manager.Options{Store: st, OwnerID: "server-c", LeaseTTL: time.Minute}, &callProvider{calls: calls})
		if err := c.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		if err := waitSettled(ctx, st, s.ChildID); err != nil {
			t.Fatalf("the taken-over child did not run its queued follow-up: %v", err)
		}
		if n := calls.count("queued"); n != 1 {
			t.Fatalf("the queued follow-up reached the model %d times; want once", n)
		}
		checkStoredTranscript(t, st, s.ChildID, []string{"kill", "queued"}, "done: kill")
	})
}

// A resume reads the journal before it claims the child. On a shared
// store another instance may, in between, resume the child, run a turn
// and let it go: the claim must then be refused (the journal grew) and
// the resume read again, so the turn runs on the whole history and is
// stored. (Before, the claim was granted on the stale read: the turn ran
// on a journal missing the other instance's turn and its writes were
// refused, or taken for landed, and lost.)
func TestAResumeThatReadAStaleJournalReadsItAgain(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		ctx := context.Background()
		root := seam.ParentRef{Principal: "p", Cwd: "/work"}
		calls := &modelCalls{n: map[string]int{}}
		b := serverOn(t, manager.Options{Store: st, OwnerID: "server-b", LeaseTTL: time.Minute}, &callProvider{calls: calls})
		s, err := b.StartContinuable(ctx, "model", seam.StartRequest{Label: "l", Prompt: "first", Parent: root}, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := waitSettled(ctx, st, s.ChildID); err != nil {
			t.Fatal(err)
		}
		// A's first read of the journal lets B run a whole turn before A claims.
		hooked := &afterFirstRead{Store: st, Waker: st.(seam.Waker), then: func() {
			sent, err := b.Followup(ctx, root, s.ChildID, "b-turn", true)
			if err != nil {
				t.Error(err)
				return
			}
			if res, ok := sent.Wait(ctx); !ok || res.Output != "done: b-turn" {
				t.Errorf("B's turn = %+v, %v", res, ok)
			}
			if err := waitSettled(ctx, st, s.ChildID); err != nil {
				t.Error(err)
			}
		}}
		a := serverOn(t, manager.Options{Store: hooked, OwnerID: "server-a", LeaseTTL: time.Minute}, &callProvider{calls: calls})
		sent, err := a.Followup(ctx, root, s.ChildID, "a-turn", true)
		if err != nil {
			t.Fatal(err)
		}
		if res, ok := sent.Wait(ctx); !ok || res.Output != "done: a-turn" {
			t.Fatalf("A's turn = %+v, %v; want it run and stored", res, ok)
		}
		if err := waitSettled(ctx, st, s.ChildID); err != nil {
			t.Fatal(err)
		}
		if n := calls.count("a-turn"); n != 1 {
			t.Errorf("A's message reached the model %d times; want once", n)
		}
		checkStoredTranscript(t, st, s.ChildID, []string{"first", "b-turn", "a-turn"}, "\x00")
	})
}

// afterFirstRead is a store whose first journal read runs then before it
// answers with what it read: another instance acting between a resume's
// read and its claim.
type afterFirstRead struct {
	seam.Store
	seam.Waker
	once sync.Once
	then func()
}

func (s *afterFirstRead) Events(ctx context.Context, id string) ([]agent.Event, error) {
	events, err := s.Store.Events(ctx, id)
	s.once.Do(s.then)
	return events, err
}

// serverOn is a manager of opts with p registered, closed at the test's end.
func serverOn(t *testing.T, opts manager.Options, p *callProvider) *manager.Manager {
	t.Helper()
	m := manager.New(opts)
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	if err := m.Register(p); err != nil {
		t.Fatal(err)
	}
	return m
}
