package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// RunShared runs the cases of the stores' shared abilities, seam.Waker,
// seam.Interrupts and seam.AwaitMarks, which every backend implements. open returns two
// handles of one new, empty store: a watcher and a writer. A shared store
// gives two handles of one database (two instances), so a case proves a
// wake-up crosses instances; a store one process opens gives the same
// handle twice. The suite closes both when the subtest ends.
//
// A wake-up is a hint that may come late (a shared store's arrives after
// the commit, over the network), so a case waits for it, up to wakeWait;
// what it may not do is never come.
func RunShared(t *testing.T, open func(t *testing.T) (watcher, writer seam.Store)) {
	t.Helper()
	runPairs(t, open, []pairCase{
		{"an inbox admission wakes the child's watchers", testWakeOnEnqueue},
		{"a turn's end wakes the child's watchers", testWakeOnTurnEnd},
		{"a journal step wakes the journal's watchers, not the child's", testWakeOnJournalStep},
		{"a settlement wakes the child's watchers and its notice's recipient", testWakeOnSettle},
		{"a settlement notice to a parent's inbox wakes the parent's watchers", testWakeParentInbox},
		{"a queued notice wakes its address's watchers", testWakeOnNotice},
		{"a recorded interrupt request wakes the child's watchers", testWakeOnInterrupt},
		{"a stopped watch is not woken; the others are", testWakeStopped},
		{"interrupt requests are kept once, coalesce, and are taken once", testInterrupts},
		{"a fenced take refuses a former owner and leaves the request", testInterruptFenced},
		{"concurrent takers: one gets the request", testInterruptTakenOnce},
		{"a deleted child's request goes with it", testInterruptDeleted},
		{"abandonment marks of awaited messages are kept, cleared and taken once", testAwaitMarks},
		{"concurrent takers: one gets an abandonment mark", testAwaitMarkTakenOnce},
		{"a deleted child's abandonment marks go with it", testAwaitMarksDeleted},
	})
}

// pairCase is a case run on two handles of one store.
type pairCase struct {
	name string
	fn   func(t *testing.T, w, s seam.Store)
}

// runPairs runs each case on a new pair of handles open returns, closing
// both when the subtest ends.
func runPairs(t *testing.T, open func(t *testing.T) (watcher, writer seam.Store), cases []pairCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, s := open(t)
			t.Cleanup(func() { _ = w.Close(); _ = s.Close() })
			tc.fn(t, w, s)
		})
	}
}

// wakeWait bounds how long a case waits for a wake-up that must come.
const wakeWait = 10 * time.Second

// watch watches key on s (which must be a seam.Waker).
func watch(t *testing.T, s seam.Store, key string) <-chan struct{} {
	t.Helper()
	wk, ok := s.(seam.Waker)
	if !ok {
		t.Fatalf("%T is not a seam.Waker", s)
	}
	c, stop, err := wk.Watch(ctx, key)
	if err != nil {
		t.Fatalf("Watch(%q): %v", key, err)
	}
	t.Cleanup(stop)
	return c
}

func interrupts(t *testing.T, s seam.Store) seam.Interrupts {
	t.Helper()
	is, ok := s.(seam.Interrupts)
	if !ok {
		t.Fatalf("%T is not a seam.Interrupts", s)
	}
	return is
}

// woken waits for a wake-up on c.
func woken(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(wakeWait):
		t.Fatalf("no wake-up within %s after %s", wakeWait, what)
	}
}

// quiet asserts no wake-up is pending on c now (nothing was written since
// the watch began).
func quiet(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
		t.Fatalf("a wake-up %s", what)
	default:
	}
}

func testWakeOnEnqueue(t *testing.T, w, s seam.Store) {
	mustClaim(t, s, header("c", "principal:local", 0), owner("owner-a"))
	c := watch(t, w, "c")
	quiet(t, c, "before any write")
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Enqueue: []seam.QueuedMessage{{ID: "m1", Text: "more"}}}); err != nil {
		t.Fatal(err)
	}
	woken(t, c, "a message was admitted to the child's inbox")
	// A later admission wakes it again: a wake-up is not used up.
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Enqueue: []seam.QueuedMessage{{ID: "m2", Text: "again"}}}); err != nil {
		t.Fatal(err)
	}
	woken(t, c, "a second message was admitted")
}

func testWakeOnTurnEnd(t *testing.T, w, s seam.Store) {
	mustClaim(t, s, header("c", "principal:local", 0), owner("owner-a"))
	c := watch(t, w, "c")
	events := turn(0, 1, "go")
	// A turn's start and its messages are progress nobody waits for.
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Events: events[:3]}); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Events: events[3:]}); err != nil {
		t.Fatal(err)
	}
	woken(t, c, "the turn's end was appended")
}

