package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// RunSessions runs the cases of seam.Sessions, for the stores that have
// it (memstore, pgstore; bbolt has no other instance to share liveness
// with). open is RunShared's: two handles of one new store.
func RunSessions(t *testing.T, open func(t *testing.T) (watcher, writer seam.Store)) {
	t.Helper()
	runPairs(t, open, []pairCase{
		{"an open session is live at every handle until closed; closing wakes its principal", testSessionOpenClose},
		{"a session lives with its owner's lease; a reap removes the expired and wakes their principals", testSessionLease},
	})
}

func sessions(t *testing.T, s seam.Store) seam.Sessions {
	t.Helper()
	ss, ok := s.(seam.Sessions)
	if !ok {
		t.Fatalf("%T is not a seam.Sessions", s)
	}
	return ss
}

// liveSessions is principal's live records as "session@owner", sorted.
func liveSessions(t *testing.T, s seam.Store, principal string) []string {
	t.Helper()
	got, err := sessions(t, s).SessionsOf(ctx, principal)
	if err != nil {
		t.Fatalf("SessionsOf(%q): %v", principal, err)
	}
	var out []string
	for _, se := range got {
		if se.Principal != principal || se.Owner.Expires.IsZero() {
			t.Fatalf("SessionsOf(%q) returned %+v", principal, se)
		}
		out = append(out, se.ID+"@"+se.Owner.ID)
	}
	slices.Sort(out)
	return out
}

func wantSessions(t *testing.T, s seam.Store, principal string, want ...string) {
	t.Helper()
	if got := liveSessions(t, s, principal); !slices.Equal(got, want) {
		t.Fatalf("live sessions of %q = %v; want %v", principal, got, want)
	}
}

func openSession(t *testing.T, s seam.Store, id, principal, owner string, expires time.Time) {
	t.Helper()
	if err := sessions(t, s).OpenSession(ctx, seam.Session{ID: id, Principal: principal, Owner: seam.Owner{ID: owner, Expires: expires}}); err != nil {
		t.Fatalf("OpenSession(%s at %s): %v", id, owner, err)
	}
}

func testSessionOpenClose(t *testing.T, w, s seam.Store) {
	later := time.Now().Add(time.Hour)
	openSession(t, s, "s1", "p", "owner-a", later)
	openSession(t, s, "s2", "q", "owner-a", later)
	wantSessions(t, w, "p", "s1@owner-a")
	// Opening again keeps one record; at another owner it is a second.
	openSession(t, s, "s1", "p", "owner-a", later)
	openSession(t, s, "s1", "p", "owner-b", later)
	wantSessions(t, w, "p", "s1@owner-a", "s1@owner-b")
	c := watch(t, w, seam.PrincipalAddress("p"))
	if err := sessions(t, s).CloseSession(ctx, "s1", "owner-a"); err != nil {
		t.Fatal(err)
	}
	woken(t, c, "a session of the principal was closed")
	wantSessions(t, w, "p", "s1@owner-b")
	wantSessions(t, w, "q", "s2@owner-a")
	if err := sessions(t, s).CloseSession(ctx, "unknown", "owner-a"); err != nil {
		t.Fatalf("closing an unknown session = %v; want no error", err)
	}
}

func testSessionLease(t *testing.T, w, s seam.Store) {
	later := time.Now().Add(time.Hour)
	openSession(t, s, "s1", "p", "owner-a", later)
	openSession(t, s, "s2", "p", "owner-b", later)
	// A lease a session set in the past is not live; a renewal revives it.
	openSession(t, s, "s3", "p", "owner-c", time.Now().Add(-time.Second))
	wantSessions(t, w, "p", "s1@owner-a", "s2@owner-b")
	if err := s.Renew(ctx, seam.Owner{ID: "owner-c", Expires: later}); err != nil {
		t.Fatal(err)
	}
	wantSessions(t, w, "p", "s1@owner-a", "s2@owner-b", "s3@owner-c")
	// owner-a dies: its lease runs out.
	if err := s.Renew(ctx, seam.Owner{ID: "owner-a", Expires: time.Now().Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	wantSessions(t, w, "p", "s2@owner-b", "s3@owner-c")
	c := watch(t, w, seam.PrincipalAddress("p"))
	reaped, err := sessions(t, s).ReapSessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(reaped) != 1 || reaped[0].ID != "s1" || reaped[0].Owner.ID != "owner-a" || reaped[0].Principal != "p" {
		t.Fatalf("ReapSessions = %+v; want s1 at owner-a", reaped)
	}
	woken(t, c, "a session of the principal was reaped")
	// Reaped for good: the owner's renewal does not bring it back.
	if err := s.Renew(ctx, seam.Owner{ID: "owner-a", Expires: later}); err != nil {
		t.Fatal(err)
	}
	wantSessions(t, w, "p", "s2@owner-b", "s3@owner-c")
	if reaped, err := sessions(t, s).ReapSessions(ctx); err != nil || len(reaped) != 0 {
		t.Fatalf("a second reap = %+v, %v; want nothing", reaped, err)
	}
}
