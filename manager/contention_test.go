//go:build postgres

package manager_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Sends under contention between instances: a follow-up that meets a race
// another try can win waits and tries again instead of being refused, and
// its message runs exactly once. Each test makes the race happen more
// often in a row than the three tries a send used to give it (it was
// refused with "busy settling; send again").

// raceSends is how many times in a row each test's race hits a send: more
// than the old three tries (three resumes of five journal reads each, for
// the stale-journal race) could take.
const raceSends = 16

// Another instance (B) runs a whole turn of the child between each of A's
// journal reads and A's claim, raceSends times: A's claim is refused
// (ErrStale) each time, and A reads again. Its send is accepted, and its
// message runs once, after B's turns.
func TestASendWhileAnotherInstanceKeepsRunningTheChildWaits(t *testing.T) {
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
		inputs := []string{"first"}
		var reads atomic.Int32
		hooked := &beforeEachRead{Store: st, Waker: st.(seam.Waker), then: func() {
			n := int(reads.Add(1))
			if n > raceSends {
				return
			}
			text := fmt.Sprintf("b-turn %d", n)
			inputs = append(inputs, text)
			sent, err := b.Followup(ctx, root, s.ChildID, text, true)
			if err != nil {
				t.Errorf("B's send %d: %v", n, err)
				return
			}
			if res, ok := sent.Wait(ctx); !ok || res.Output != "done: "+text {
				t.Errorf("B's turn %d = %+v, %v", n, res, ok)
			}
			if err := waitSettled(ctx, st, s.ChildID); err != nil {
				t.Error(err)
			}
		}}
		a := serverOn(t, manager.Options{Store: hooked, OwnerID: "server-a", LeaseTTL: time.Minute}, &callProvider{calls: calls})
		sent, err := a.Followup(ctx, root, s.ChildID, "a-turn", true)
		if err != nil {
			t.Fatalf("A's send after %d turns of B between its reads and its claims: %v; want it accepted", reads.Load(), err)
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
		checkStoredTranscript(t, st, s.ChildID, append(inputs, "a-turn"), "\x00")
	})
}

// Another instance (B) claims the child between A's read of its claim
// (none) and A's claim, raceSends times, and lets it go (its turn ends, it
// settles) before A looks again: A's claim is refused (ErrOwned) and A's
// next look finds the child unclaimed. A's send is accepted and its
// message runs once.
func TestASendWhileAnotherInstanceKeepsClaimingTheChildWaits(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		ctx := context.Background()
		root := seam.ParentRef{Principal: "p", Cwd: "/work"}
		calls := &modelCalls{n: map[string]int{}}
		pb := &holdsProvider{calls: calls, held: make(chan chan struct{}, 1)}
		b := manager.New(manager.Options{Store: st, OwnerID: "server-b", LeaseTTL: time.Minute})
		t.Cleanup(func() { _ = b.Close(context.Background()) })
		if err := b.Register(pb); err != nil {
			t.Fatal(err)
		}
		s, err := b.StartContinuable(ctx, "model", seam.StartRequest{Label: "l", Prompt: "first", Parent: root}, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := waitSettled(ctx, st, s.ChildID); err != nil {
			t.Fatal(err)
		}
		inputs := []string{"first"}
		var claims atomic.Int32
		hooked := &aroundClaims{Store: st, Waker: st.(seam.Waker)}
		hooked.around = func(write func() error) error {
			n := int(claims.Add(1))
			if n > raceSends {
				return write()
			}
			// B takes the child and is in a turn when A's claim lands.
			text := fmt.Sprintf("hold %d", n)
			inputs = append(inputs, text)
			if _, err := b.Followup(ctx, root, s.ChildID, text, false); err != nil {
				t.Errorf("B's send %d: %v", n, err)
				return write()
			}
			gate := <-pb.held
			err := write()
			if !errors.Is(err, seam.ErrOwned) {
				t.Errorf("A's claim %d while B holds the child: %v; want ErrOwned", n, err)
			}
			// B's turn ends and B lets the child go.
			close(gate)
			if err := waitSettled(ctx, st, s.ChildID); err != nil {
				t.Error(err)
			}
			return err
		}
		pa := &holdsProvider{calls: calls, held: make(chan chan struct{}, 1)}
		a := manager.New(manager.Options{Store: hooked, OwnerID: "server-a", LeaseTTL: time.Minute})
		t.Cleanup(func() { _ = a.Close(context.Background()) })
		if err := a.Register(pa); err != nil {
			t.Fatal(err)
		}
		sent, err := a.Followup(ctx, root, s.ChildID, "a-turn", true)
		if err != nil {
			t.Fatalf("A's send after %d claims of B between its look and its claim: %v; want it accepted", claims.Load(), err)
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
		checkStoredTranscript(t, st, s.ChildID, append(inputs, "a-turn"), "\x00")
	})
}

