package manager_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Two managers share a store. A child resident in the first stays claimed
// for as long as the first runs (its renewer outlives several leases), so
// the second neither announces it nor resumes it: a send there is admitted
// to the child's stored inbox for its owner (route forwarded). Once the
// first closes, its claim stays but expires at once: the second's Recover
// announces the epoch and, the store being shared, resumes the child
// there to run the forwarded message at once (as a sweep's takeover does);
// a send after it reaches the child there.
func TestAChildResidentElsewhereIsRefusedUntilItsOwnerCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := memstore.New()
		root := seam.ParentRef{Principal: "p", Cwd: "/work"}
		newMgr := func() (*manager.Manager, *scriptProvider) {
			m := manager.New(manager.Options{Store: st, LeaseTTL: 3 * time.Second})
			p := &scriptProvider{m: m, out: &handedOut{}, blocked: make(chan string, 1)}
			if err := m.Register(p); err != nil {
				t.Fatal(err)
			}
			return m, p
		}
		m1, p1 := newMgr()
		s, err := m1.StartContinuable(ctx, "script", seam.StartRequest{Label: "l", Prompt: "block", Parent: root}, false)
		if err != nil {
			t.Fatal(err)
		}
		<-p1.blocked
		claims, err := st.Residents(ctx)
		if err != nil || len(claims) != 1 || claims[0].ChildID != s.ChildID {
			t.Fatalf("Residents = %+v, %v; want the new child claimed", claims, err)
		}
		first := claims[0].Owner

		time.Sleep(10 * time.Second) // more than three leases: only renewal keeps the claim
		claims, _ = st.Residents(ctx)
		if len(claims) != 1 || claims[0].Owner.ID != first.ID || !claims[0].Owner.Expires.After(time.Now()) {
			t.Fatalf("after 10s Residents = %+v; want %s's claim renewed past now", claims, first.ID)
		}

		m2, _ := newMgr()
		if err := m2.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		if ns := m2.TakeNotices("p", ""); len(ns) != 0 {
			t.Errorf("Recover announced a child resident in another manager: %+v", ns)
		}
		fwd, err := m2.Followup(ctx, root, s.ChildID, "hello", false)
		if err != nil || fwd.Route != manager.RouteForwarded {
			t.Fatalf("a send to a child resident elsewhere = %+v, %v; want it forwarded to the owner", fwd, err)
		}
		if q, err := st.Queued(ctx, s.ChildID); err != nil || len(q) != 1 || q[0].ID != fwd.MessageID {
			t.Fatalf("the stored inbox after the forward = %+v, %v; want the message", q, err)
		}

		if err := m1.Close(ctx); err != nil {
			t.Fatal(err)
		}
		claims, _ = st.Residents(ctx)
		if len(claims) != 1 || claims[0].Owner.ID != first.ID || claims[0].Owner.Expires.After(time.Now()) {
			t.Fatalf("after Close Residents = %+v; want the claim kept, expired", claims)
		}
		if err := m2.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		ns := m2.TakeNotices("p", "")
		if len(ns) != 1 || ns[0].ChildID != s.ChildID || ns[0].StopReason != agent.StopAborted {
			t.Fatalf("notices after the owner closed = %+v; want the interrupted epoch announced", ns)
		}
		synctest.Wait() // the forwarded message's turn, run by Recover
		if q, err := st.Queued(ctx, s.ChildID); err != nil || len(q) != 0 {
			t.Fatalf("the stored inbox after Recover = %+v, %v; want the forwarded message taken", q, err)
		}
		events, err := st.Events(ctx, s.ChildID)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(events, func(e agent.Event) bool {
			return e.Message != nil && e.Message.Content == "done: hello"
		}) {
			t.Fatalf("Recover did not run the forwarded message:\n%+v", events)
		}
		sent, err := m2.Followup(ctx, root, s.ChildID, "again", true)
		if err != nil || sent.Route == manager.RouteForwarded {
			t.Fatalf("a send after the owner closed = %+v, %v; want it taken here", sent, err)
		}
		if res, ok := sent.Wait(ctx); !ok || res.Output != "done: again" {
			t.Errorf("the resumed turn = %+v, %v", res, ok)
		}
		if err := m2.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