func testWakeOnJournalStep(t *testing.T, w, s seam.Store) {
	mustClaim(t, s, header("c", "principal:local", 0), owner("owner-a"))
	j, c := watch(t, w, seam.JournalKey("c")), watch(t, w, "c")
	later := watch(t, w, "principal:later")
	events := turn(0, 1, "go")
	for i, step := range [][]agent.Event{events[:2], events[2:3]} {
		if err := s.WriteChild(ctx, "c", seam.ChildWrite{Events: step}); err != nil {
			t.Fatal(err)
		}
		woken(t, j, fmt.Sprintf("step %d of a turn was appended to the child's journal", i+1))
	}
	// A later commit's wake-up comes after the steps' (a shared store
	// delivers them in commit order), so a wake-up of the child's id by a
	// step would have come by the time it does.
	if err := s.AddNotice(ctx, "principal:later", seam.Notice{ChildID: "x", Source: agent.SourceReport, Text: "later"}); err != nil {
		t.Fatal(err)
	}
	woken(t, later, "a notice was queued after the steps")
	quiet(t, c, "of the child's id by a step inside a turn: its owner's inbox and interrupt waiters would re-read the store at every step")
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Events: events[3:]}); err != nil {
		t.Fatal(err)
	}
	woken(t, j, "the turn's end was appended")
	woken(t, c, "the turn's end was appended")
}

func testWakeOnSettle(t *testing.T, w, s seam.Store) {
	mustClaim(t, s, header("c", "principal:local", 0), owner("owner-a"))
	c, p := watch(t, w, "c"), watch(t, w, "principal:local")
	err := s.WriteChild(ctx, "c", seam.ChildWrite{Events: turn(0, 1, "done"), Settle: &seam.Checkpoint{Seq: 4},
		Notify: &seam.ParentNotice{To: "principal:local", Notice: seam.Notice{ChildID: "c", Source: agent.SourceSettled, Text: "done"}}})
	if err != nil {
		t.Fatal(err)
	}
	woken(t, c, "the child settled")
	woken(t, p, "the child's settlement notice was queued for the principal")
}

func testWakeParentInbox(t *testing.T, w, s seam.Store) {
	mustClaim(t, s, header("p", "principal:local", 0), owner("owner-a"))
	mustClaim(t, s, header("c", "p", time.Second), owner("owner-a"))
	p := watch(t, w, "p")
	err := s.WriteChild(ctx, "c", seam.ChildWrite{Settle: &seam.Checkpoint{},
		Notify: &seam.ParentNotice{To: "p", Inbox: true, Message: seam.QueuedMessage{ID: "n1", Text: "c settled", Source: agent.SourceSettled}}})
	if err != nil {
		t.Fatal(err)
	}
	woken(t, p, "a child's settlement notice joined the parent's inbox")
}

