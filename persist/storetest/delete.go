package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// testDelete: a deleted child is gone with everything keyed by it, its
// descendants go with it, and its siblings are untouched.
func testDelete(t *testing.T, s seam.Store) {
	root := seam.PrincipalAddress("local")
	mustCreate(t, s, header("a", root, 0))
	mustCreate(t, s, header("keep", root, time.Second))
	mustCreate(t, s, header("a1", "a", 2*time.Second))
	mustCreate(t, s, header("a1x", "a1", 3*time.Second))
	mustCreate(t, s, header("k1", "keep", 4*time.Second))
	for _, id := range []string{"a", "a1", "a1x", "keep"} {
		if err := appendEvents(s, id, turn(0, 1, "work of "+id)); err != nil {
			t.Fatalf("append %s: %v", id, err)
		}
		if err := s.SetCheckpoint(ctx, id, seam.Checkpoint{Seq: 4, Mode: seam.ModeContinuable, Label: "l"}); err != nil {
			t.Fatalf("checkpoint %s: %v", id, err)
		}
		if err := s.WriteChild(ctx, id, seam.ChildWrite{Enqueue: []seam.QueuedMessage{{ID: "m-" + id, Text: "later", Source: agent.SourceUser}}}); err != nil {
			t.Fatalf("enqueue %s: %v", id, err)
		}
		if err := s.AddNotice(ctx, id, seam.Notice{ChildID: "x", Source: agent.SourceReport, Text: "for " + id}); err != nil {
			t.Fatalf("notice %s: %v", id, err)
		}
	}
	removed, err := s.Delete(ctx, "a")
	if err != nil {
		t.Fatalf("Delete(a): %v", err)
	}
	slices.Sort(removed)
	if want := []string{"a", "a1", "a1x"}; !slices.Equal(removed, want) || len(removed) == 0 {
		t.Fatalf("Delete(a) removed %v, want %v", removed, want)
	}
	for _, id := range []string{"a", "a1", "a1x"} {
		if _, err := s.Header(ctx, id); !errors.Is(err, seam.ErrNotFound) {
			t.Errorf("Header(%s) after Delete: %v, want ErrNotFound", id, err)
		}
		if _, err := s.Events(ctx, id); !errors.Is(err, seam.ErrNotFound) {
			t.Errorf("Events(%s) after Delete: %v, want ErrNotFound", id, err)
		}
		if _, err := s.Queued(ctx, id); !errors.Is(err, seam.ErrNotFound) {
			t.Errorf("Queued(%s) after Delete: %v, want ErrNotFound", id, err)
		}
		if _, _, err := s.Checkpoint(ctx, id); !errors.Is(err, seam.ErrNotFound) {
			t.Errorf("Checkpoint(%s) after Delete: %v, want ErrNotFound", id, err)
		}
		if ns, err := s.TakeNotices(ctx, id, nil); err != nil || len(ns) != 0 {
			t.Errorf("notices under %s after Delete: %v, %v; want none", id, ns, err)
		}
		if got := listed(t, s, id); len(got) != 0 {
			t.Errorf("Listings(%s) after Delete: %v, want none", id, got)
		}
	}
	if got := listed(t, s, root); !slices.Equal(got, []string{"keep"}) {
		t.Errorf("root listing after Delete: %v, want [keep]", got)
	}
	if ls, _ := s.Listings(ctx, root, seam.Page{}); len(ls) != 1 || !ls[0].HasChildren || ls[0].Checkpoint == nil {
		t.Errorf("the sibling's row changed: %+v", ls)
	}
	if evs, err := s.Events(ctx, "keep"); err != nil || len(evs) != 4 {
		t.Errorf("the sibling's journal: %d events, %v", len(evs), err)
	}
	if q := queuedIDs(t, s, "keep"); !slices.Equal(q, []string{"m-keep"}) {
		t.Errorf("the sibling's inbox: %v", q)
	}
	if ns, err := s.TakeNotices(ctx, "keep", nil); err != nil || len(ns) != 1 {
		t.Errorf("the sibling's notices: %v, %v", ns, err)
	}
	if got := listed(t, s, "keep"); !slices.Equal(got, []string{"k1"}) {
		t.Errorf("the sibling's children: %v", got)
	}
	if _, err := s.Delete(ctx, "a"); !errors.Is(err, seam.ErrNotFound) {
		t.Errorf("a second Delete(a): %v, want ErrNotFound", err)
	}
	// A deleted id can be created again from nothing.
	mustCreate(t, s, header("a1", root, 5*time.Second))
	if n, err := s.JournalLen(ctx, "a1"); err != nil || n != 0 {
		t.Errorf("a re-created id's journal: %d, %v", n, err)
	}
	// Deleting a leaf drops its parent's index, so the parent no longer
	// lists as having children.
	if _, err := s.Delete(ctx, "k1"); err != nil {
		t.Fatalf("Delete(k1): %v", err)
	}
	if ls, _ := s.Listings(ctx, root, seam.Page{}); len(ls) != 2 || ls[0].HasChildren {
		t.Errorf("after its only child went, keep still has children: %+v", ls)
	}
}

