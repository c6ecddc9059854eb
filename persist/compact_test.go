package persist

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// snapshot is everything the store answers about a set of children and
// addresses, for comparing a store before and after a compaction.
type snapshot struct {
	Headers     map[string]seam.Header
	Descriptors map[string]seam.Descriptor
	Events      map[string][]agent.Event
	Queued      map[string][]seam.QueuedMessage
	Checkpoints map[string]seam.Checkpoint
	Listings    map[string][]seam.Listing
	Residents   []seam.Claim
}

func takeSnapshot(t *testing.T, s *Store, ids, parents []string) snapshot {
	t.Helper()
	sn := snapshot{Headers: map[string]seam.Header{}, Descriptors: map[string]seam.Descriptor{},
		Events: map[string][]agent.Event{}, Queued: map[string][]seam.QueuedMessage{},
		Checkpoints: map[string]seam.Checkpoint{}, Listings: map[string][]seam.Listing{}}
	var err error
	for _, id := range ids {
		if sn.Headers[id], err = s.Header(ctx, id); err != nil {
			t.Fatalf("Header(%s): %v", id, err)
		}
		if sn.Descriptors[id], err = s.Descriptor(ctx, id); err != nil {
			t.Fatalf("Descriptor(%s): %v", id, err)
		}
		if sn.Events[id], err = s.Events(ctx, id); err != nil {
			t.Fatalf("Events(%s): %v", id, err)
		}
		if sn.Queued[id], err = s.Queued(ctx, id); err != nil {
			t.Fatalf("Queued(%s): %v", id, err)
		}
		if cp, ok, err := s.Checkpoint(ctx, id); err != nil {
			t.Fatalf("Checkpoint(%s): %v", id, err)
		} else if ok {
			sn.Checkpoints[id] = cp
		}
	}
	for _, p := range parents {
		if sn.Listings[p], err = s.Listings(ctx, p, seam.Page{}); err != nil {
			t.Fatalf("Listings(%s): %v", p, err)
		}
	}
	if sn.Residents, err = s.Residents(ctx); err != nil {
		t.Fatalf("Residents: %v", err)
	}
	return sn
}

