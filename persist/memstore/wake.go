package memstore

import (
	"context"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

var (
	_ seam.Waker      = (*Store)(nil)
	_ seam.Interrupts = (*Store)(nil)
	_ seam.AwaitMarks = (*Store)(nil)
)

// Watch watches key (see seam.Waker); the store lives in one process, so
// WriteChild and AddNotice signal its watches directly.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := ctxErr(ctx); err != nil {
		return nil, nil, err
	}
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return nil, nil, ErrClosed
	}
	c, stop := s.wake.Watch(key)
	return c, stop, nil
}

// RequestInterrupt records r as the child's pending interrupt request,
// unless one is pending (see seam.Interrupts).
func (s *Store) RequestInterrupt(ctx context.Context, childID string, r seam.InterruptRequest) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	if r.At.IsZero() {
		r.At = time.Now().UTC()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.get(childID)
	if err != nil {
		return err
	}
	if c.interrupt == nil {
		c.interrupt = &r
	}
	s.wake.Signal(childID)
	return nil
}

// TakeInterrupt removes and returns the child's pending interrupt
// request, refused (ErrOwned) when fence is set and no longer holds.
func (s *Store) TakeInterrupt(ctx context.Context, childID string, fence *seam.Fence) (seam.InterruptRequest, bool, error) {
	if err := ctxErr(ctx); err != nil {
		return seam.InterruptRequest{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.get(childID)
	if err != nil {
		return seam.InterruptRequest{}, false, err
	}
	if fence != nil {
		if err := s.checkFence(childID, *fence); err != nil {
			return seam.InterruptRequest{}, false, err
		}
	}
	r := c.interrupt
	if r == nil {
		return seam.InterruptRequest{}, false, nil
	}
	c.interrupt = nil
	return *r, true, nil
}

// MarkAbandoned sets or removes the mark of the child's message msgID
// (see seam.AwaitMarks).
func (s *Store) MarkAbandoned(ctx context.Context, childID, msgID string, abandoned bool) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.get(childID)
	if err != nil {
		return err
	}
	switch {
	case abandoned && c.abandoned == nil:
		c.abandoned = map[string]bool{msgID: true}
	case abandoned:
		c.abandoned[msgID] = true
	default:
		delete(c.abandoned, msgID)
	}
	return nil
}

// TakeAbandoned removes the child's marks of msgIDs and returns those that
// were set (see seam.AwaitMarks).
func (s *Store) TakeAbandoned(ctx context.Context, childID string, msgIDs []string) ([]string, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.get(childID)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, id := range msgIDs {
		if c.abandoned[id] {
			out = append(out, id)
			delete(c.abandoned, id)
		}
	}
	return out, nil
}
