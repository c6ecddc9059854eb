// Package record keeps what a fake server received, in order of arrival,
// and lets a test wait for an arrival instead of polling.
package record

import (
	"context"
	"fmt"
	"sync"
)

// Log is an append-only log of T; the zero value is ready.
type Log[T any] struct {
	mu      sync.Mutex
	items   []T
	changed chan struct{} // closed and replaced on every Add
}

// Add appends the item made by mk from its sequence number (0, 1, …) and
// wakes waiters.
func (l *Log[T]) Add(mk func(seq int) T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.items = append(l.items, mk(len(l.items)))
	if l.changed != nil {
		close(l.changed)
	}
	l.changed = make(chan struct{})
}

// All returns a copy of the log.
func (l *Log[T]) All() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]T(nil), l.items...)
}

// Wait returns the first item for which match holds, waiting for new
// arrivals until ctx ends.
func (l *Log[T]) Wait(ctx context.Context, match func(T) bool) (T, error) {
	seen := 0
	for {
		l.mu.Lock()
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		items, changed := l.items[seen:], l.changed
		seen = len(l.items)
		l.mu.Unlock()
		for _, it := range items {
			if match(it) {
				return it, nil
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			var zero T
			return zero, fmt.Errorf("no matching request among %d: %w", seen, ctx.Err())
		}
	}
}
