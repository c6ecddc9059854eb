package memstore

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

var _ seam.Sessions = (*Store)(nil)

// sessionKey is a session's record at one owner.
type sessionKey struct{ session, owner string }

// locked runs fn under the store's lock, once ctx and the store's being
// open are checked.
func (s *Store) locked(ctx context.Context, fn func()) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	fn()
	return nil
}

// OpenSession records a root session as connected at its owner and sets
// the owner's lease (see seam.Sessions).
func (s *Store) OpenSession(ctx context.Context, se seam.Session) error {
	if se.ID == "" || se.Owner.ID == "" {
		return errors.New("memstore: open session: the session and its owner need ids")
	}
	return s.locked(ctx, func() {
		s.sessions[sessionKey{se.ID, se.Owner.ID}] = se
		s.leases[se.Owner.ID] = se.Owner.Expires
	})
}

// CloseSession removes a session's record at owner, waking its
// principal's watchers.
func (s *Store) CloseSession(ctx context.Context, session, owner string) error {
	return s.locked(ctx, func() {
		k := sessionKey{session, owner}
		if se, ok := s.sessions[k]; ok {
			delete(s.sessions, k)
			s.wake.Signal(seam.PrincipalAddress(se.Principal))
		}
	})
}

// SessionsOf returns principal's records whose owner's lease runs.
func (s *Store) SessionsOf(ctx context.Context, principal string) ([]seam.Session, error) {
	return s.sessionsWhere(ctx, func(se seam.Session, live bool) bool { return live && se.Principal == principal }, false)
}

// ReapSessions removes the records whose owner's lease expired.
func (s *Store) ReapSessions(ctx context.Context) ([]seam.Session, error) {
	return s.sessionsWhere(ctx, func(_ seam.Session, live bool) bool { return !live }, true)
}

// sessionsWhere returns the records keep accepts (live: their owner's
// lease runs), removing them and waking their principals' watchers when
// remove is set.
func (s *Store) sessionsWhere(ctx context.Context, keep func(se seam.Session, live bool) bool, remove bool) ([]seam.Session, error) {
	var out []seam.Session
	err := s.locked(ctx, func() {
		now := time.Now()
		for k, se := range s.sessions {
			se.Owner.Expires = s.leases[se.Owner.ID]
			if !keep(se, se.Owner.Expires.After(now)) {
				continue
			}
			out = append(out, se)
			if remove {
				delete(s.sessions, k)
				s.wake.Signal(seam.PrincipalAddress(se.Principal))
			}
		}
	})
	slices.SortFunc(out, func(a, b seam.Session) int {
		return cmp.Or(strings.Compare(a.ID, b.ID), strings.Compare(a.Owner.ID, b.Owner.ID))
	})
	return out, err
}
