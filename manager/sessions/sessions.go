// Package sessions owns root sessions' liveness shared through the store
// (seam.Sessions): a root notice waits for the session that started its
// child while that session is connected at any instance. A Tracker
// records the sessions connected at its instance, under the instance's
// lease (renewed with its claims, so an instance that dies takes its
// sessions with it), and removes a record when the session goes; each
// renewal also removes the records of owners whose lease ran out. A
// removal wakes the principal's waiting calls at every instance (the
// store's wake-up on its address), which look again. A store without the
// ability (bbolt: one instance) leaves liveness local.
//
// What it needs of the manager (its lease, whether a session is connected
// here, leave to keep a record) is passed in as Config's funcs.
// Tracker.mu is a leaf: no store call and none of those funcs is made
// under it.
package sessions

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Config is what a Tracker is given of its instance.
type Config struct {
	// Store shares the sessions; nil when the store cannot (liveness stays
	// local).
	Store seam.Sessions
	// Owner is the instance's owner id, Lease its lease from now.
	Owner string
	Lease func() seam.Owner
	// Connected reports whether a root session is connected here
	// (manager.Options.SessionConnected); nil: a session is here until Gone.
	Connected func(session string) bool
	// Keep is asked, with no lock held, before the first record of a
	// session is written: false refuses it (the instance is closing);
	// true has the instance renew the lease the record lives by.
	Keep func() bool
	// Timeout bounds the store calls of Opened, Gone and Drop.
	Timeout time.Duration
	Log     *slog.Logger
}

// Tracker is one instance's record of its root sessions.
type Tracker struct {
	c Config

	mu sync.Mutex
	// shared are the sessions recorded in the store as connected here, by
	// id: their principals.
	shared map[string]string
	sig    chan struct{} // closed and replaced when a session goes
}

// New returns a Tracker; Log nil discards its logs.
func New(c Config) *Tracker {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return &Tracker{c: c, shared: map[string]string{}, sig: make(chan struct{})}
}

// Shares reports whether the store shares sessions between instances.
func (t *Tracker) Shares() bool { return t.c.Store != nil }

// Any reports whether a session is recorded here (the lease must be
// renewed for it).
func (t *Tracker) Any() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.shared) > 0
}

func (t *Tracker) bg() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), t.c.Timeout)
}

// Opened is told a root session of principal calls here: on a store that
// shares sessions, the first call records it as connected at this
// instance. Later calls cost no store access.
func (t *Tracker) Opened(principal, session string) {
	ss := t.c.Store
	if ss == nil || session == "" {
		return
	}
	t.mu.Lock()
	if _, known := t.shared[session]; known {
		t.mu.Unlock()
		return
	}
	t.shared[session] = principal
	t.mu.Unlock()
	// Recorded before Keep: a renewer that looks after Keep sees it.
	if t.c.Keep != nil && !t.c.Keep() {
		t.forget(session)
		return
	}
	ctx, cancel := t.bg()
	defer cancel()
	if err := ss.OpenSession(ctx, seam.Session{ID: session, Principal: principal, Owner: t.c.Lease()}); err != nil {
		t.c.Log.Warn("recording a session in the session store failed; its notices may go to another session of its principal at another instance", "session", session, "err", err)
		t.forget(session)
		return
	}
	// It went while the record was being written: the record must go too.
	t.mu.Lock()
	_, still := t.shared[session]
	t.mu.Unlock()
	if !still {
		t.closeShared(ctx, session)
	}
}

// Gone is told a root session disconnected here: once it is not connected
// here (Config.Connected; an HTTP session keeps a grace), its record goes
// from the store. Waiters on Changed look again.
func (t *Tracker) Gone(session string) {
	if t.c.Store != nil && !t.Here(session) && t.forget(session) {
		ctx, cancel := t.bg()
		t.closeShared(ctx, session)
		cancel()
	}
	t.mu.Lock()
	ch := t.sig
	t.sig = make(chan struct{})
	t.mu.Unlock()
	close(ch)
}

