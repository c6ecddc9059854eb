package manager

import (
	"github.com/mcp-subagent/mcp-subagent/manager/sessions"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// newSessions is the manager's record of its root sessions' liveness,
// shared through the store when it can (package sessions).
func (m *Manager) newSessions() *sessions.Tracker {
	ss, _ := m.store.(seam.Sessions)
	return sessions.New(sessions.Config{Store: ss, Owner: m.owner, Lease: m.lease,
		Connected: m.opts.SessionConnected, Timeout: storeTimeout, Log: m.log,
		Keep: func() bool { // the renewer keeps the lease the record lives by
			m.mu.Lock()
			defer m.mu.Unlock()
			if !m.closed {
				m.startRenewer()
			}
			return !m.closed
		}})
}

// SessionOpened tells the manager a root session of principal calls here:
// on a store that shares sessions, the first call records it as connected
// at this instance, so notices of the children it starts wait for it
// wherever its principal calls. Call it on every root call (later ones
// cost no store access); SessionGone ends it.
func (m *Manager) SessionOpened(principal, session string) { m.sessions.Opened(principal, session) }

// SessionGone tells the manager a root session disconnected here: once it
// is not connected here (Options.SessionConnected; an HTTP session keeps a
// grace), its record goes from the store, and its pending notices become
// any session's of its principal, at any instance. Waiters here recheck.
func (m *Manager) SessionGone(session string) { m.sessions.Gone(session) }