// A's claim of a stored child fails for a store error more often than the
// store writes' own retry covers (a database failing over, say): the send
// waits and claims again rather than answering that the claim failed, and
// its message runs once.
func TestASendWhoseClaimFailsForAWhileWaits(t *testing.T) {
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
		var claims atomic.Int32
		hooked := &aroundClaims{Store: st, Waker: st.(seam.Waker), around: func(write func() error) error {
			if claims.Add(1) <= raceSends {
				return errors.New("connection reset by peer")
			}
			return write()
		}}
		a := serverOn(t, manager.Options{Store: hooked, OwnerID: "server-a", LeaseTTL: time.Minute,
			WriteAttempts: 2, WriteRetryDelay: time.Millisecond}, &callProvider{calls: calls})
		sent, err := a.Followup(ctx, root, s.ChildID, "a-turn", true)
		if err != nil {
			t.Fatalf("A's send after %d failed claims: %v; want it accepted", claims.Load(), err)
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
		checkStoredTranscript(t, st, s.ChildID, []string{"first", "a-turn"}, "\x00")
	})
}

// A send whose claim keeps failing gives up once its caller's ctx ends,
// saying so, and leaves nothing queued: waiting is bounded by the caller.
func TestASendWhoseClaimNeverLandsEndsWithItsCaller(t *testing.T) {
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
		var claims atomic.Int32
		hooked := &aroundClaims{Store: st, Waker: st.(seam.Waker), around: func(func() error) error {
			claims.Add(1)
			return fmt.Errorf("busy: %w", seam.ErrOwned)
		}}
		a := serverOn(t, manager.Options{Store: hooked, OwnerID: "server-a", LeaseTTL: time.Minute}, &callProvider{calls: calls})
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err = a.Followup(cctx, root, s.ChildID, "a-turn", true)
		if !errors.Is(err, seam.ErrCancelled) {
			t.Fatalf("a send whose claim never lands = %v; want it cancelled with its caller", err)
		}
		if n := claims.Load(); n < 2 {
			t.Errorf("the send tried to claim %d times; want it to try again while its caller waits", n)
		}
		if q, err := st.Queued(ctx, s.ChildID); err != nil || len(q) != 0 {
			t.Errorf("the stored inbox = %+v, %v; want nothing queued", q, err)
		}
		if n := calls.count("a-turn"); n != 0 {
			t.Errorf("the refused message reached the model %d times", n)
		}
	})
}