// Changed is closed when a session next goes (Gone).
func (t *Tracker) Changed() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sig
}

// Here reports whether a root session is connected at this instance
// (Config.Connected).
func (t *Tracker) Here(session string) bool {
	return t.c.Connected != nil && t.c.Connected(session)
}

// forget drops a session from what this tracker recorded; false when it
// had not.
func (t *Tracker) forget(session string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.shared[session]
	delete(t.shared, session)
	return ok
}

func (t *Tracker) closeShared(ctx context.Context, session string) {
	if err := t.c.Store.CloseSession(ctx, session, t.c.Owner); err != nil {
		t.c.Log.Warn("removing a session from the session store failed; it is taken for connected until this instance's lease runs out", "session", session, "err", err)
	}
}

// Elsewhere is the set of principal's sessions the store says are
// connected at other instances; nil when the store does not share them or
// cannot say.
func (t *Tracker) Elsewhere(ctx context.Context, principal string) map[string]bool {
	ss := t.c.Store
	if ss == nil {
		return nil
	}
	recs, err := ss.SessionsOf(ctx, principal)
	if err != nil {
		t.c.Log.Warn("reading the sessions connected at other instances failed; notices of sessions not connected here wait", "principal", principal, "err", err)
		return nil
	}
	out := map[string]bool{}
	for _, r := range recs {
		if r.Owner.ID != t.c.Owner {
			out[r.ID] = true
		}
	}
	return out
}

// Tend is the renewer's care of shared sessions: it removes the records of
// sessions no longer connected here (an HTTP session whose grace ran out
// goes without a disconnect) and reaps those of instances whose lease ran
// out, which wakes their principals' waiters everywhere. lapsed says this
// instance's own lease ran out before its last renewal (it was paused):
// other instances may have reaped its records, so those of sessions still
// connected here are written again. It reports whether they all were
// (true when there was nothing to write again): the renewer asks again at
// its next renewal until they are, as one failed write (a slow store under
// load) must not leave a session unrecorded for good.
func (t *Tracker) Tend(ctx context.Context, lapsed bool) (recorded bool) {
	ss := t.c.Store
	if ss == nil {
		return true
	}
	recorded = true
	if t.c.Connected != nil { // without it, a session is here until Gone
		t.mu.Lock()
		ids := slices.Collect(maps.Keys(t.shared))
		t.mu.Unlock()
		for _, id := range ids {
			if !t.Here(id) && t.forget(id) {
				t.closeShared(ctx, id)
			}
		}
	}
	if lapsed {
		t.mu.Lock()
		recs := maps.Clone(t.shared)
		t.mu.Unlock()
		for id, principal := range recs {
			if err := ss.OpenSession(ctx, seam.Session{ID: id, Principal: principal, Owner: t.c.Lease()}); err != nil {
				t.c.Log.Warn("recording a session again after this instance's lease ran out failed; retrying at the next renewal", "session", id, "err", err)
				recorded = false
			}
		}
	}
	if reaped, err := ss.ReapSessions(ctx); err != nil {
		t.c.Log.Debug("removing the sessions of instances whose lease ran out failed; retrying at the next renewal", "err", err)
	} else {
		for _, r := range reaped {
			t.c.Log.Info("a session's instance is gone (its lease ran out): its notices go to the principal's next call", "session", r.ID, "owner", r.Owner.ID)
		}
	}
	return recorded
}

// Drop removes, at the instance's close, every session this tracker
// recorded, so their principals' waiters elsewhere need not wait out the
// lease.
func (t *Tracker) Drop(ctx context.Context) {
	if t.c.Store == nil {
		return
	}
	t.mu.Lock()
	ids := slices.Collect(maps.Keys(t.shared))
	clear(t.shared)
	t.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.c.Timeout)
	defer cancel()
	for _, id := range ids {
		t.closeShared(ctx, id)
	}
}
