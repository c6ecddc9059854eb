package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

func testQueuedOrder(t *testing.T, s seam.Store) {
	mustCreate(t, s, header("q", "p", 0))
	mustCreate(t, s, header("other", "p", time.Second))
	var want []string
	for i := range 5 {
		var batch []seam.QueuedMessage
		for j := range 3 {
			id := fmt.Sprintf("m%d-%d", i, j)
			batch = append(batch, seam.QueuedMessage{ID: id, Text: "text " + id, Source: agent.SourceUser, Quiet: j == 1})
			want = append(want, id)
		}
		if err := s.WriteChild(ctx, "q", seam.ChildWrite{Enqueue: batch}); err != nil {
			t.Fatal(err)
		}
	}
	if got := queuedIDs(t, s, "q"); !reflect.DeepEqual(got, want) {
		t.Fatalf("Queued = %v, want %v", got, want)
	}
	qs, _ := s.Queued(ctx, "q")
	if qs[1].Text != "text m0-1" || !qs[1].Quiet || qs[0].Quiet || qs[0].Source != agent.SourceUser {
		t.Errorf("queued fields lost: %+v", qs[:2])
	}
	// Removing from the middle keeps the others' order; an unknown id is
	// ignored; a message admitted in the same write lands after the rest.
	if err := s.WriteChild(ctx, "q", seam.ChildWrite{Dequeue: []string{"m1-1", "m3-0", "never"},
		Enqueue: []seam.QueuedMessage{{ID: "late"}}}); err != nil {
		t.Fatal(err)
	}
	want = slices.DeleteFunc(append(want, "late"), func(id string) bool { return id == "m1-1" || id == "m3-0" })
	if got := queuedIDs(t, s, "q"); !reflect.DeepEqual(got, want) {
		t.Errorf("Queued after removals = %v, want %v", got, want)
	}
	if got := queuedIDs(t, s, "other"); len(got) != 0 {
		t.Errorf("a sibling's inbox = %v, want empty", got)
	}
}

func testNoticesTakenOnce(t *testing.T, s seam.Store) {
	const n, takers = 60, 6
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string]int{}
	stop := make(chan struct{})
	for range takers {
		wg.Go(func() {
			for {
				got, err := s.TakeNotices(ctx, "alice", nil)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, x := range got {
					seen[x.Text]++
				}
				mu.Unlock()
				select {
				case <-stop:
					return
				default:
				}
			}
		})
	}
	for i := range n {
		if err := s.AddNotice(ctx, "alice", seam.Notice{ChildID: "c", Text: fmt.Sprint("notice ", i)}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	rest, err := s.TakeNotices(ctx, "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range rest {
		seen[x.Text]++
	}
	for i := range n {
		if c := seen[fmt.Sprint("notice ", i)]; c != 1 {
			t.Errorf("notice %d was taken %d times, want exactly once", i, c)
		}
	}
}

func testClaimRefused(t *testing.T, s seam.Store) {
	a, b := owner("owner-a"), owner("owner-b")
	mustClaim(t, s, header("c", "p", 0), a)
	err := s.WriteChild(ctx, "c", seam.ChildWrite{Claim: &b})
	if !errors.Is(err, seam.ErrOwned) {
		t.Fatalf("another owner's claim of a live claim = %v, want ErrOwned", err)
	}
	if errors.Is(err, seam.ErrNotFound) || errors.Is(err, seam.ErrCorrupt) {
		t.Errorf("ErrOwned = %v also matches not-found or corrupt", err)
	}
	// The owner itself claims again (a resume of its own child).
	a2 := seam.Owner{ID: a.ID, Expires: a.Expires.Add(time.Minute)}
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Claim: &a2, Events: turn(0, 1, "x")}); err != nil {
		t.Fatalf("the owner's own claim again = %v", err)
	}
	cs, err := s.Residents(ctx)
	if err != nil || len(cs) != 1 || cs[0].ChildID != "c" || cs[0].Owner.ID != a.ID || !cs[0].Owner.Expires.Equal(a2.Expires) {
		t.Errorf("Residents = %+v, %v; want c held by %s until %v", cs, err, a.ID, a2.Expires)
	}
	// A create with a claim of an id already stored is refused as a duplicate.
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Create: &seam.NewChild{Header: header("c", "p", 0), Descriptor: descriptor()}, Claim: &b}); err == nil {
		t.Error("a create of a stored id with another claim was accepted")
	}
	if cs, _ := s.Residents(ctx); len(cs) != 1 || cs[0].Owner.ID != a.ID {
		t.Errorf("Residents = %+v after refusals, want c still %s's", cs, a.ID)
	}
}

