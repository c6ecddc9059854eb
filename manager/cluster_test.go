//go:build postgres

package manager_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// settledNotice waits for the settlement notice of id among notices.
func settledNotice(t *testing.T, notices <-chan seam.Notice, id string) seam.Notice {
	t.Helper()
	for {
		select {
		case n := <-notices:
			if n.ChildID == id && n.Source == agent.SourceSettled {
				return n
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no settlement notice of %s within 30s", id)
		}
	}
}

// A follow-up sent at an instance that does not hold the child is admitted
// to the child's stored inbox and run by its owner, behind the turn in
// flight; the sender, waiting, gets the owner's answer.
func TestFollowupAtAnotherInstanceRunsAtTheOwner(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		ctx := context.Background()
		root := seam.ParentRef{Principal: "p", Cwd: "/work"}
		a, pa := server(t, manager.Options{Store: st, OwnerID: "server-a", LeaseTTL: time.Minute}, "A")
		b, pb := server(t, manager.Options{Store: st, OwnerID: "server-b", LeaseTTL: time.Minute}, "B")
		s := startHeld(t, a, pa, root)

		sent, err := b.Followup(ctx, root, s.ChildID, "second", true)
		if err != nil {
			t.Fatalf("the follow-up at B = %v; want it admitted for A", err)
		}
		if sent.Route != manager.RouteForwarded {
			t.Errorf("route = %q; want %q", sent.Route, manager.RouteForwarded)
		}
		close(pa.release)
		close(pb.release)
		if res := waitFor(t, s, "A's first turn"); res.Output != "A done: hold: first" {
			t.Fatalf("A's first turn = %+v", res)
		}
		res := waitFor(t, sent, "the follow-up's waiting caller at B")
		if res.StopReason != agent.StopCompleted || res.Output != "A done: second" {
			t.Fatalf("B's caller got %+v; want A's answer to the follow-up", res)
		}
		if c, ok, err := st.ClaimOf(ctx, s.ChildID); err != nil || (ok && c.Owner.ID != "server-a") {
			t.Fatalf("ClaimOf = %+v, %v, %v; the child must never have left A", c, ok, err)
		}
		checkStoredTranscript(t, st, s.ChildID, []string{"hold: first", "second"}, "B done:")
	})
}

// Follow-ups sent at three instances, one after the other, while the owner
// runs a turn, all run at the owner in the order they were admitted, one
// turn each.
func TestFollowupsAtSeveralInstancesRunInAdmittedOrder(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		ctx := context.Background()
		root := seam.ParentRef{Principal: "p", Cwd: "/work"}
		a, pa := server(t, manager.Options{Store: st, OwnerID: "server-a", LeaseTTL: time.Minute}, "A")
		b, _ := server(t, manager.Options{Store: st, OwnerID: "server-b", LeaseTTL: time.Minute}, "B")
		c, _ := server(t, manager.Options{Store: st, OwnerID: "server-c", LeaseTTL: time.Minute}, "C")
		s := startHeld(t, a, pa, root)

		at := []*manager.Manager{b, c, a, b, c, a}
		var inputs []string
		var last *manager.Sent
		for i, m := range at {
			text := fmt.Sprintf("m%d", i+1)
			sent, err := m.Followup(ctx, root, s.ChildID, text, i == len(at)-1)
			if err != nil {
				t.Fatalf("follow-up %s: %v", text, err)
			}
			inputs, last = append(inputs, text), sent
		}
		close(pa.release)
		if res := waitFor(t, last, "the last follow-up"); res.Output != "A done: m6" {
			t.Fatalf("the last follow-up = %+v; want A's answer", res)
		}
		// The last turn was answered in band: no settlement notice.
		if err := waitSettled(ctx, st, s.ChildID); err != nil {
			t.Fatal(err)
		}
		checkStoredTranscript(t, st, s.ChildID, append([]string{"hold: first"}, inputs...), "B done:")
		if q, err := st.Queued(ctx, s.ChildID); err != nil || len(q) != 0 {
			t.Fatalf("stored inbox after the settlement = %+v, %v; want empty", q, err)
		}
	})
}