func testWakeOnNotice(t *testing.T, w, s seam.Store) {
	p := watch(t, w, "principal:alice")
	if err := s.AddNotice(ctx, "principal:alice", seam.Notice{ChildID: "c", Source: agent.SourceReport, Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	woken(t, p, "a notice was queued under the address")
}

func testWakeOnInterrupt(t *testing.T, w, s seam.Store) {
	mustClaim(t, s, header("c", "principal:local", 0), owner("owner-a"))
	c := watch(t, w, "c")
	if err := interrupts(t, s).RequestInterrupt(ctx, "c", seam.InterruptRequest{Reason: "stop", From: "owner-b"}); err != nil {
		t.Fatal(err)
	}
	woken(t, c, "an interrupt request was recorded for the child")
}

func testWakeStopped(t *testing.T, w, s seam.Store) {
	mustCreate(t, s, header("c", "principal:local", 0))
	wk := w.(seam.Waker)
	stopped, stop, err := wk.Watch(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	stop()
	live := watch(t, w, "c")
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Enqueue: []seam.QueuedMessage{{ID: "m1"}}}); err != nil {
		t.Fatal(err)
	}
	woken(t, live, "a message was admitted")
	// The live watch has been signalled, so the stopped one would have
	// been by now (a store signals all of a key's watches at once).
	quiet(t, stopped, "reached a stopped watch")
}

func testInterrupts(t *testing.T, w, s seam.Store) {
	mustCreate(t, s, header("c", "principal:local", 0))
	iw, is := interrupts(t, w), interrupts(t, s)
	if r, ok, err := iw.TakeInterrupt(ctx, "c", nil); err != nil || ok {
		t.Fatalf("TakeInterrupt with none pending = %+v, %v, %v; want none", r, ok, err)
	}
	at := time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC)
	if err := is.RequestInterrupt(ctx, "c", seam.InterruptRequest{Reason: "first", From: "owner-b", At: at}); err != nil {
		t.Fatal(err)
	}
	if err := is.RequestInterrupt(ctx, "c", seam.InterruptRequest{Reason: "second", From: "owner-c"}); err != nil {
		t.Fatal(err)
	}
	// Taken through the other handle: the request is in the store.
	r, ok, err := iw.TakeInterrupt(ctx, "c", nil)
	if err != nil || !ok || r.Reason != "first" || r.From != "owner-b" || !r.At.Equal(at) {
		t.Fatalf("TakeInterrupt = %+v, %v, %v; want the first request, as recorded", r, ok, err)
	}
	if r, ok, err := iw.TakeInterrupt(ctx, "c", nil); err != nil || ok {
		t.Fatalf("a second TakeInterrupt = %+v, %v, %v; want none: a request is taken once", r, ok, err)
	}
	// A new request after the take is kept, its time set by the store.
	before := time.Now()
	if err := is.RequestInterrupt(ctx, "c", seam.InterruptRequest{Reason: "third"}); err != nil {
		t.Fatal(err)
	}
	if r, ok, err := is.TakeInterrupt(ctx, "c", nil); err != nil || !ok || r.Reason != "third" || r.At.Before(before.Add(-time.Minute)) {
		t.Fatalf("TakeInterrupt = %+v, %v, %v; want the third request with its time set", r, ok, err)
	}
	for _, err := range []error{
		is.RequestInterrupt(ctx, "nope", seam.InterruptRequest{}),
		func() error { _, _, err := is.TakeInterrupt(ctx, "nope", nil); return err }(),
	} {
		if !errors.Is(err, seam.ErrNotFound) {
			t.Errorf("an unknown child = %v; want ErrNotFound", err)
		}
	}
}

func testInterruptFenced(t *testing.T, w, s seam.Store) {
	a, b := owner("owner-a"), owner("owner-b")
	mustClaim(t, s, header("c", "principal:local", 0), a)
	is := interrupts(t, s)
	if err := is.RequestInterrupt(ctx, "c", seam.InterruptRequest{Reason: "stop"}); err != nil {
		t.Fatal(err)
	}
	lapse(t, s, a.ID)
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Claim: &b}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := is.TakeInterrupt(ctx, "c", &seam.Fence{Owner: a.ID, Epoch: 1}); !errors.Is(err, seam.ErrOwned) || ok {
		t.Fatalf("the former owner's fenced take = %v, %v; want ErrOwned", ok, err)
	}
	if r, ok, err := interrupts(t, w).TakeInterrupt(ctx, "c", &seam.Fence{Owner: b.ID, Epoch: 2}); err != nil || !ok || r.Reason != "stop" {
		t.Fatalf("the new owner's fenced take = %+v, %v, %v; want the request the refused take left", r, ok, err)
	}
}

func testInterruptTakenOnce(t *testing.T, w, s seam.Store) {
	mustCreate(t, s, header("c", "principal:local", 0))
	if err := interrupts(t, s).RequestInterrupt(ctx, "c", seam.InterruptRequest{Reason: "stop"}); err != nil {
		t.Fatal(err)
	}
	handles := []seam.Interrupts{interrupts(t, w), interrupts(t, s)}
	got := concurrentTakes(t, func(i int) (int, error) {
		_, ok, err := handles[i%2].TakeInterrupt(ctx, "c", nil)
		if ok {
			return 1, err
		}
		return 0, err
	})
	if got != 1 {
		t.Errorf("%d of %d concurrent takers got the request; want exactly 1", got, takers)
	}
}

// takers is how many take at once in the taken-once cases.
const takers = 8

// concurrentTakes runs take(i) for each of takers at once and returns the
// sum of what they took.
func concurrentTakes(t *testing.T, take func(i int) (int, error)) int {
	t.Helper()
	var mu sync.Mutex
	got := 0
	var wg sync.WaitGroup
	for i := range takers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := take(i)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			got += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	return got
}

func testInterruptDeleted(t *testing.T, w, s seam.Store) {
	mustCreate(t, s, header("c", "principal:local", 0))
	if err := interrupts(t, s).RequestInterrupt(ctx, "c", seam.InterruptRequest{Reason: "stop"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, header("c", "principal:local", 0))
	if r, ok, err := interrupts(t, w).TakeInterrupt(ctx, "c", nil); err != nil || ok {
		t.Fatalf("TakeInterrupt of a child created again after a Delete = %+v, %v, %v; want none", r, ok, err)
	}
}