// testDeleteClaimed: a claimed child, or a child with a claimed
// descendant, is never deleted, whether the claim is live or expired; the
// settlement that revokes the claim makes it deletable.
func testDeleteClaimed(t *testing.T, s seam.Store) {
	root := seam.PrincipalAddress("local")
	o := owner("o1")
	mustClaim(t, s, header("live", root, 0), o)
	mustCreate(t, s, header("parent", root, time.Second))
	mustClaim(t, s, header("kid", "parent", 2*time.Second), o)
	stale := seam.Owner{ID: "gone", Expires: time.Now().Add(-time.Hour)}
	mustClaim(t, s, header("stale", root, 3*time.Second), stale)
	for _, id := range []string{"live", "parent", "kid", "stale"} {
		if _, err := s.Delete(ctx, id); !errors.Is(err, seam.ErrClaimed) {
			t.Errorf("Delete(%s): %v, want ErrClaimed", id, err)
		}
	}
	if got := listed(t, s, root); !slices.Equal(got, []string{"live", "parent", "stale"}) {
		t.Fatalf("a refused Delete removed something: %v", got)
	}
	if got := listed(t, s, "parent"); !slices.Equal(got, []string{"kid"}) {
		t.Fatalf("a refused Delete removed the descendant: %v", got)
	}
	if got := residents(t, s); !slices.Equal(got, []string{"kid", "live", "stale"}) {
		t.Fatalf("a refused Delete touched the claims: %v", got)
	}
	settle := seam.ChildWrite{Settle: &seam.Checkpoint{Mode: seam.ModeContinuable}}
	if err := s.WriteChild(ctx, "kid", settle); err != nil {
		t.Fatalf("settle kid: %v", err)
	}
	if removed, err := s.Delete(ctx, "parent"); err != nil || len(removed) != 2 {
		t.Errorf("Delete(parent) once kid settled: %v, %v", removed, err)
	}
	if _, err := s.Header(ctx, "kid"); !errors.Is(err, seam.ErrNotFound) {
		t.Errorf("kid after its parent's Delete: %v", err)
	}
}

// testDeleteBesideCreate: a parent's only child is deleted while its next
// is created, again and again: the parent lists as having children
// throughout (a store keeping the flag must not let the deletion's
// recount miss the creation), and as having none once the last goes.
func testDeleteBesideCreate(t *testing.T, s seam.Store) {
	root := seam.PrincipalAddress("local")
	mustCreate(t, s, header("p", root, 0))
	mustCreate(t, s, header("k0", "p", time.Second))
	hasChildren := func() bool {
		t.Helper()
		ls, err := s.Listings(ctx, root, seam.Page{})
		if err != nil || len(ls) != 1 {
			t.Fatalf("Listings(root) = %+v, %v", ls, err)
		}
		return ls[0].HasChildren
	}
	for i := 1; i <= 40; i++ {
		var wg sync.WaitGroup
		var delErr, createErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, delErr = s.Delete(ctx, fmt.Sprintf("k%d", i-1))
		}()
		go func() {
			defer wg.Done()
			createErr = create(s, header(fmt.Sprintf("k%d", i), "p", time.Duration(i+1)*time.Second), descriptor())
		}()
		wg.Wait()
		if delErr != nil || createErr != nil {
			t.Fatalf("round %d: Delete = %v, create = %v", i, delErr, createErr)
		}
		if !hasChildren() {
			t.Fatalf("round %d: p has a child, k%d, but lists as having none", i, i)
		}
	}
	if _, err := s.Delete(ctx, "k40"); err != nil {
		t.Fatal(err)
	}
	if hasChildren() {
		t.Error("p's last child is gone, but p lists as having children")
	}
}