// A caller waiting at B on a follow-up the owner A had not run yet gets
// the answer of the instance that took the child over once A's lease ran
// out (A paused), not A's; A's own waiter is told A lost the claim.
func TestWaitAtAnotherInstanceAcrossATakeover(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		ctx := context.Background()
		root := seam.ParentRef{Principal: "p", Cwd: "/work"}
		var lag atomic.Int64
		a, pa := server(t, manager.Options{Store: st, OwnerID: "server-a", LeaseTTL: time.Minute, Clock: lagging(&lag)}, "A")
		b, _ := server(t, manager.Options{Store: st, OwnerID: "server-b", LeaseTTL: time.Minute}, "B")
		notices := make(chan seam.Notice, 8)
		c, _ := server(t, manager.Options{Store: st, OwnerID: "server-c", LeaseTTL: 150 * time.Millisecond,
			OnNotice: func(_ string, n seam.Notice) { notices <- n }}, "C")
		s := startHeld(t, a, pa, root)
		// A's turn has begun in the journal (its writer lingers on events
		// nobody waits for), so the takeover closes it rather than re-run
		// its prompt.
		journaled(t, st, s.ChildID, "hold: first")
		sent, err := b.Followup(ctx, root, s.ChildID, "second", true)
		if err != nil || sent.Route != manager.RouteForwarded {
			t.Fatalf("the follow-up at B = %+v, %v; want it forwarded", sent, err)
		}
		if err := c.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		expire(t, st, &lag)
		takenOver(t, notices, s.ChildID)
		res := waitFor(t, sent, "B's waiting caller")
		if res.StopReason != agent.StopCompleted || res.Output != "C done: second" {
			t.Fatalf("B's caller got %+v; want C's answer", res)
		}
		close(pa.release)
		if res := waitFor(t, s, "A's waiting caller"); res.StopReason != agent.StopError || !strings.Contains(res.Diagnostic, "lost the claim") || res.Output != "" {
			t.Fatalf("A's caller got %+v; want an error saying A lost the claim", res)
		}
		checkStoredTranscript(t, st, s.ChildID, []string{"hold: first", "second"}, "A done:")
	})
}

// Listing at an instance that does not hold a child shows it with its
// owner's status: running while its turn runs, idle once interrupted with
// a queue parked behind it, ready once settled; a status filter finds it.
func TestListingAtAnotherInstanceShowsTheOwnersStatus(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		ctx := context.Background()
		root := seam.ParentRef{Principal: "p", Cwd: "/work"}
		a, pa := server(t, manager.Options{Store: st, OwnerID: "server-a", LeaseTTL: time.Minute}, "A")
		b, _ := server(t, manager.Options{Store: st, OwnerID: "server-b", LeaseTTL: time.Minute}, "B")
		statusAt := func(m *manager.Manager, filter string) string {
			t.Helper()
			page, err := m.List(root, manager.ListQuery{Status: filter})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page.Rows {
				if r.ID != "" && r.Kind == "child" {
					return r.Status
				}
			}
			return ""
		}
		s := startHeld(t, a, pa, root)
		if got := statusAt(b, ""); got != manager.StatusRunning {
			t.Fatalf("B lists the child running at A as %q; want running", got)
		}
		if got := statusAt(b, manager.StatusRunning); got != manager.StatusRunning {
			t.Fatalf("B's running filter finds %q; want the child", got)
		}
		if _, err := a.Followup(ctx, root, s.ChildID, "later", false); err != nil {
			t.Fatal(err)
		}
		if err := a.Interrupt(root, s.ChildID); err != nil {
			t.Fatal(err)
		}
		if res := waitFor(t, s, "the interrupted turn"); res.StopReason != agent.StopAborted {
			t.Fatalf("the interrupted turn = %+v", res)
		}
		// Resident at A, its queue parked: idle.
		if got := statusAt(a, ""); got != manager.StatusIdle {
			t.Fatalf("A lists its own child as %q; want idle", got)
		}
		if got := statusAt(b, ""); got != manager.StatusIdle {
			t.Fatalf("B lists the child idle at A as %q; want idle", got)
		}
		if got := statusAt(b, manager.StatusIdle); got != manager.StatusIdle {
			t.Fatalf("B's idle filter finds %q; want the child", got)
		}
		// The next send (here at B) wakes the parked queue at A.
		sent, err := b.Followup(ctx, root, s.ChildID, "go on", true)
		if err != nil {
			t.Fatal(err)
		}
		if res := waitFor(t, sent, "the follow-up at B"); res.Output != "A done: go on" {
			t.Fatalf("the follow-up at B = %+v", res)
		}
		// Answered in band at B: A settles the child with no notice.
		if err := waitSettled(ctx, st, s.ChildID); err != nil {
			t.Fatal(err)
		}
		if got := statusAt(b, ""); got != manager.StatusReady {
			t.Fatalf("B lists the settled child as %q; want ready", got)
		}
	})
}

