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
	b, err := taskstore.Encode(r)
	if err != nil {
		return err
	}
	// The others skip a record that does not decode when they list; here
	// it is refused at once, with no log to skip it into.
	if _, err := taskstore.Decode(b); err != nil {
		return err
	}
	return s.locked(ctx, func() { s.tasks[r.ID] = b })
}

// Task reads a task record: an unknown id wraps taskstore.ErrNotFound.
func (s *Store) Task(ctx context.Context, id string) (taskstore.Record, error) {
	var b []byte
	if err := s.locked(ctx, func() { b = s.tasks[id] }); err != nil {
		return taskstore.Record{}, err
	}
	if b == nil {
		return taskstore.Record{}, taskNotFound(id)
	}
	return taskstore.Decode(b)
}

// UpdateTask is a compare-and-set of the record of id (taskstore.Store):
// fn runs under the store's lock.
func (s *Store) UpdateTask(ctx context.Context, id string, fn func(taskstore.Record) (taskstore.Record, error)) (taskstore.Record, error) {
	var r taskstore.Record
	var err error
	if lerr := s.locked(ctx, func() {
		cur := s.tasks[id]
		if cur == nil {
			err = taskNotFound(id)
			return
		}
		var b []byte
		if r, b, err = taskstore.Apply(id, cur, fn); err == nil {
			s.tasks[id] = b
		}
	}); lerr != nil {
		return taskstore.Record{}, lerr
	}
	if err != nil {
		return taskstore.Record{}, err
	}
	return r, nil
}

// DeleteTask removes a task record; an unknown id is not an error.
func (s *Store) DeleteTask(ctx context.Context, id string) error {
	return s.locked(ctx, func() { delete(s.tasks, id) })
}

// Tasks lists every task record, by id.
func (s *Store) Tasks(ctx context.Context) ([]taskstore.Record, error) {
	var bs [][]byte
	if err := s.locked(ctx, func() {
		for _, id := range slices.Sorted(maps.Keys(s.tasks)) {
			bs = append(bs, s.tasks[id])
		}
	}); err != nil {
		return nil, err
	}
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