// A send whose claim is refused every time, by a store that shows nobody
// holding the child (a livelock), from a caller without a deadline, gives
// up after a bounded number of tries, saying why, and leaves nothing
// queued: it never spins for ever.
func TestASendThatNeverWinsItsRaceGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := memstore.New()
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
		var claims atomic.Int32
		hooked := &aroundClaims{Store: st, Waker: st, around: func(func() error) error {
			claims.Add(1)
			return fmt.Errorf("the row is being written by another instance right now: %w", seam.ErrOwned)
		}}
		a := serverOn(t, manager.Options{Store: hooked, OwnerID: "server-a", LeaseTTL: time.Minute}, &callProvider{calls: calls})
		began := time.Now()
		_, err = a.Followup(ctx, root, s.ChildID, "a-turn", true)
		if !errors.Is(err, seam.ErrNotResumable) || !strings.Contains(err.Error(), "kept changing hands") {
			t.Fatalf("a send that never wins its race = %v; want it to give up saying why", err)
		}
		if n, took := claims.Load(), time.Since(began); n < 8 || n > 64 || took > time.Minute {
			t.Errorf("the send tried to claim %d times over %s; want a bounded number of tries, well within a minute", n, took)
		}
		if q, err := st.Queued(ctx, s.ChildID); err != nil || len(q) != 0 {
			t.Errorf("the stored inbox = %+v, %v; want nothing queued", q, err)
		}
		_ = b.Close(ctx)
		_ = a.Close(ctx)
	})
}

// A send at A to a child B holds is admitted to its stored inbox for B;
// but B let the child go (its turn ended, it settled and looked at the
// stored inbox once more) just before the admission landed, so A resumes
// the child to run it. A's claim is refused four times as if the
// child's row were being written by another instance right then (nobody
// holds it): A claims again, and the acknowledged message runs once.
// (Before, the first refusal left it queued until the child's next send.)
func TestAForwardedSendWhoseOwnerLetGoRunsThoughItsClaimIsBusy(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		ctx := context.Background()
		root := seam.ParentRef{Principal: "p", Cwd: "/work"}
		calls := &modelCalls{n: map[string]int{}}
		pb := &holdsProvider{calls: calls, held: make(chan chan struct{}, 1)}
		bst := &lastLook{Store: st, Waker: st.(seam.Waker), looked: make(chan struct{}, 1)}
		b := manager.New(manager.Options{Store: bst, OwnerID: "server-b", LeaseTTL: time.Minute})
		t.Cleanup(func() { _ = b.Close(context.Background()) })
		if err := b.Register(pb); err != nil {
			t.Fatal(err)
		}
		s, err := b.StartContinuable(ctx, "model", seam.StartRequest{Label: "l", Prompt: "hold first", Parent: root}, false)
		if err != nil {
			t.Fatal(err)
		}
		gate := <-pb.held
		var claims atomic.Int32
		hooked := &aroundClaims{Store: st, Waker: st.(seam.Waker),
			beforeEnqueue: func() {
				close(gate)
				select {
				case <-bst.looked:
				case <-time.After(30 * time.Second):
					t.Error("B never looked at the stored inbox after it settled")
				}
			},
			around: func(write func() error) error {
				if claims.Add(1) <= 4 {
					return fmt.Errorf("the row is being written by another instance right now: %w", seam.ErrOwned)
				}
				return write()
			}}
		pa := &holdsProvider{calls: calls, held: make(chan chan struct{}, 1)}
		a := manager.New(manager.Options{Store: hooked, OwnerID: "server-a", LeaseTTL: time.Minute})
		t.Cleanup(func() { _ = a.Close(context.Background()) })
		if err := a.Register(pa); err != nil {
			t.Fatal(err)
		}
		sent, err := a.Followup(ctx, root, s.ChildID, "a-turn", true)
		if err != nil || sent.Route != manager.RouteForwarded {
			t.Fatalf("A's send to a child B holds = %+v, %v; want it forwarded", sent, err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if res, ok := sent.Wait(wctx); !ok || res.Output != "done: a-turn" {
			t.Fatalf("A's turn = %+v, %v; want it run (queued %v)", res, ok, queuedTexts(st, s.ChildID))
		}
		if err := waitSettled(ctx, st, s.ChildID); err != nil {
			t.Fatal(err)
		}
		if n := calls.count("a-turn"); n != 1 {
			t.Errorf("A's message reached the model %d times; want once", n)
		}
		checkStoredTranscript(t, st, s.ChildID, []string{"hold first", "a-turn"}, "\x00")
	})
}

