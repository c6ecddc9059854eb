package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// claimOf returns the child's claim, failing the test when it is not
// claimed.
func claimOf(t *testing.T, s seam.Store, id string) seam.Claim {
	t.Helper()
	c, ok, err := s.ClaimOf(ctx, id)
	if err != nil || !ok {
		t.Fatalf("ClaimOf(%q) = %+v, %v, %v; want a claim", id, c, ok, err)
	}
	return c
}

// lapse lets owner's lease run out, so another owner may take over.
func lapse(t *testing.T, s seam.Store, id string) {
	t.Helper()
	if err := s.Renew(ctx, seam.Owner{ID: id, Expires: time.Now().Add(-time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
}

func testClaimEpochs(t *testing.T, s seam.Store) {
	a, b := owner("owner-a"), owner("owner-b")
	mustClaim(t, s, header("c", "p", 0), a)
	mustCreate(t, s, header("u", "p", time.Second))
	if c := claimOf(t, s, "c"); c.Epoch != 1 || c.Owner.ID != a.ID || !c.Owner.Expires.Equal(a.Expires) || c.ChildID != "c" {
		t.Errorf("a new child's first claim = %+v; want %s's at epoch 1 until %v", c, a.ID, a.Expires)
	}
	if c, ok, err := s.ClaimOf(ctx, "u"); err != nil || ok {
		t.Errorf("ClaimOf(an unclaimed child) = %+v, %v, %v; want none", c, ok, err)
	}
	// The holder claiming again keeps its epoch.
	a2 := seam.Owner{ID: a.ID, Expires: a.Expires.Add(time.Minute)}
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Claim: &a2}); err != nil {
		t.Fatal(err)
	}
	if c := claimOf(t, s, "c"); c.Epoch != 1 || !c.Owner.Expires.Equal(a2.Expires) {
		t.Errorf("after the holder's own claim again = %+v; want epoch 1 until %v", c, a2.Expires)
	}
	// A takeover starts the next epoch; Residents reports it too.
	lapse(t, s, a.ID)
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Claim: &b}); err != nil {
		t.Fatal(err)
	}
	if c := claimOf(t, s, "c"); c.Epoch != 2 || c.Owner.ID != b.ID {
		t.Errorf("after a takeover = %+v; want %s's at epoch 2", c, b.ID)
	}
	if cs, err := s.Residents(ctx); err != nil || len(cs) != 1 || cs[0].Epoch != 2 || cs[0].Owner.ID != b.ID {
		t.Errorf("Residents = %+v, %v; want c at epoch 2", cs, err)
	}
	// A settlement revokes the claim and keeps the number: the next
	// claim, even the same owner's, is a new epoch.
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Settle: &seam.Checkpoint{Mode: seam.ModeContinuable}}); err != nil {
		t.Fatal(err)
	}
	if c, ok, err := s.ClaimOf(ctx, "c"); err != nil || ok {
		t.Errorf("ClaimOf a settled child = %+v, %v, %v; want none", c, ok, err)
	}
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Claim: &b}); err != nil {
		t.Fatal(err)
	}
	if c := claimOf(t, s, "c"); c.Epoch != 3 {
		t.Errorf("a claim after the settlement = %+v; want epoch 3", c)
	}
	// A claim of an unclaimed stored child (a cold resume) is epoch 1.
	if err := s.WriteChild(ctx, "u", seam.ChildWrite{Claim: &a}); err != nil {
		t.Fatal(err)
	}
	if c := claimOf(t, s, "u"); c.Epoch != 1 {
		t.Errorf("the first claim of a stored child = %+v; want epoch 1", c)
	}
}

