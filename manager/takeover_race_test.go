package manager_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// readHook is a store that runs once, right after the first read of a
// child's journal returns from the store, a write the test interleaves
// there.
type readHook struct {
	seam.Store
	once  sync.Once
	after func()
}

func (s *readHook) Events(ctx context.Context, id string) ([]agent.Event, error) {
	ev, err := s.Store.Events(ctx, id)
	s.once.Do(s.after)
	return ev, err
}

// A former owner's lingering writer commits a turn's start just after the
// new owner's sweep read the journal (its lease ran out, but nobody had
// taken the child yet, so the fence let it through). The takeover must
// still close that turn: it claims the child, bumping the epoch, before
// it reads the journal it closes, so the transcript ends with the cut-off
// turn closed, and every write of the former owner after the takeover is
// refused with ErrOwned.
func TestATakeoverClosesATurnStartedWhileItReadTheJournal(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) seam.Store{
		"memstore": func(*testing.T) seam.Store { return memstore.New() },
		"bbolt": func(t *testing.T) seam.Store {
			s, err := persist.Open(t.TempDir(), persist.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st := open(t)
			hdr := seam.Header{ID: manager.NewID(), Parent: seam.PrincipalAddress("p"), Principal: "p", Mode: seam.ModeContinuable,
				Provider: "hold", Label: "l", Cwd: "/work", CreatedAt: time.Now()}
			desc := seam.Descriptor{Version: seam.DescriptorVersion, Mode: seam.ModeContinuable, Provider: "hold", Label: "l"}
			a := seam.Owner{ID: "server-a", Expires: time.Now().Add(time.Hour)}
			if err := st.WriteChild(ctx, hdr.ID, seam.ChildWrite{Create: &seam.NewChild{Header: hdr, Descriptor: desc}, Claim: &a}); err != nil {
				t.Fatal(err)
			}
			claim, ok, err := st.ClaimOf(ctx, hdr.ID)
			if err != nil || !ok || claim.Owner.ID != a.ID {
				t.Fatalf("ClaimOf = %+v, %v, %v; want server-a's claim", claim, ok, err)
			}
			fenceA := &seam.Fence{Owner: a.ID, Epoch: claim.Epoch}
			// A is paused past its lease.
			if err := st.Renew(ctx, seam.Owner{ID: a.ID, Expires: time.Now().Add(-time.Second)}); err != nil {
				t.Fatal(err)
			}

			turn := []agent.Event{
				{Seq: 0, Kind: agent.EventTurnStart, Turn: 1},
				{Seq: 1, Kind: agent.EventMessage, Turn: 1, Message: &seam.Message{Role: seam.RoleUser, Content: "hold: first"}},
			}
			var lateErr error
			hooked := &readHook{Store: st, after: func() {
				lateErr = st.WriteChild(ctx, hdr.ID, seam.ChildWrite{Fence: fenceA, Events: turn})
			}}
			notices := make(chan seam.Notice, 4)
			b := manager.New(manager.Options{Store: hooked, OwnerID: "server-b", LeaseTTL: time.Minute,
				OnNotice: func(_ string, n seam.Notice) { notices <- n }})
			t.Cleanup(func() { _ = b.Close(ctx) })
			b.SweepNow(ctx)
			if lateErr != nil {
				t.Fatalf("A's write before the takeover = %v; want it stored (A still held the claim)", lateErr)
			}
			select {
			case n := <-notices:
				if n.ChildID != hdr.ID || n.StopReason != agent.StopAborted {
					t.Fatalf("B announced %+v; want the cut-off epoch of %s, aborted", n, hdr.ID)
				}
			default:
				t.Fatal("B's sweep did not take the child over")
			}

			events, err := st.Events(ctx, hdr.ID)
			if err != nil {
				t.Fatal(err)
			}
			if len(events) != 3 || events[2].Kind != agent.EventTurnEnd || events[2].StopReason != agent.StopAborted {
				var kinds []string
				for _, e := range events {
					kinds = append(kinds, string(e.Kind)+" "+string(e.StopReason))
				}
				t.Fatalf("the journal after the takeover: %q; want A's turn start and message, then the turn closed as aborted", kinds)
			}
			after, _, err := st.ClaimOf(ctx, hdr.ID)
			if err != nil {
				t.Fatal(err)
			}
			// A wakes: its turn's end is refused, as is anything else of A's.
			end := agent.Event{Seq: 2, Kind: agent.EventTurnEnd, Turn: 1, StopReason: agent.StopCompleted}
			if err := st.WriteChild(ctx, hdr.ID, seam.ChildWrite{Fence: fenceA, Events: []agent.Event{end}}); !errors.Is(err, seam.ErrOwned) {
				t.Fatalf("A's write after the takeover (claim now %+v) = %v; want ErrOwned", after, err)
			}
			if err := st.WriteChild(ctx, hdr.ID, seam.ChildWrite{Fence: fenceA, Enqueue: []seam.QueuedMessage{{ID: "late", Text: "late from A"}}}); !errors.Is(err, seam.ErrOwned) {
				t.Fatalf("A's admission after the takeover = %v; want ErrOwned", err)
			}
		})
	}
}
