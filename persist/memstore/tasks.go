package memstore

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/mcp-subagent/mcp-subagent/tasks/taskstore"
)

// Task records (taskstore.Store) are kept as their stored bytes
// (taskstore.Encode), as the other backends keep them, under s.mu.

var _ taskstore.Store = (*Store)(nil)

func taskNotFound(id string) error {
	return fmt.Errorf("memstore: task %q: %w", id, taskstore.ErrNotFound)
}

// PutTask creates or replaces a task record.
func (s *Store) PutTask(ctx context.Context, r taskstore.Record) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	b, err := taskstore.Encode(r)
	if err != nil {
		return err
	}
	// The others skip a record that does not decode when they list; here
	// it is refused at once, with no log to skip it into.
	if _, err := taskstore.Decode(b); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.tasks[r.ID] = b
	return nil
}

// Task reads a task record: an unknown id wraps taskstore.ErrNotFound.
func (s *Store) Task(ctx context.Context, id string) (taskstore.Record, error) {
	if err := ctxErr(ctx); err != nil {
		return taskstore.Record{}, err
	}
	s.mu.RLock()
	b, closed := s.tasks[id], s.closed
	s.mu.RUnlock()
	switch {
	case closed:
		return taskstore.Record{}, ErrClosed
	case b == nil:
		return taskstore.Record{}, taskNotFound(id)
	}
	return taskstore.Decode(b)
}

// UpdateTask is a compare-and-set of the record of id (taskstore.Store):
// fn runs under the store's write lock.
func (s *Store) UpdateTask(ctx context.Context, id string, fn func(taskstore.Record) (taskstore.Record, error)) (taskstore.Record, error) {
	if err := ctxErr(ctx); err != nil {
		return taskstore.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return taskstore.Record{}, ErrClosed
	}
	cur := s.tasks[id]
	if cur == nil {
		return taskstore.Record{}, taskNotFound(id)
	}
	r, b, err := taskstore.Apply(id, cur, fn)
	if err != nil {
		return taskstore.Record{}, err
	}
	s.tasks[id] = b
	return r, nil
}

// DeleteTask removes a task record; an unknown id is not an error.
func (s *Store) DeleteTask(ctx context.Context, id string) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	delete(s.tasks, id)
	return nil
}

// Tasks lists every task record, by id.
func (s *Store) Tasks(ctx context.Context) ([]taskstore.Record, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, ErrClosed
	}
	ids := slices.Sorted(maps.Keys(s.tasks))
	bs := make([][]byte, 0, len(ids))
	for _, id := range ids {
		bs = append(bs, s.tasks[id])
	}
	s.mu.RUnlock()
	out := make([]taskstore.Record, 0, len(bs))
	for _, b := range bs {
		r, err := taskstore.Decode(b)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}