// TestCompactShrinksTheFileAndKeepsEverything: after most children are
// deleted, Compact gives the space back, every remaining child, inbox,
// checkpoint, claim, notice and bucket sequence reads as before (also
// after a reopen), writes go on, and the directory stays locked.
func TestCompactShrinksTheFileAndKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	root := seam.PrincipalAddress("local")
	big := strings.Repeat("a long answer ", 400)
	var kept []string
	owner := seam.Owner{ID: "o1", Expires: time.Now().Add(time.Hour)}
	for i := range 300 {
		id := fmt.Sprintf("c%03d", i)
		h := testHeader(id, root, time.Duration(i)*time.Millisecond)
		w := seam.ChildWrite{Create: &seam.NewChild{Header: h, Descriptor: testDescriptor()}}
		if i%50 == 7 {
			w.Claim = &owner
		}
		if err := s.WriteChild(ctx, id, w); err != nil {
			t.Fatal(err)
		}
		if err := appendTo(s, id, testTurn(0, big)); err != nil {
			t.Fatal(err)
		}
		if i%50 != 0 && i%50 != 7 {
			continue
		}
		kept = append(kept, id)
		kid := testHeader(id+"-kid", id, time.Duration(i)*time.Millisecond)
		if err := createChild(s, kid, testDescriptor()); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, kid.ID)
		if err := s.WriteChild(ctx, id, seam.ChildWrite{Enqueue: []seam.QueuedMessage{{ID: "m-" + id, Text: "next", Source: agent.SourceUser}}}); err != nil {
			t.Fatal(err)
		}
		if err := s.SetCheckpoint(ctx, id, seam.Checkpoint{Seq: 3, Mode: seam.ModeContinuable, Label: "kept " + id}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 300 {
		if id := fmt.Sprintf("c%03d", i); i%50 != 0 && i%50 != 7 {
			if _, err := s.Delete(ctx, id); err != nil {
				t.Fatalf("Delete(%s): %v", id, err)
			}
		}
	}
	for range 3 {
		if err := s.AddNotice(ctx, root, seam.Notice{ChildID: "c000", Source: agent.SourceSettled, Text: "done"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.TakeNotices(ctx, root, nil); err != nil { // the sequence stays at 3
		t.Fatal(err)
	}
	if err := s.AddNotice(ctx, root, seam.Notice{ChildID: "c050", Source: agent.SourceReport, Text: "queued"}); err != nil {
		t.Fatal(err)
	}
	parents := append([]string{root}, kept...)
	before := takeSnapshot(t, s, kept, parents)
	if len(before.Checkpoints) != 12 || len(before.Residents) != 6 {
		t.Fatalf("the store holds %d checkpoints and %d claims before Compact; the test needs 12 and 6", len(before.Checkpoints), len(before.Residents))
	}

	st, err := s.Compact(ctx)
	if err != nil {
		t.Fatalf("Compact: %v", err)
	}
	if st.After <= 0 || st.After*4 > st.Before {
		t.Fatalf("Compact: %d → %d bytes; want the file at most a quarter of its size", st.Before, st.After)
	}
	if fi, err := os.Stat(s.Path()); err != nil || fi.Size() != st.After {
		t.Fatalf("the file at %s after Compact: %v, %v; want %d bytes", s.Path(), fi, err, st.After)
	}
	if _, err := os.Stat(s.Path() + ".compact"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the copy is left beside the store: %v", err)
	}
	if after := takeSnapshot(t, s, kept, parents); !reflect.DeepEqual(before, after) {
		t.Fatalf("the store reads differently after Compact:\nbefore %+v\nafter  %+v", before, after)
	}
	// The notice queue's sequence survived: the next notice is 5.
	if err := s.AddNotice(ctx, root, seam.Notice{ChildID: "c050", Source: agent.SourceReport, Text: "after"}); err != nil {
		t.Fatal(err)
	}
	ns, err := s.TakeNotices(ctx, root, nil)
	if err != nil || len(ns) != 2 || ns[0].Seq != 4 || ns[1].Seq != 5 {
		t.Fatalf("notices after Compact: %+v, %v; want seqs 4 and 5", ns, err)
	}
	// The claim is still refused to another owner: claims and the known
	// owners survived.
	other := seam.Owner{ID: "o2", Expires: time.Now().Add(time.Hour)}
	if err := s.WriteChild(ctx, "c007", seam.ChildWrite{Claim: &other}); !errors.Is(err, seam.ErrOwned) {
		t.Errorf("another owner's claim after Compact: %v, want ErrOwned", err)
	}
	if err := appendTo(s, "c000", testTurn(3, "more")); err != nil {
		t.Fatalf("a write after Compact: %v", err)
	}
	if _, err := Open(dir, Options{LockTimeout: 50 * time.Millisecond}); !errors.Is(err, ErrLocked) {
		t.Fatalf("a second Open after Compact: %v, want ErrLocked (the new file is locked)", err)
	}
	before.Events["c000"] = append(before.Events["c000"], testTurn(3, "more")...)
	delete(before.Checkpoints, "c000") // the append dropped it
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r := openTest(t, dir)
	after := takeSnapshot(t, r, kept, parents)
	for i := range before.Listings[root] {
		if before.Listings[root][i].Header.ID == "c000" {
			before.Listings[root][i].Checkpoint, before.Listings[root][i].JournalLen = nil, 0
		}
	}
	// Reopened, the claims are of an earlier opening: stale.
	for i := range before.Residents {
		before.Residents[i].Owner.Expires = time.Time{}
	}
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("the reopened store reads differently:\nbefore %+v\nafter  %+v", before, after)
	}
}

// TestCompactBesideTransactions: readers and writers running while the
// file is swapped wait for it and lose nothing.
func TestCompactBesideTransactions(t *testing.T) {
	s := openTest(t, t.TempDir())
	root := seam.PrincipalAddress("local")
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for w := range 4 {
		wg.Go(func() {
			for i := range 20 {
				id := fmt.Sprintf("w%d-%02d", w, i)
				if err := createChild(s, testHeader(id, root, time.Duration(w*100+i)), testDescriptor()); err != nil {
					errs <- err
					return
				}
				if _, err := s.Listings(ctx, root, seam.Page{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for range 5 {
		if _, err := s.Compact(ctx); err != nil {
			t.Fatalf("Compact: %v", err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a transaction beside Compact: %v", err)
	}
	if got := listedIDs(t, s, root); len(got) != 80 {
		t.Fatalf("%d children after concurrent creates and compactions, want 80", len(got))
	}
}
