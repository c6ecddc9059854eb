package sessions_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/manager/sessions"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// instance is one tracker over a shared store, with the sessions
// connected at it and its lease (which a test may let lapse).
type instance struct {
	*sessions.Tracker
	mu     sync.Mutex
	here   map[string]bool
	lapsed bool
	refuse bool
}

func (i *instance) connected(s string) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.here[s]
}

func (i *instance) set(s string, here bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.here[s] = here
}

// connect has session of principal connect here and call.
func (i *instance) connect(principal, session string) {
	i.set(session, true)
	i.Opened(principal, session)
}

func (i *instance) lapse(l bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.lapsed = l
}

func newInstance(st seam.Sessions, owner string) *instance {
	i := &instance{here: map[string]bool{}}
	i.Tracker = sessions.New(sessions.Config{Store: st, Owner: owner, Timeout: 5 * time.Second,
		Lease: func() seam.Owner {
			i.mu.Lock()
			defer i.mu.Unlock()
			if i.lapsed {
				return seam.Owner{ID: owner, Expires: time.Now().Add(-time.Second)}
			}
			return seam.Owner{ID: owner, Expires: time.Now().Add(time.Hour)}
		},
		Connected: i.connected,
		Keep:      func() bool { i.mu.Lock(); defer i.mu.Unlock(); return !i.refuse }})
	return i
}

// recorded is the store's record of principal's sessions: id → owner.
func recorded(t *testing.T, st seam.Sessions, principal string) map[string]string {
	t.Helper()
	recs, err := st.SessionsOf(context.Background(), principal)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range recs {
		out[r.ID] = r.Owner.ID
	}
	return out
}

func TestConnectedHereAndElsewhere(t *testing.T) {
	st := memstore.New()
	a, b := newInstance(st, "A"), newInstance(st, "B")
	a.connect("p", "s-a")
	a.Opened("p", "s-a") // a later call of the same session changes nothing
	b.connect("p", "s-b")
	if got := recorded(t, st, "p"); len(got) != 2 || got["s-a"] != "A" || got["s-b"] != "B" {
		t.Fatalf("store records %v; want s-a at A and s-b at B", got)
	}
	if !a.Here("s-a") || a.Here("s-b") {
		t.Errorf("at A: Here(s-a)=%v Here(s-b)=%v; want true, false", a.Here("s-a"), a.Here("s-b"))
	}
	if got := a.Elsewhere(context.Background(), "p"); len(got) != 1 || !got["s-b"] {
		t.Errorf("A sees elsewhere %v; want only s-b (its own sessions are not elsewhere)", got)
	}
	if got := b.Elsewhere(context.Background(), "p"); len(got) != 1 || !got["s-a"] {
		t.Errorf("B sees elsewhere %v; want only s-a", got)
	}
	if !a.Any() {
		t.Error("A records a session but Any is false: its lease would not be renewed")
	}
}

func TestGoneRemovesTheRecordOnceNotConnectedAndSignals(t *testing.T) {
	st := memstore.New()
	a, b := newInstance(st, "A"), newInstance(st, "B")
	a.connect("p", "s-a")
	changed := a.Changed()
	a.Gone("s-a") // still connected here (an HTTP session's grace): stays
	select {
	case <-changed:
	default:
		t.Error("Gone did not close Changed: waiters would not look again")
	}
	if got := b.Elsewhere(context.Background(), "p"); !got["s-a"] {
		t.Fatalf("a session still connected at A went from the store at Gone: B sees %v", got)
	}
	a.set("s-a", false)
	a.Gone("s-a")
	if got := b.Elsewhere(context.Background(), "p"); len(got) != 0 {
		t.Errorf("B still sees %v after the session went from A", got)
	}
	if a.Any() {
		t.Error("A still records a session that went")
	}
}

func TestTendRemovesSessionsNoLongerConnectedHere(t *testing.T) {
	st := memstore.New()
	a := newInstance(st, "A")
	a.connect("p", "s-1")
	a.connect("p", "s-2")
	a.set("s-1", false) // its grace ran out without a disconnect
	a.Tend(context.Background(), false)
	if got := recorded(t, st, "p"); len(got) != 1 || got["s-2"] != "A" {
		t.Errorf("after Tend the store records %v; want only s-2", got)
	}
}

