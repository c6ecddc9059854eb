package persist

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// A short foreground turn commits its whole life in one write: the record,
// the owner's claim, the prompt in and out of the inbox, the turn and the
// settlement. The claim is revoked and the prompt taken in that same write,
// so neither may cost a page: every page is a write and part of the sync
// the caller waits for. Two stores built by the same writes commit that
// last write with and without the claim and the prompt; the page writes
// must be the same.
func TestAWholeLifeWritesNoClaimOrInboxPages(t *testing.T) {
	pages := func(withClaimAndPrompt bool) int64 {
		s := openTest(t, t.TempDir())
		// Enough resident children with queued messages that the active
		// and inboxes buckets are trees of their own, not inline values.
		o := seam.Owner{ID: "o1", Expires: t0.Add(time.Hour)}
		for i := range 300 {
			id := fmt.Sprintf("resident-%03d", i)
			w := seam.ChildWrite{Create: &seam.NewChild{Header: testHeader(id, "principal:local", time.Duration(i)), Descriptor: testDescriptor()},
				Claim: &o, Enqueue: []seam.QueuedMessage{{ID: "q-" + id, Text: "waiting", Source: agent.SourceUser}}}
			if err := s.WriteChild(ctx, id, w); err != nil {
				t.Fatal(err)
			}
		}
		w := seam.ChildWrite{Create: &seam.NewChild{Header: testHeader("once", "principal:local", time.Hour), Descriptor: testDescriptor()},
			Events: testTurn(0, "go"), Settle: &seam.Checkpoint{Seq: 3, Mode: seam.ModeContinuable, Stop: agent.StopCompleted}}
		if withClaimAndPrompt {
			w.Claim = &o
			w.Enqueue, w.Dequeue = []seam.QueuedMessage{{ID: "prompt", Text: "go", Source: agent.SourceUser}}, []string{"prompt"}
		}
		before := s.db.Stats()
		if err := s.WriteChild(ctx, "once", w); err != nil {
			t.Fatal(err)
		}
		if got := queuedIDsOf(t, s, "once"); len(got) != 0 {
			t.Fatalf("Queued = %v", got)
		}
		after := s.db.Stats()
		return after.TxStats.GetWrite() - before.TxStats.GetWrite()
	}
	bare, whole := pages(false), pages(true)
	if whole != bare {
		t.Errorf("the whole-life write wrote %d pages, the same write without the claim and the prompt %d", whole, bare)
	}
	if bare == 0 {
		t.Fatal("the write wrote no page: the count measures nothing")
	}
}

func queuedIDsOf(t *testing.T, s *Store, id string) []string {
	t.Helper()
	qs, err := s.Queued(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, q := range qs {
		ids = append(ids, q.ID)
	}
	return ids
}

// The store syncs every commit, and so does the file Compact swaps in:
// there is no switch that turns the fsyncs off.
func TestTheStoreSyncsBeforeAndAfterCompact(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.db.NoSync {
		t.Fatal("the store commits without fsync")
	}
	if err := createChild(s, testHeader("c", "principal:local", 0), testDescriptor()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if s.db.NoSync {
		t.Error("the compacted file commits without fsync")
	}
	if got := listedIDs(t, s, "principal:local"); len(got) != 1 {
		t.Errorf("listed after compact = %v", got)
	}
}