// lastLook is a store that signals looked when its child's stored inbox
// was read while the child was unclaimed: after a settlement, its owner's
// last look (settledQueue).
type lastLook struct {
	seam.Store
	seam.Waker
	looked chan struct{}
}

func (s *lastLook) Queued(ctx context.Context, id string) ([]seam.QueuedMessage, error) {
	q, err := s.Store.Queued(ctx, id)
	if _, held, cerr := s.Store.ClaimOf(ctx, id); cerr == nil && !held {
		select {
		case s.looked <- struct{}{}:
		default:
		}
	}
	return q, err
}

// queuedTexts is the child's stored inbox, for a failure's message.
func queuedTexts(st seam.Store, id string) []string {
	q, _ := st.Queued(context.Background(), id)
	var out []string
	for _, m := range q {
		out = append(out, m.Text)
	}
	return out
}

// beforeEachRead is a store whose journal reads run then before they read:
// another instance acting between a resume's read and its claim (the
// read's result is what then left).
type beforeEachRead struct {
	seam.Store
	seam.Waker
	then func()
}

func (s *beforeEachRead) Events(ctx context.Context, id string) ([]agent.Event, error) {
	events, err := s.Store.Events(ctx, id)
	s.then()
	return events, err
}

// aroundClaims is a store whose claims (writes that claim a child without
// creating it) go through around, which decides when, and whether, the
// write itself runs; and whose admissions (writes that enqueue) run
// beforeEnqueue first, when set.
type aroundClaims struct {
	seam.Store
	seam.Waker
	around        func(write func() error) error
	beforeEnqueue func()
}

func (s *aroundClaims) WriteChild(ctx context.Context, id string, w seam.ChildWrite) error {
	if len(w.Enqueue) > 0 && s.beforeEnqueue != nil {
		s.beforeEnqueue()
	}
	if w.Claim == nil || w.Create != nil || s.around == nil {
		return s.Store.WriteChild(ctx, id, w)
	}
	return s.around(func() error { return s.Store.WriteChild(ctx, id, w) })
}

// holdsProvider runs continuable children whose turns journal their input
// and answer at once ("done: <input>", counted in calls), except a turn
// whose input starts with "hold": it hands a gate on held and answers once
// the gate is closed.
type holdsProvider struct {
	calls *modelCalls
	held  chan chan struct{}
}

func (p *holdsProvider) Name() string                    { return "model" }
func (p *holdsProvider) Capabilities() seam.Capabilities { return seam.Capabilities{} }
func (p *holdsProvider) InheritsParentContext() bool     { return false }
func (p *holdsProvider) Continuable()                    {}
func (p *holdsProvider) Prepare(context.Context, seam.StartRequest) (seam.CreationInputs, error) {
	return seam.CreationInputs{}, nil
}
func (p *holdsProvider) NewDriver(_ context.Context, r seam.DriverRequest) (seam.Driver, error) {
	return &holdsDriver{p: p, j: r.Journal}, nil
}

type holdsDriver struct {
	p *holdsProvider
	j *agent.Journal
}

func (d *holdsDriver) Journal() *agent.Journal { return d.j }
func (d *holdsDriver) Close() error            { return nil }

func (d *holdsDriver) RunTurn(ctx context.Context, inputs []agent.Input) agent.TurnResult {
	turn := d.j.NextTurn()
	d.j.Append(agent.Event{Kind: agent.EventTurnStart, Turn: turn})
	for _, in := range inputs {
		d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: turn, Source: in.Source, Message: &seam.Message{Role: seam.RoleUser, Content: in.Text}})
	}
	text := inputs[len(inputs)-1].Text
	d.p.calls.add(text)
	if strings.HasPrefix(text, "hold") {
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
