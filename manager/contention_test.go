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
		ctx, f := context.Background(), newContest(t, st, st, "first")
		root, b, id := f.root, f.b, f.id
		inputs := []string{"first"}
		var reads atomic.Int32
		hooked := &beforeEachRead{Store: st, Waker: st.(seam.Waker), then: func() {
			n := int(reads.Add(1))
			if n > raceSends {
				return
			}
			text := fmt.Sprintf("b-turn %d", n)
			inputs = append(inputs, text)
			sent, err := b.Followup(ctx, root, id, text, true)
			if err != nil {
				t.Errorf("B's send %d: %v", n, err)
				return
			}
			if res, ok := sent.Wait(ctx); !ok || res.Output != "done: "+text {
				t.Errorf("B's turn %d = %+v, %v", n, res, ok)
			}
			if err := waitSettled(ctx, st, id); err != nil {
				t.Error(err)
			}
		}}
		a := f.serverA(hooked)
		sent, err := a.Followup(ctx, root, id, "a-turn", true)
		if err != nil {
			t.Fatalf("A's send after %d turns of B between its reads and its claims: %v; want it accepted", reads.Load(), err)
		}
		f.ranOnce(sent, "a-turn", inputs)
	})
}

// Another instance (B) claims the child between A's read of its claim
// (none) and A's claim, raceSends times, and lets it go (its turn ends, it
// settles) before A looks again: A's claim is refused (ErrOwned) and A's
// next look finds the child unclaimed. A's send is accepted and its
// message runs once.
func TestASendWhileAnotherInstanceKeepsClaimingTheChildWaits(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		ctx, f := context.Background(), newContest(t, st, st, "first")
		root, b, id := f.root, f.b, f.id
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
			if _, err := b.Followup(ctx, root, id, text, false); err != nil {
				t.Errorf("B's send %d: %v", n, err)
				return write()
			}
			gate := <-f.held
			err := write()
			if !errors.Is(err, seam.ErrOwned) {
				t.Errorf("A's claim %d while B holds the child: %v; want ErrOwned", n, err)
			}
			// B's turn ends and B lets the child go.
			close(gate)
			if err := waitSettled(ctx, st, id); err != nil {
				t.Error(err)
			}
			return err
		}
		a := f.serverA(hooked)
		sent, err := a.Followup(ctx, root, id, "a-turn", true)
		if err != nil {
			t.Fatalf("A's send after %d claims of B between its look and its claim: %v; want it accepted", claims.Load(), err)
		}
		f.ranOnce(sent, "a-turn", inputs)
	})
}

// A's claim of a stored child fails for a store error more often than the
// store writes' own retry covers (a blip): the send waits and claims
// again rather than answering that the claim failed, and its message runs
// once. A store that keeps failing is answered as such after a few tries,
// not after the whole pacing, and nothing is queued.
func TestASendWhoseClaimFailsForAWhileWaits(t *testing.T) {
	const down = 1 << 20 // every claim fails
	for _, fails := range []int32{manager.StoreTries - 1, down} {
		t.Run(fmt.Sprintf("%d failed claims", fails), func(t *testing.T) {
			onSharedStores(t, func(t *testing.T, st seam.Store) {
				ctx, f := context.Background(), newContest(t, st, st, "first")
				root, calls, id := f.root, f.calls, f.id
				var claims atomic.Int32
				hooked := &aroundClaims{Store: st, Waker: st.(seam.Waker), around: func(write func() error) error {
					if claims.Add(1) <= fails {
						return errors.New("connection reset by peer")
					}
					return write()
				}}
				a := serverOn(t, manager.Options{Store: hooked, OwnerID: "server-a", LeaseTTL: time.Minute,
					WriteAttempts: 2, WriteRetryDelay: time.Millisecond}, &callProvider{calls: calls})
				sent, err := a.Followup(ctx, root, id, "a-turn", true)
				if fails < manager.StoreTries {
					if err != nil {
						t.Fatalf("A's send after %d failed claims: %v; want it accepted", claims.Load(), err)
					}
					f.ranOnce(sent, "a-turn", []string{"first"})
					return
				}
				// Each try's claim is a write tried WriteAttempts (2) times.
				var se *seam.Error
				if !errors.As(err, &se) || se.Code != seam.CodePersistenceUnavailable || !strings.Contains(err.Error(), "connection reset by peer") || claims.Load() > 2*manager.StoreTries {
					t.Fatalf("A's send after %d failed claims = %v; want the store's failure, PERSISTENCE_UNAVAILABLE, after at most %d tries", claims.Load(), err, manager.StoreTries)
				}
				if q, err := st.Queued(ctx, id); err != nil || len(q) != 0 {
					t.Errorf("the stored inbox = %+v, %v; want nothing queued", q, err)
				}
				if n := calls.count("a-turn"); n != 0 {
					t.Errorf("the refused message reached the model %d times", n)
				}
			})
		})
	}
}

