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

// OpenSession records a root session as connected at its owner and sets
// the owner's lease (see seam.Sessions).
func (s *Store) OpenSession(ctx context.Context, se seam.Session) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	if se.ID == "" || se.Owner.ID == "" {
		return errors.New("memstore: open session: the session and its owner need ids")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.sessions[sessionKey{se.ID, se.Owner.ID}] = se
	s.leases[se.Owner.ID] = se.Owner.Expires
	return nil
}

// CloseSession removes a session's record at owner, waking its
// principal's watchers.
func (s *Store) CloseSession(ctx context.Context, session, owner string) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	k := sessionKey{session, owner}
	if se, ok := s.sessions[k]; ok {
		delete(s.sessions, k)
		s.wake.Signal(seam.PrincipalAddress(se.Principal))
	}
	return nil
}

// SessionsOf returns principal's records whose owner's lease runs.
func (s *Store) SessionsOf(ctx context.Context, principal string) ([]seam.Session, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	now := time.Now()
	var out []seam.Session
	for _, se := range s.sessions {
		if se.Principal == principal && s.leases[se.Owner.ID].After(now) {
			se.Owner.Expires = s.leases[se.Owner.ID]
			out = append(out, se)
		}
	}
	sortSessions(out)
	return out, nil
}

// ReapSessions removes the records whose owner's lease expired.
func (s *Store) ReapSessions(ctx context.Context) ([]seam.Session, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	now := time.Now()
	var out []seam.Session
	for k, se := range s.sessions {
		if exp := s.leases[se.Owner.ID]; !exp.After(now) {
			delete(s.sessions, k)
			se.Owner.Expires = exp
			out = append(out, se)
			s.wake.Signal(seam.PrincipalAddress(se.Principal))
		}
	}
	sortSessions(out)
	return out, nil
}

func sortSessions(ss []seam.Session) {
	slices.SortFunc(ss, func(a, b seam.Session) int {
		return cmp.Or(strings.Compare(a.ID, b.ID), strings.Compare(a.Owner.ID, b.Owner.ID))
	})
}