func testClaimTakeover(t *testing.T, s seam.Store) {
	gone := seam.Owner{ID: "owner-gone", Expires: time.Now().Add(-time.Second)}
	mustClaim(t, s, header("c", "p", 0), gone)
	b := owner("owner-b")
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Claim: &b}); err != nil {
		t.Fatalf("claiming a child whose claim expired = %v, want granted", err)
	}
	cs, err := s.Residents(ctx)
	if err != nil || len(cs) != 1 || cs[0].Owner.ID != b.ID || !cs[0].Owner.Expires.Equal(b.Expires) {
		t.Errorf("Residents = %+v, %v; want c taken over by %s", cs, err, b.ID)
	}
	// The old owner cannot take it back while the new lease runs.
	back := owner("owner-gone")
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Claim: &back}); !errors.Is(err, seam.ErrOwned) {
		t.Errorf("the old owner's claim after a takeover = %v, want ErrOwned", err)
	}
}

func testRenew(t *testing.T, s seam.Store) {
	a, b := owner("owner-a"), owner("owner-b")
	mustClaim(t, s, header("a1", "p", 0), a)
	mustClaim(t, s, header("a2", "p", time.Second), a)
	mustClaim(t, s, header("b1", "p", 2*time.Second), b)
	later := seam.Owner{ID: a.ID, Expires: a.Expires.Add(time.Hour)}
	if err := s.Renew(ctx, later); err != nil {
		t.Fatal(err)
	}
	expiry := func() map[string]time.Time {
		cs, err := s.Residents(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]time.Time{}
		for _, c := range cs {
			out[c.ChildID+"/"+c.Owner.ID] = c.Owner.Expires
		}
		return out
	}
	got := expiry()
	if len(got) != 3 || !got["a1/owner-a"].Equal(later.Expires) || !got["a2/owner-a"].Equal(later.Expires) || !got["b1/owner-b"].Equal(b.Expires) {
		t.Errorf("after Renew(a) claims = %v; want a1, a2 until %v and b1 untouched", got, later.Expires)
	}
	// An owner with no claim renews without error; nothing changes.
	if err := s.Renew(ctx, owner("owner-none")); err != nil {
		t.Errorf("Renew of an owner without claims = %v", err)
	}
	if err := s.Renew(ctx, seam.Owner{Expires: time.Now()}); err == nil {
		t.Error("Renew without an owner id was accepted")
	}
	// Renewing to the past lets the claims go: another owner takes them over.
	if err := s.Renew(ctx, seam.Owner{ID: a.ID, Expires: time.Now().Add(-time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteChild(ctx, "a1", seam.ChildWrite{Claim: &b}); err != nil {
		t.Errorf("claiming a child whose owner let its lease go = %v", err)
	}
	if err := s.WriteChild(ctx, "b1", seam.ChildWrite{Claim: &a}); !errors.Is(err, seam.ErrOwned) {
		t.Errorf("a's claim of b's live child = %v, want ErrOwned", err)
	}
}

func testResidents(t *testing.T, s seam.Store) {
	if cs, err := s.Residents(ctx); err != nil || len(cs) != 0 {
		t.Fatalf("Residents of an empty store = %+v, %v", cs, err)
	}
	a := owner("owner-a")
	for i, id := range []string{"c", "a", "b"} {
		mustClaim(t, s, header(id, "p", time.Duration(i)), a)
	}
	mustCreate(t, s, header("unclaimed", "p", time.Hour))
	if got := residents(t, s); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Errorf("Residents = %v, want [a b c] by id", got)
	}
	// A claim on a stored, unclaimed child (a cold resume).
	if err := s.WriteChild(ctx, "unclaimed", seam.ChildWrite{Claim: &a}); err != nil {
		t.Fatal(err)
	}
	cp := seam.Checkpoint{Seq: 0, Mode: seam.ModeContinuable, Stop: agent.StopCompleted}
	for _, id := range []string{"b", "unclaimed"} {
		if err := s.WriteChild(ctx, id, seam.ChildWrite{Settle: &cp}); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := s.Residents(ctx)
	if err != nil || len(cs) != 2 || cs[0].ChildID != "a" || cs[1].ChildID != "c" {
		t.Fatalf("Residents after two settlements = %+v, %v; want a and c", cs, err)
	}
	for _, c := range cs {
		if c.Owner.ID != a.ID || !c.Owner.Expires.Equal(a.Expires) {
			t.Errorf("claim %+v, want owner %s until %v", c, a.ID, a.Expires)
		}
		if c.Parent != "" && c.Parent != "p" { // optional (seam.Claim), right when given
			t.Errorf("claim %+v names parent %q, want p (or none)", c, c.Parent)
		}
	}
	// A settled child may be claimed again by anyone.
	b := owner("owner-b")
	if err := s.WriteChild(ctx, "b", seam.ChildWrite{Claim: &b}); err != nil {
		t.Errorf("claiming a settled child = %v", err)
	}
}

func testConcurrentClaims(t *testing.T, s seam.Store) {
	mustCreate(t, s, header("c", "p", 0))
	const racers = 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	var won []string
	for i := range racers {
		wg.Go(func() {
			o := owner(fmt.Sprint("owner-", i))
			err := s.WriteChild(ctx, "c", seam.ChildWrite{Claim: &o})
			switch {
			case err == nil:
				mu.Lock()
				won = append(won, o.ID)
				mu.Unlock()
			case !errors.Is(err, seam.ErrOwned):
				t.Errorf("a losing claim = %v, want ErrOwned", err)
			}
		})
	}
	wg.Wait()
	if len(won) != 1 {
		t.Fatalf("%d owners claimed the child, want exactly 1: %v", len(won), won)
	}
	if cs, _ := s.Residents(ctx); len(cs) != 1 || cs[0].Owner.ID != won[0] {
		t.Errorf("Residents = %+v, want the winner %s", cs, won[0])
	}
}

func testDoneContext(t *testing.T, s seam.Store) {
	mustClaim(t, s, header("c", "p", 0), owner("o1"))
	if err := s.AddNotice(ctx, "alice", seam.Notice{Text: "kept"}); err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	check := func(method string, err error) {
		t.Helper()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled ctx = %v, want an error wrapping context.Canceled", method, err)
		}
	}
	_, err := s.Header(done, "c")
	check("Header", err)
	_, err = s.Descriptor(done, "c")
	check("Descriptor", err)
	_, err = s.Events(done, "c")
	check("Events", err)
	_, err = s.JournalLen(done, "c")
	check("JournalLen", err)
	_, err = s.EventsFrom(done, "c", 0)
	check("EventsFrom", err)
	_, _, err = s.ClaimOf(done, "c")
	check("ClaimOf", err)
	_, err = s.Queued(done, "c")
	check("Queued", err)
	_, err = s.Listings(done, "p", seam.Page{})
	check("Listings", err)
	_, _, err = s.Checkpoint(done, "c")
	check("Checkpoint", err)
	check("SetCheckpoint", s.SetCheckpoint(done, "c", seam.Checkpoint{}))
	check("AddNotice", s.AddNotice(done, "alice", seam.Notice{Text: "dropped"}))
	_, err = s.TakeNotices(done, "alice", nil)
	check("TakeNotices", err)
	check("Renew", s.Renew(done, seam.Owner{ID: "o1", Expires: time.Now()}))
	_, err = s.Residents(done)
	check("Residents", err)
	_, err = s.Delete(done, "d")
	check("Delete", err)
	b := owner("o2")
	check("WriteChild", s.WriteChild(done, "d", seam.ChildWrite{Create: &seam.NewChild{Header: header("d", "p", 0), Descriptor: descriptor()}, Claim: &b}))
	check("WriteChild (settle)", s.WriteChild(done, "c", seam.ChildWrite{Events: turn(0, 1, "x"), Settle: &seam.Checkpoint{Seq: 4}}))
	// Nothing was done.
	if _, err := s.Header(ctx, "d"); !errors.Is(err, seam.ErrNotFound) {
		t.Errorf("a create under a cancelled ctx stored the child: %v", err)
	}
	if n, _ := s.JournalLen(ctx, "c"); n != 0 {
		t.Errorf("JournalLen = %d after a write under a cancelled ctx", n)
	}
	if cs, _ := s.Residents(ctx); len(cs) != 1 || cs[0].Owner.ID != "o1" || !cs[0].Owner.Expires.After(time.Now()) {
		t.Errorf("Residents = %+v; a renewal or settlement under a cancelled ctx changed the claim", cs)
	}
	if ns, _ := s.TakeNotices(ctx, "alice", nil); len(ns) != 1 || ns[0].Text != "kept" {
		t.Errorf("notices = %+v; want only the one added before", ns)
	}
}