// A send whose claim keeps failing gives up once its caller's ctx ends,
// saying so, and leaves nothing queued: waiting is bounded by the caller.
func TestASendWhoseClaimNeverLandsEndsWithItsCaller(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		ctx, f := context.Background(), newContest(t, st, st, "first")
		root, calls, id := f.root, f.calls, f.id
		var claims atomic.Int32
		hooked := &aroundClaims{Store: st, Waker: st.(seam.Waker), around: func(func() error) error {
			claims.Add(1)
			return fmt.Errorf("busy: %w", seam.ErrOwned)
		}}
		a := f.serverA(hooked)
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := a.Followup(cctx, root, id, "a-turn", true)
		if !errors.Is(err, seam.ErrCancelled) {
			t.Fatalf("a send whose claim never lands = %v; want it cancelled with its caller", err)
		}
		if n := claims.Load(); n < 2 {
			t.Errorf("the send tried to claim %d times; want it to try again while its caller waits", n)
		}
		if q, err := st.Queued(ctx, id); err != nil || len(q) != 0 {
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
		st := memstore.New()
		ctx, f := context.Background(), newContest(t, st, st, "first")
		root, b, id := f.root, f.b, f.id
		var claims atomic.Int32
		hooked := &aroundClaims{Store: st, Waker: st, around: func(func() error) error {
			claims.Add(1)
			return fmt.Errorf("the row is being written by another instance right now: %w", seam.ErrOwned)
		}}
		a := f.serverA(hooked)
		began := time.Now()
		_, err := a.Followup(ctx, root, id, "a-turn", true)
		if !errors.Is(err, seam.ErrNotResumable) || !strings.Contains(err.Error(), "kept changing hands") {
			t.Fatalf("a send that never wins its race = %v; want it to give up saying why", err)
		}
		if n, took := claims.Load(), time.Since(began); n < 8 || n > 64 || took > time.Minute {
			t.Errorf("the send tried to claim %d times over %s; want a bounded number of tries, well within a minute", n, took)
		}
		if q, err := st.Queued(ctx, id); err != nil || len(q) != 0 {
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
		bst := &lastLook{Store: st, Waker: st.(seam.Waker), looked: make(chan struct{}, 1)}
		ctx, f := context.Background(), newContest(t, st, bst, "hold first")
		root, id := f.root, f.id
		gate := <-f.held
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
		a := f.serverA(hooked)
		sent, err := a.Followup(ctx, root, id, "a-turn", true)
		if err != nil || sent.Route != manager.RouteForwarded {
			t.Fatalf("A's send to a child B holds = %+v, %v; want it forwarded", sent, err)
		}
		f.ranOnce(sent, "a-turn", []string{"hold first"})
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

// contest is two servers on one store, B and A, and a child B started
// (its model calls counted in calls across both); B's turns whose input
// starts with "hold" hand a gate on held.
type contest struct {
	t     *testing.T
	st    seam.Store
	root  seam.ParentRef
	calls *modelCalls
	held  chan chan struct{}
	b     *manager.Manager
	id    string
}

// newContest starts B on bst (st, or st as B sees it) and the child with
// prompt; unless its first turn holds (prompt starts with "hold"), it
// waits until the turn ran and B let the child go.
func newContest(t *testing.T, st, bst seam.Store, prompt string) *contest {
	t.Helper()
	f := &contest{t: t, st: st, root: seam.ParentRef{Principal: "p", Cwd: "/work"}, calls: &modelCalls{n: map[string]int{}}, held: make(chan chan struct{}, 1)}
	f.b = serverOn(t, manager.Options{Store: bst, OwnerID: "server-b", LeaseTTL: time.Minute}, &callProvider{calls: f.calls, held: f.held})
	s, err := f.b.StartContinuable(context.Background(), "model", seam.StartRequest{Label: "l", Prompt: prompt, Parent: f.root}, false)
	if err != nil {
		t.Fatal(err)
	}
	f.id = s.ChildID
	if !strings.HasPrefix(prompt, "hold") {
		if err := waitSettled(context.Background(), st, f.id); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// serverA starts A on ast (the store as A sees it).
func (f *contest) serverA(ast seam.Store) *manager.Manager {
	return serverOn(f.t, manager.Options{Store: ast, OwnerID: "server-a", LeaseTTL: time.Minute}, &callProvider{calls: f.calls})
}

// ranOnce checks that sent's message ran as a turn answered "done:
// <text>", reached the model once, and that once the child settled its
// journal holds exactly the turns of inputs then the message, in order.
func (f *contest) ranOnce(sent *manager.Sent, text string, inputs []string) {
	t := f.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if res, ok := sent.Wait(ctx); !ok || res.Output != "done: "+text {
		t.Fatalf("the turn of %q = %+v, %v; want it run and stored (queued %v)", text, res, ok, queuedTexts(f.st, sent.ChildID))
	}
	if err := waitSettled(ctx, f.st, sent.ChildID); err != nil {
		t.Fatal(err)
	}
	if n := f.calls.count(text); n != 1 {
		t.Errorf("%q reached the model %d times; want once", text, n)
	}
	checkStoredTranscript(t, f.st, sent.ChildID, append(inputs, text), "\x00")
}
