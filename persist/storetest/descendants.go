package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// testDescendants: a root's whole subtree lists in one creation order
// across all levels (ties by id), each entry naming its own parent and
// carrying its checkpoint and HasChildren as Listings does; a page starts
// after its key and following pages visits every descendant once, also
// while descendants are being created; another root's tree never shows;
// and a deleted subtree leaves every ancestor's listing.
func testDescendants(t *testing.T, s seam.Store) {
	root := seam.PrincipalAddress("tree")
	// Interleaved levels: a child of an early child is created after a
	// later sibling, so creation order is not depth-first order.
	mk := func(id, parent string, off time.Duration) {
		t.Helper()
		h := header(id, parent, off)
		mustCreate(t, s, h)
	}
	mk("a", root, 0)
	mk("b", root, time.Second)
	mk("a1", "a", 2*time.Second)
	mk("c", root, 3*time.Second)
	mk("a1x", "a1", 4*time.Second)
	mk("b1", "b", 4*time.Second) // ties a1x: by id
	mk("a2", "a", 5*time.Second)
	mk("other", seam.PrincipalAddress("someone-else"), 2*time.Second)
	mk("o1", "other", 3*time.Second)
	if err := s.SetCheckpoint(ctx, "a1", seam.Checkpoint{Seq: 0, Mode: seam.ModeContinuable, Label: "l"}); err != nil {
		t.Fatalf("checkpoint a1: %v", err)
	}
	desc := func(r string, page seam.Page) []seam.Listing {
		t.Helper()
		ls, err := s.Descendants(ctx, r, page)
		if err != nil {
			t.Fatalf("Descendants(%q, %+v): %v", r, page, err)
		}
		if page.Limit > 0 && len(ls) > page.Limit {
			t.Fatalf("a page of limit %d has %d entries", page.Limit, len(ls))
		}
		return ls
	}
	ids := func(ls []seam.Listing) []string {
		var out []string
		for _, l := range ls {
			out = append(out, l.Header.ID)
		}
		return out
	}
	ls := desc(root, seam.Page{})
	if got, want := ids(ls), []string{"a", "b", "a1", "c", "a1x", "b1", "a2"}; !slices.Equal(got, want) {
		t.Fatalf("Descendants(root) = %v, want %v", got, want)
	}
	parents := map[string]string{"a": root, "b": root, "c": root, "a1": "a", "a2": "a", "a1x": "a1", "b1": "b"}
	hasKids := map[string]bool{"a": true, "b": true, "a1": true}
	for _, l := range ls {
		if l.Header.Parent != parents[l.Header.ID] || l.HasChildren != hasKids[l.Header.ID] || l.Corrupt {
			t.Errorf("entry %s: parent %q, HasChildren %v, Corrupt %v; want %q, %v, false",
				l.Header.ID, l.Header.Parent, l.HasChildren, l.Corrupt, parents[l.Header.ID], hasKids[l.Header.ID])
		}
		if want := header(l.Header.ID, "", 0); l.Header.Label != want.Label || l.Header.Provider != want.Provider || l.Header.Cwd != want.Cwd {
			t.Errorf("entry %s: header %+v does not show what was stored", l.Header.ID, l.Header)
		}
		if (l.Checkpoint != nil) != (l.Header.ID == "a1") {
			t.Errorf("entry %s: checkpoint %+v", l.Header.ID, l.Checkpoint)
		}
	}
	if got := ids(desc("a", seam.Page{})); !slices.Equal(got, []string{"a1", "a1x", "a2"}) {
		t.Errorf("Descendants(a) = %v, want [a1 a1x a2]", got)
	}
	if got := ids(desc("c", seam.Page{})); len(got) != 0 {
		t.Errorf("Descendants(a leaf) = %v, want none", got)
	}
	if got := ids(desc(seam.PrincipalAddress("nobody"), seam.Page{})); len(got) != 0 {
		t.Errorf("Descendants(an unknown root) = %v, want none", got)
	}

	// Pages of 2, a later descendant (under an early child) joining the end.
	var got []string
	var after seam.ListingKey
	for late := 0; ; late++ {
		page := desc(root, seam.Page{After: after, Limit: 2})
		if len(page) == 0 {
			break
		}
		got = append(got, ids(page)...)
		after = page[len(page)-1].Key()
		if late == 0 {
			mk("late", "a1x", time.Hour)
		}
	}
	if want := []string{"a", "b", "a1", "c", "a1x", "b1", "a2", "late"}; !slices.Equal(got, want) {
		t.Errorf("paging by 2 visited %v, want %v", got, want)
	}
	// A key between two entries starts at the next.
	between := seam.ListingKey{CreatedAt: base.Add(time.Second), ID: "a9"}
	if got := ids(desc(root, seam.Page{After: between, Limit: 1})); !slices.Equal(got, []string{"b"}) {
		t.Errorf("after a key between a and b: %v, want [b]", got)
	}

	// Deleting a subtree takes it out of every ancestor's listing.
	if _, err := s.Delete(ctx, "a1"); err != nil {
		t.Fatalf("Delete(a1): %v", err)
	}
	if got, want := ids(desc(root, seam.Page{})), []string{"a", "b", "c", "b1", "a2"}; !slices.Equal(got, want) {
		t.Errorf("Descendants(root) after Delete(a1) = %v, want %v", got, want)
	}
	if got := ids(desc("a", seam.Page{})); !slices.Equal(got, []string{"a2"}) {
		t.Errorf("Descendants(a) after Delete(a1) = %v, want [a2]", got)
	}
	if got := ids(desc("a1", seam.Page{})); len(got) != 0 {
		t.Errorf("Descendants(a1) after its Delete = %v, want none", got)
	}
	// A re-created id starts with no descendants.
	mk("a1", root, 2*time.Hour)
	if got := ids(desc("a1", seam.Page{})); len(got) != 0 {
		t.Errorf("a re-created a1 lists descendants %v", got)
	}
	if got := ids(desc(seam.PrincipalAddress("someone-else"), seam.Page{})); !slices.Equal(got, []string{"other", "o1"}) {
		t.Errorf("the other tree: %v", got)
	}
}
