//go:build postgres

package manager_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// sessionSet is the root sessions connected at one instance
// (Options.SessionConnected).
type sessionSet struct {
	mu  sync.Mutex
	ids map[string]bool
}

func connectedHere(ids ...string) *sessionSet {
	s := &sessionSet{ids: map[string]bool{}}
	for _, id := range ids {
		s.ids[id] = true
	}
	return s
}

func (s *sessionSet) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[id]
}

func (s *sessionSet) drop(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ids, id)
}

// sessionTap is takeTap keeping the store's shared sessions.
type sessionTap struct{ takeTap }

func (s sessionTap) OpenSession(ctx context.Context, se seam.Session) error {
	return s.Store.(seam.Sessions).OpenSession(ctx, se)
}
func (s sessionTap) CloseSession(ctx context.Context, session, owner string) error {
	return s.Store.(seam.Sessions).CloseSession(ctx, session, owner)
}
func (s sessionTap) SessionsOf(ctx context.Context, principal string) ([]seam.Session, error) {
	return s.Store.(seam.Sessions).SessionsOf(ctx, principal)
}
func (s sessionTap) ReapSessions(ctx context.Context) ([]seam.Session, error) {
	return s.Store.(seam.Sessions).ReapSessions(ctx)
}

// sessionsApart sets up two instances sharing st, the principal's session
// s-a connected at A and s-b at B, and a child s-a started at A settled:
// its notice is s-a's. B's other session must not take it while s-a is
// connected at A. It returns B's waiting call for the principal's notices
// (started once B looked and found nothing) and the notice's child id.
func sessionsApart(t *testing.T, st seam.Store, optsA, optsB manager.Options) (a, b *manager.Manager, atA *sessionSet, wait <-chan []seam.Notice, childID string) {
	t.Helper()
	ctx := context.Background()
	atA, atB := connectedHere("s-a"), connectedHere("s-b")
	notices := make(chan seam.Notice, 8)
	optsA.Store, optsA.OwnerID, optsA.SessionConnected = st, "server-a", atA.has
	optsA.OnNotice = func(_ string, n seam.Notice) { notices <- n }
	a, _ = server(t, optsA, "A")
	took := make(chan struct{}, 1)
	optsB.Store, optsB.OwnerID, optsB.SessionConnected = sessionTap{takeTap{st, took}}, "server-b", atB.has
	b, _ = server(t, optsB, "B")
	a.SessionOpened("p", "s-a")
	b.SessionOpened("p", "s-b")
	s, err := a.StartContinuable(ctx, "hold", seam.StartRequest{Label: "l", Prompt: "quick", Parent: seam.ParentRef{Principal: "p", Session: "s-a", Cwd: "/work"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if n := settledNotice(t, notices, s.ChildID); n.Session != "s-a" {
		t.Fatalf("the notice's session = %q; want s-a", n.Session)
	}
	// (a) s-a is connected at A: neither B's session nor a sessionless
	// call at B takes its notice.
	for _, session := range []string{"s-b", ""} {
		if ns := b.TakeNotices("p", session); len(ns) != 0 {
			t.Fatalf("B's call (session %q) took %+v while the notice's session is connected at A", session, ns)
		}
	}
	<-took
	got := make(chan []seam.Notice, 1)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancel)
	go func() { got <- b.WaitNotices(wctx, "p", "s-b") }()
	<-took // B's waiting call looked, found nothing it may take, and waits
	select {
	case ns := <-got:
		t.Fatalf("B's waiting call returned %+v while the notice's session is connected at A", ns)
	default:
	}
	return a, b, atA, got, s.ChildID
}

// tookOnce checks B's waiting call got the notice of id, and that nobody
// takes it again.
func tookOnce(t *testing.T, wait <-chan []seam.Notice, id string, ms ...*manager.Manager) {
	t.Helper()
	select {
	case ns := <-wait:
		if len(ns) != 1 || ns[0].ChildID != id {
			t.Fatalf("B's waiting call took %+v; want the notice of %s", ns, id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("B's waiting call was not woken within 30s of the notice's session ending at A")
	}
	for _, m := range ms {
		for _, session := range []string{"s-a", "s-b", ""} {
			if ns := m.TakeNotices("p", session); len(ns) != 0 {
				t.Fatalf("a notice was taken twice: %+v", ns)
			}
		}
	}
}

// A root notice is its session's while that session is connected at any
// instance: another session of the principal, calling at another
// instance, does not take it. When the session disconnects at its
// instance, the principal's call waiting at the other is woken and takes
// it, once.
func TestNoticeWaitsForItsSessionConnectedAtAnotherInstance(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		opts := manager.Options{LeaseTTL: time.Minute}
		a, b, atA, wait, id := sessionsApart(t, st, opts, opts)
		atA.drop("s-a")
		a.SessionGone("s-a")
		tookOnce(t, wait, id, a, b)
	})
}

// Likewise when the session's instance dies: once its lease runs out, the
// other instance's renewal finds the session gone and wakes the
// principal's waiting call there, which takes the notice, once.
func TestNoticeOfASessionWhoseInstanceDiedGoesToTheNextCall(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		var lag atomic.Int64
		a, b, _, wait, id := sessionsApart(t, st,
			manager.Options{LeaseTTL: time.Minute, Clock: lagging(&lag)},
			manager.Options{LeaseTTL: 150 * time.Millisecond})
		expire(t, st, &lag) // A is gone, its session still connected there
		tookOnce(t, wait, id, a, b)
	})
}

// An instance paused past its lease loses its sessions' records to the
// others' reaping; when it resumes, its next renewal records again those
// still connected there, so their notices wait for them again.
func TestSessionsOfAPausedInstanceAreRecordedAgainWhenItResumes(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		ctx := context.Background()
		var lag atomic.Int64
		a, _ := server(t, manager.Options{Store: st, OwnerID: "server-a", LeaseTTL: 150 * time.Millisecond, Clock: lagging(&lag),
			SessionConnected: connectedHere("s-a").has}, "A")
		a.SessionOpened("p", "s-a")
		ss := st.(seam.Sessions)
		recorded := func() bool {
			recs, err := ss.SessionsOf(ctx, "p")
			if err != nil {
				t.Fatal(err)
			}
			return len(recs) == 1 && recs[0].ID == "s-a" && recs[0].Owner.ID == "server-a"
		}
		until := func(want bool, what string) {
			t.Helper()
			for deadline := time.Now().Add(30 * time.Second); recorded() != want; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("not %s within 30s", what)
				}
			}
		}
		until(true, "recorded")
		lag.Store(int64(time.Hour)) // paused: its renewals come too late
		until(false, "expired by A's own late renewal")
		// Reaped (A's own renewal may have reaped it already).
		if _, err := ss.ReapSessions(ctx); err != nil {
			t.Fatal(err)
		}
		lag.Store(0) // resumed
		until(true, "recorded again once A renewed")
	})
}
