package manager

import (
	"context"
	"maps"
	"slices"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Root sessions' liveness shared through the store (seam.Sessions): a
// root notice waits for the session that started its child while that
// session is connected at any instance. Each manager records the sessions
// connected here, under its owner's lease (renewed with its claims, so an
// instance that dies takes its sessions with it), and removes a record
// when the session goes; each renewal also removes the records of owners
// whose lease ran out. A removal wakes the principal's waiting calls at
// every instance (the store's wake-up on its address), which look again.
// A store without the ability (bbolt: one instance) leaves liveness local.

// sessionStore is the store's Sessions ability; nil without one.
func (m *Manager) sessionStore() seam.Sessions {
	ss, _ := m.store.(seam.Sessions)
	return ss
}

// SessionOpened tells the manager a root session of principal calls here:
// on a store that shares sessions, the first call records it as connected
// at this instance, so notices of the children it starts wait for it
// wherever its principal calls. Call it on every root call (later ones
// cost no store access); SessionGone ends it.
func (m *Manager) SessionOpened(principal, session string) {
	ss := m.sessionStore()
	if ss == nil || session == "" {
		return
	}
	m.mu.Lock()
	if _, known := m.shared[session]; known || m.closed {
		m.mu.Unlock()
		return
	}
	m.shared[session] = principal
	m.startRenewer() // the lease the record lives by
	m.mu.Unlock()
	ctx, cancel := m.bg()
	defer cancel()
	if err := ss.OpenSession(ctx, seam.Session{ID: session, Principal: principal, Owner: m.lease()}); err != nil {
		m.log.Warn("recording a session in the session store failed; its notices may go to another session of its principal at another instance", "session", session, "err", err)
		m.mu.Lock()
		delete(m.shared, session)
		m.mu.Unlock()
		return
	}
	// It went while the record was being written: the record must go too.
	m.mu.Lock()
	_, still := m.shared[session]
	m.mu.Unlock()
	if !still {
		m.closeShared(ctx, ss, session)
	}
}

// SessionGone tells the manager a root session disconnected here: once it
// is not connected here (Options.SessionConnected; an HTTP session keeps a
// grace), its record goes from the store, and its pending notices become
// any session's of its principal, at any instance. Waiters here recheck.
func (m *Manager) SessionGone(session string) {
	if ss := m.sessionStore(); ss != nil && !m.connectedHere(session) && m.forget(session) {
		ctx, cancel := m.bg()
		m.closeShared(ctx, ss, session)
		cancel()
	}
	m.mu.Lock()
	ch := m.sessionSig
	m.sessionSig = make(chan struct{})
	m.mu.Unlock()
	close(ch)
}

func (m *Manager) sessionsChanged() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sessionSig
}

// connectedHere reports whether a root session is connected at this
// instance (Options.SessionConnected).
func (m *Manager) connectedHere(session string) bool {
	live := m.opts.SessionConnected
	return live != nil && live(session)
}

// forget drops a session from what this manager recorded; false when it
// had not.
func (m *Manager) forget(session string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.shared[session]
	delete(m.shared, session)
	return ok
}

func (m *Manager) closeShared(ctx context.Context, ss seam.Sessions, session string) {
	if err := ss.CloseSession(ctx, session, m.owner); err != nil {
		m.log.Warn("removing a session from the session store failed; it is taken for connected until this instance's lease runs out", "session", session, "err", err)
	}
}

// connectedElsewhere is the set of principal's sessions the store says are
// connected at other instances; nil when the store does not share them or
// cannot say.
func (m *Manager) connectedElsewhere(ctx context.Context, principal string) map[string]bool {
	ss := m.sessionStore()
	if ss == nil {
		return nil
	}
	recs, err := ss.SessionsOf(ctx, principal)
	if err != nil {
		m.log.Warn("reading the sessions connected at other instances failed; notices of sessions not connected here wait", "principal", principal, "err", err)
		return nil
	}
	out := map[string]bool{}
	for _, r := range recs {
		if r.Owner.ID != m.owner {
			out[r.ID] = true
		}
	}
	return out
}

// tendSessions is the renewer's care of shared sessions: it removes the
// records of sessions no longer connected here (an HTTP session whose
// grace ran out goes without a disconnect) and reaps those of instances
// whose lease ran out, which wakes their principals' waiters everywhere.
// lapsed says this manager's own lease ran out before its last renewal (it
// was paused): other instances may have reaped its records, so those of
// sessions still connected here are written again.
func (m *Manager) tendSessions(ctx context.Context, lapsed bool) {
	ss := m.sessionStore()
	if ss == nil {
		return
	}
	if m.opts.SessionConnected != nil { // without it, a session is here until SessionGone
		m.mu.Lock()
		ids := slices.Collect(maps.Keys(m.shared))
		m.mu.Unlock()
		for _, id := range ids {
			if !m.connectedHere(id) && m.forget(id) {
				m.closeShared(ctx, ss, id)
			}
		}
	}
	if lapsed {
		m.mu.Lock()
		recs := maps.Clone(m.shared)
		m.mu.Unlock()
		for id, principal := range recs {
			if err := ss.OpenSession(ctx, seam.Session{ID: id, Principal: principal, Owner: m.lease()}); err != nil {
				m.log.Warn("recording a session again after this instance's lease ran out failed", "session", id, "err", err)
			}
		}
	}
	if reaped, err := ss.ReapSessions(ctx); err != nil {
		m.log.Debug("removing the sessions of instances whose lease ran out failed; retrying at the next renewal", "err", err)
	} else {
		for _, r := range reaped {
			m.log.Info("a session's instance is gone (its lease ran out): its notices go to the principal's next call", "session", r.ID, "owner", r.Owner.ID)
		}
	}
}

// dropSessions removes, at Close, every session this manager recorded, so
// their principals' waiters elsewhere need not wait out the lease.
func (m *Manager) dropSessions(ctx context.Context) {
	ss := m.sessionStore()
	if ss == nil {
		return
	}
	m.mu.Lock()
	ids := slices.Collect(maps.Keys(m.shared))
	clear(m.shared)
	m.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	for _, id := range ids {
		m.closeShared(ctx, ss, id)
	}
}