func testFencedWrites(t *testing.T, s seam.Store) {
	a, b := owner("owner-a"), owner("owner-b")
	mustClaim(t, s, header("c", "p", 0), a)
	mustCreate(t, s, header("parent", "p", time.Second))
	fa := seam.Fence{Owner: a.ID, Epoch: claimOf(t, s, "c").Epoch}
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Fence: &fa, Events: turn(0, 1, "by a"),
		Enqueue: []seam.QueuedMessage{{ID: "m1", Text: "kept", Source: agent.SourceUser}}}); err != nil {
		t.Fatalf("the holder's fenced write = %v", err)
	}
	// a pauses; its lease runs out; b takes the child over, fenced by the
	// claim as it read it (as a sweep takes over before it reads the
	// journal it closes).
	lapse(t, s, a.ID)
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Fence: &fa, Claim: &b}); err != nil {
		t.Fatalf("b's takeover fenced by a's expired claim = %v", err)
	}
	fb := seam.Fence{Owner: b.ID, Epoch: claimOf(t, s, "c").Epoch}
	if fb.Epoch <= fa.Epoch {
		t.Fatalf("the takeover's epoch %d is not above the former %d", fb.Epoch, fa.Epoch)
	}
	// Every kind of write a's stale writer could make is refused whole.
	stale := map[string]seam.ChildWrite{
		"events":           {Fence: &fa, Events: turn(4, 2, "by a, late")},
		"inbox in and out": {Fence: &fa, Enqueue: []seam.QueuedMessage{{ID: "m2"}}, Dequeue: []string{"m1"}},
		"claim again":      {Fence: &fa, Claim: &a},
		"settlement and notice": {Fence: &fa, Settle: &seam.Checkpoint{Seq: 4, Mode: seam.ModeContinuable},
			Notify: &seam.ParentNotice{To: "parent", Inbox: true, Message: seam.QueuedMessage{ID: "n1", Text: "done"}}},
	}
	for what, w := range stale {
		if err := s.WriteChild(ctx, "c", w); !errors.Is(err, seam.ErrOwned) {
			t.Errorf("the former owner's fenced write (%s) after a takeover = %v, want ErrOwned", what, err)
		}
	}
	if n, err := s.JournalLen(ctx, "c"); err != nil || n != 4 {
		t.Errorf("JournalLen = %d, %v after refused writes; want 4", n, err)
	}
	if got := queuedIDs(t, s, "c"); len(got) != 1 || got[0] != "m1" {
		t.Errorf("inbox = %v after refused writes; want [m1]", got)
	}
	if got := queuedIDs(t, s, "parent"); len(got) != 0 {
		t.Errorf("the parent's inbox = %v after a refused settlement; want empty", got)
	}
	if c := claimOf(t, s, "c"); c.Owner.ID != b.ID || c.Epoch != fb.Epoch {
		t.Errorf("claim = %+v after refused writes; want %s's at epoch %d", c, b.ID, fb.Epoch)
	}
	// The right owner at a stale epoch, and a stranger, are refused too.
	for _, f := range []seam.Fence{{Owner: b.ID, Epoch: fa.Epoch}, {Owner: "owner-x", Epoch: fb.Epoch}} {
		if err := s.WriteChild(ctx, "c", seam.ChildWrite{Fence: &f, Events: turn(4, 2, "x")}); !errors.Is(err, seam.ErrOwned) {
			t.Errorf("a write fenced to %+v while the claim is %s's at %d = %v, want ErrOwned", f, b.ID, fb.Epoch, err)
		}
	}
	// The new holder writes and settles.
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Fence: &fb, Events: turn(4, 2, "by b"),
		Settle: &seam.Checkpoint{Seq: 8, Mode: seam.ModeContinuable}}); err != nil {
		t.Fatalf("the new holder's fenced write = %v", err)
	}
	// Settled, nobody holds it: any fenced write is refused, and a's
	// later claim (a new epoch) does not revive its old writer's fence.
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Fence: &fb, Enqueue: []seam.QueuedMessage{{ID: "m3"}}}); !errors.Is(err, seam.ErrOwned) {
		t.Errorf("a fenced write to a settled child = %v, want ErrOwned", err)
	}
	a3 := owner(a.ID)
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Claim: &a3}); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Fence: &fa, Events: turn(8, 3, "by a's old writer")}); !errors.Is(err, seam.ErrOwned) {
		t.Errorf("a's old writer after a claimed again = %v, want ErrOwned", err)
	}
	if n, _ := s.JournalLen(ctx, "c"); n != 8 {
		t.Errorf("JournalLen = %d, want 8", n)
	}
	// A create carrying a fence is refused: nobody holds a child not yet
	// stored.
	if err := s.WriteChild(ctx, "new", seam.ChildWrite{Fence: &fa, Create: &seam.NewChild{Header: header("new", "p", time.Hour), Descriptor: descriptor()}}); !errors.Is(err, seam.ErrOwned) {
		t.Errorf("a fenced create = %v, want ErrOwned", err)
	}
	if _, err := s.Header(ctx, "new"); !errors.Is(err, seam.ErrNotFound) {
		t.Errorf("a refused fenced create stored the child: %v", err)
	}
}

func testEventsFrom(t *testing.T, s seam.Store) {
	mustCreate(t, s, header("c", "p", 0))
	all := append(turn(0, 1, "one"), turn(4, 2, "two")...)
	if err := appendEvents(s, "c", all); err != nil {
		t.Fatal(err)
	}
	for _, from := range []int64{0, 1, 4, 7} {
		got, err := s.EventsFrom(ctx, "c", from)
		if err != nil || !sameEvents(got, all[from:]) {
			t.Errorf("EventsFrom(%d) = %d events, %v; want the %d from %d on", from, len(got), err, len(all)-int(from), from)
		}
	}
	for _, from := range []int64{8, 100} {
		if got, err := s.EventsFrom(ctx, "c", from); err != nil || len(got) != 0 {
			t.Errorf("EventsFrom(%d) past the end = %v, %v; want none", from, got, err)
		}
	}
	if _, err := s.EventsFrom(ctx, "c", -1); err == nil {
		t.Error("EventsFrom(-1) was accepted")
	}
	mustCreate(t, s, header("empty", "p", time.Second))
	if got, err := s.EventsFrom(ctx, "empty", 0); err != nil || len(got) != 0 {
		t.Errorf("EventsFrom of an empty journal = %v, %v", got, err)
	}
}

// A resume claims a child on a journal it read first; a write that says
// which length it was made on (JournalIs) is refused whole, ErrStale,
// when another writer grew the journal in between, and applies when the
// length holds.
func testStaleJournalWrites(t *testing.T, s seam.Store) {
	mustCreate(t, s, header("c", "p", 0))
	if err := appendEvents(s, "c", turn(0, 1, "one")); err != nil {
		t.Fatal(err)
	}
	b := owner("owner-b")
	read := int64(0) // the length before the turn was appended
	err := s.WriteChild(ctx, "c", seam.ChildWrite{JournalIs: &read, Claim: &b})
	if !errors.Is(err, seam.ErrStale) {
		t.Fatalf("a claim made on a journal of %d events, with 4 stored = %v; want ErrStale", read, err)
	}
	if c, ok, err := s.ClaimOf(ctx, "c"); err != nil || ok {
		t.Fatalf("after the refused write ClaimOf = %+v, %v, %v; want no claim stored", c, ok, err)
	}
	n, err := s.JournalLen(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{JournalIs: &n, Claim: &b}); err != nil {
		t.Fatalf("a claim made on the journal as stored = %v; want it applied", err)
	}
	if c := claimOf(t, s, "c"); c.Owner.ID != b.ID {
		t.Errorf("ClaimOf = %+v; want %s's", c, b.ID)
	}
}