func TestTendReapsALapsedInstanceAndItRecordsAgain(t *testing.T) {
	st := memstore.New()
	a, b := newInstance(st, "A"), newInstance(st, "B")
	b.set("s-b", true)
	b.lapse(true) // B's lease runs out (it is paused or dead)
	b.Opened("p", "s-b")
	a.Tend(context.Background(), false)
	if got := recorded(t, st, "p"); len(got) != 0 {
		t.Fatalf("after A's renewal the store records %v; want B's lapsed session reaped", got)
	}
	// B comes back: its renewal finds its lease had lapsed and writes its
	// sessions still connected here again.
	b.lapse(false)
	b.Tend(context.Background(), false)
	if got := recorded(t, st, "p"); len(got) != 0 {
		t.Fatalf("a renewal not told of the lapse recorded %v again", got)
	}
	b.Tend(context.Background(), true)
	if got := recorded(t, st, "p"); got["s-b"] != "B" {
		t.Errorf("after B's renewal past a lapse the store records %v; want s-b at B", got)
	}
}

func TestKeepRefusedRecordsNothing(t *testing.T) {
	st := memstore.New()
	a := newInstance(st, "A")
	a.refuse = true
	a.Opened("p", "s-a")
	if got := recorded(t, st, "p"); len(got) != 0 || a.Any() {
		t.Errorf("a closing instance recorded %v (Any %v); want nothing", got, a.Any())
	}
}

func TestDropRemovesEveryRecord(t *testing.T) {
	st := memstore.New()
	a, b := newInstance(st, "A"), newInstance(st, "B")
	a.connect("p", "s-1")
	a.connect("q", "s-2")
	b.connect("p", "s-b")
	a.Drop(context.Background())
	if got := recorded(t, st, "p"); len(got) != 1 || got["s-b"] != "B" {
		t.Errorf("after A's Drop the store records %v for p; want only B's s-b", got)
	}
	if got := recorded(t, st, "q"); len(got) != 0 {
		t.Errorf("after A's Drop the store records %v for q; want none", got)
	}
}

func TestWithoutASharingStoreLivenessIsLocal(t *testing.T) {
	a := newInstance(nil, "A")
	a.connect("p", "s-a")
	if a.Shares() || a.Any() || a.Elsewhere(context.Background(), "p") != nil {
		t.Errorf("with no sharing store: Shares %v, Any %v, Elsewhere %v; want false, false, nil", a.Shares(), a.Any(), a.Elsewhere(context.Background(), "p"))
	}
	if !a.Here("s-a") {
		t.Error("Here ignores Connected without a sharing store")
	}
}

// failingOpen is a store whose OpenSession fails while fail is set (a
// slow store under load, past the renewal's deadline).
type failingOpen struct {
	seam.Sessions
	mu   sync.Mutex
	fail bool
}

func (f *failingOpen) OpenSession(ctx context.Context, s seam.Session) error {
	f.mu.Lock()
	fail := f.fail
	f.mu.Unlock()
	if fail {
		return context.DeadlineExceeded
	}
	return f.Sessions.OpenSession(ctx, s)
}

// A write again after a lapse that fails is owed: Tend says so, and the
// renewer asks again until the session is recorded.
func TestTendSaysWhenARecordAgainFailed(t *testing.T) {
	st := &failingOpen{Sessions: memstore.New()}
	b := newInstance(st, "B")
	b.connect("p", "s-b")
	b.lapse(true)
	newInstance(st, "A").Tend(context.Background(), false) // reaps B's record
	b.lapse(false)
	st.mu.Lock()
	st.fail = true
	st.mu.Unlock()
	if b.Tend(context.Background(), true) {
		t.Fatal("Tend reported the sessions recorded again though the write failed")
	}
	st.mu.Lock()
	st.fail = false
	st.mu.Unlock()
	if !b.Tend(context.Background(), true) {
		t.Fatal("Tend reported a failure though the write went through")
	}
	if got := recorded(t, st, "p"); got["s-b"] != "B" {
		t.Errorf("after the retry the store records %v; want s-b at B", got)
	}
	if !b.Tend(context.Background(), false) {
		t.Error("Tend with nothing to record again reported a failure")
	}
}