// A settlement notice for a root principal, stored by the instance that
// held the child, wakes the principal's waiting call at another instance
// at once, and is taken there once: no instance takes it again.
func TestNoticeReachesAWaiterAtAnotherInstance(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		ctx := context.Background()
		root := seam.ParentRef{Principal: "p", Cwd: "/work"}
		a, pa := server(t, manager.Options{Store: st, OwnerID: "server-a", LeaseTTL: time.Minute}, "A")
		took := make(chan struct{}, 1)
		b, _ := server(t, manager.Options{Store: takeTap{st, took}, OwnerID: "server-b", LeaseTTL: time.Minute}, "B")
		c, _ := server(t, manager.Options{Store: st, OwnerID: "server-c", LeaseTTL: time.Minute}, "C")
		s, err := a.StartContinuable(ctx, "hold", seam.StartRequest{Label: "l", Prompt: "hold: bg", Parent: root}, false)
		if err != nil {
			t.Fatal(err)
		}
		<-pa.holding
		got := make(chan []seam.Notice, 1)
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		go func() { got <- b.WaitNotices(wctx, "p", "") }()
		<-took // B found nothing and waits
		close(pa.release)
		select {
		case ns := <-got:
			if len(ns) != 1 || ns[0].ChildID != s.ChildID || ns[0].StopReason != agent.StopCompleted {
				t.Fatalf("B's waiting call took %+v; want the settlement of %s", ns, s.ChildID)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("B's waiting call was not woken by the notice A stored")
		}
		for _, m := range []*manager.Manager{a, b, c} {
			if ns := m.TakeNotices("p", ""); len(ns) != 0 {
				t.Fatalf("a notice was taken twice: %+v", ns)
			}
		}
	})
}

// takeTap is a store that tells took after each TakeNotices.
type takeTap struct {
	seam.Store
	took chan struct{}
}

func (s takeTap) TakeNotices(ctx context.Context, to string, take func(seam.Notice) bool) ([]seam.Notice, error) {
	ns, err := s.Store.TakeNotices(ctx, to, take)
	select {
	case s.took <- struct{}{}:
	default:
	}
	return ns, err
}

func (s takeTap) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return s.Store.(seam.Waker).Watch(ctx, key)
}

// A follow-up sent at B while the owner A settles the child (its only turn
// ends at once) is run exactly once, whoever runs it: A before settling, A
// again after (it looks at the stored inbox once settled), or B (which
// resumes a child it finds unclaimed after admitting the message).
func TestFollowupAtAnotherInstanceRacingTheSettlement(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		ctx := context.Background()
		root := seam.ParentRef{Principal: "p", Cwd: "/work"}
		a, _ := server(t, manager.Options{Store: st, OwnerID: "server-a", LeaseTTL: time.Minute}, "A")
		b, _ := server(t, manager.Options{Store: st, OwnerID: "server-b", LeaseTTL: time.Minute}, "B")
		for i := range 10 {
			s, err := a.StartContinuable(ctx, "hold", seam.StartRequest{Label: "l", Prompt: fmt.Sprintf("quick %d", i), Parent: root}, false)
			if err != nil {
				t.Fatal(err)
			}
			text := fmt.Sprintf("more %d", i)
			sent, err := b.Followup(ctx, root, s.ChildID, text, true)
			if err != nil {
				t.Fatalf("follow-up %d at B = %v", i, err)
			}
			res := waitFor(t, sent, "the follow-up at B")
			if res.StopReason != agent.StopCompleted || !strings.HasSuffix(res.Output, " done: "+text) {
				t.Fatalf("follow-up %d (%s) = %+v; want its answer", i, sent.Route, res)
			}
			// Its turn ran once, after the first.
			if err := waitSettled(ctx, st, s.ChildID); err != nil {
				t.Fatal(err)
			}
			checkStoredTranscript(t, st, s.ChildID, []string{fmt.Sprintf("quick %d", i), text}, "\x00")
		}
	})
}

// lagging is a clock that can be set back: a server paused past its
// lease, whose renewals (were it to run one) expire at once.
func lagging(lag *atomic.Int64) func() time.Time {
	return func() time.Time { return time.Now().Add(-time.Duration(lag.Load())) }
}
