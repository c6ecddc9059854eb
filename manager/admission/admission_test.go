package admission

import (
	"context"
	"errors"
	"testing"
)

func runs(s *Seat) bool {
	select {
	case <-s.ready:
		return true
	default:
		return false
	}
}

// TestAPrincipalsCapQueuesFIFOByStamp: past the cap a seat waits, and the
// slot a leaving seat frees goes to the earliest stamp, not the earliest
// to enter.
func TestAPrincipalsCapQueuesFIFOByStamp(t *testing.T) {
	q := New(1, 0)
	first := q.Enter("alice", "c1", "m1", 10)
	late := q.Enter("alice", "c3", "m3", 30)
	early := q.Enter("alice", "c2", "m2", 20)
	if !runs(first) || runs(late) || runs(early) {
		t.Fatalf("runs: first %v, late %v, early %v; want only the first", runs(first), runs(late), runs(early))
	}
	if !q.Queued("c2") || q.Queued("c1") {
		t.Fatalf("Queued: c2 %v (want true), c1 %v (want false)", q.Queued("c2"), q.Queued("c1"))
	}
	q.Leave(first)
	if !runs(early) || runs(late) {
		t.Fatalf("after the first left: early %v, late %v; want the earlier stamp to run", runs(early), runs(late))
	}
	q.Leave(early)
	if !runs(late) {
		t.Fatal("the last seat never ran")
	}
}

// TestAnotherPrincipalIsNotHeldByOnesCap: the per-principal cap is
// per principal; the total cap holds across them.
func TestAnotherPrincipalIsNotHeldByOnesCap(t *testing.T) {
	q := New(1, 0)
	a := q.Enter("alice", "a1", "", 1)
	b := q.Enter("bob", "b1", "", 2)
	if !runs(a) || !runs(b) {
		t.Fatal("two principals under their own caps must both run")
	}
	total := New(-1, 1)
	a = total.Enter("alice", "a1", "", 1)
	b = total.Enter("bob", "b1", "", 2)
	if !runs(a) || runs(b) {
		t.Fatal("the total cap of 1 must hold bob back while alice runs")
	}
	total.Leave(a)
	if !runs(b) {
		t.Fatal("bob must run once alice left")
	}
}

// TestALentSlotRunsTheChildPastTheCap: a caller waiting for its child
// lends its slot, so a tree at its cap does not wait on itself; when the
// loan ends first, the child keeps running on a slot of its own, and
// nothing new starts until the count is under the cap again.
func TestALentSlotRunsTheChildPastTheCap(t *testing.T) {
	q := New(1, 0)
	parent := q.Enter("alice", "parent", "p", 1)
	if !runs(parent) {
		t.Fatal("the parent's turn must run")
	}
	loan := q.Lend("parent", "child", "m1")
	if loan == nil {
		t.Fatal("a running turn must be able to lend its slot")
	}
	child := q.Enter("alice", "child", "m1", 2)
	if !runs(child) {
		t.Fatal("the child's turn must run on its waiting parent's slot")
	}
	other := q.Enter("alice", "other", "o", 3)
	if runs(other) {
		t.Fatal("an unrelated turn must wait: the principal is at its cap")
	}
	loan.End(q)
	q.Leave(parent)
	if runs(other) {
		t.Fatal("the child now holds a slot of its own: the other turn must still wait")
	}
	q.Leave(child)
	if !runs(other) {
		t.Fatal("the other turn must run once the child left")
	}
	if q.Lend("", "x", "") != nil {
		t.Fatal("a root caller has no slot to lend")
	}
	var none *Loan
	none.End(q) // a nil loan ends quietly
}

// TestAWaitThatEndsLeavesTheQueue: a seat whose ctx ends while it waits
// leaves, with the ctx's cause; a seat granted after its ctx ended gives
// its slot back.
func TestAWaitThatEndsLeavesTheQueue(t *testing.T) {
	q := New(1, 0)
	holder := q.Enter("alice", "c1", "", 1)
	waiting := q.Enter("alice", "c2", "", 2)
	cause := errors.New("interrupted")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	if err := q.Await(ctx, waiting); !errors.Is(err, cause) {
		t.Fatalf("Await = %v, want the cause %v", err, cause)
	}
	if q.Queued("c2") {
		t.Fatal("a seat whose wait ended is still queued")
	}
	third := q.Enter("alice", "c3", "", 3)
	q.Leave(holder)
	if !runs(third) {
		t.Fatal("the slot went to the seat that left")
	}
	if err := q.Await(ctx, third); err == nil {
		t.Fatal("a granted seat with an ended ctx must give its slot back")
	}
	fourth := q.Enter("alice", "c4", "", 4)
	if !runs(fourth) {
		t.Fatal("the slot given back must go to the next seat")
	}
	if err := q.Await(context.Background(), fourth); err != nil {
		t.Fatalf("Await of a running seat = %v", err)
	}
}

func TestStampsIncreaseStrictly(t *testing.T) {
	q := New(0, 0)
	last := q.Stamp()
	for range 1000 {
		s := q.Stamp()
		if s <= last {
			t.Fatalf("stamp %d after %d", s, last)
		}
		last = s
	}
	if q.perPrincipal != DefaultMaxRunningChildren {
		t.Fatalf("a zero cap is %d, want the default %d", q.perPrincipal, DefaultMaxRunningChildren)
	}
}
