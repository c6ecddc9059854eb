package persist

import (
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/mcp-subagent/mcp-subagent/tasks/taskstore"
)

// bucketTasks holds durable MCP task records (taskstore.Record), by task id.
// It is made by the first task written, so a store from before it opens
// unchanged (it is not one of topBuckets, which checkLayout requires).
var bucketTasks = []byte("tasks")

var _ taskstore.Store = (*Store)(nil)

// PutTask creates or replaces a task record, committed when it returns.
func (s *Store) PutTask(ctx context.Context, r taskstore.Record) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	b, err := taskstore.Encode(r)
	if err != nil {
		return err
	}
	return s.update(func(tx *bolt.Tx) error {
		tb, err := tx.CreateBucketIfNotExists(bucketTasks)
		if err != nil {
			return err
		}
		return tb.Put([]byte(r.ID), b)
	})
}

// Task reads a task record: ErrNotFound (tasks') for an unknown id,
// ErrCorrupt for bytes that do not decode.
func (s *Store) Task(ctx context.Context, id string) (taskstore.Record, error) {
	if err := ctxErr(ctx); err != nil {
		return taskstore.Record{}, err
	}
	var b []byte
	err := s.view(func(tx *bolt.Tx) error {
		if tb := tx.Bucket(bucketTasks); tb != nil {
			if v := tb.Get([]byte(id)); v != nil {
				b = append([]byte(nil), v...)
			}
		}
		return nil
	})
	if err != nil {
		return taskstore.Record{}, err
	}
	if b == nil {
		return taskstore.Record{}, fmt.Errorf("persist: task %q: %w", id, taskstore.ErrNotFound)
	}
	return taskstore.Decode(b)
}

// DeleteTask removes a task record; an unknown id is not an error.
func (s *Store) DeleteTask(ctx context.Context, id string) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	return s.update(func(tx *bolt.Tx) error {
		if tb := tx.Bucket(bucketTasks); tb != nil {
			return tb.Delete([]byte(id))
		}
		return nil
	})
}

// Tasks lists every task record. One that does not decode is skipped and
// logged: a lost task, never a store that cannot list the others.
func (s *Store) Tasks(ctx context.Context) ([]taskstore.Record, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	var out []taskstore.Record
	err := s.view(func(tx *bolt.Tx) error {
		tb := tx.Bucket(bucketTasks)
		if tb == nil {
			return nil
		}
		return tb.ForEach(func(k, v []byte) error {
			r, err := taskstore.Decode(v)
			if err != nil {
				s.log.Error("a task record does not decode; skipping it", "task", string(k), "err", err)
				return nil
			}
			out = append(out, r)
			return nil
		})
	})
	return out, err
}

// UpdateTask is a compare-and-set of the record of id (taskstore.Store):
// fn runs inside one bbolt write transaction, which no other write
// interleaves.
func (s *Store) UpdateTask(ctx context.Context, id string, fn func(taskstore.Record) (taskstore.Record, error)) (taskstore.Record, error) {
	if err := ctxErr(ctx); err != nil {
		return taskstore.Record{}, err
	}
	var out taskstore.Record
	err := s.update(func(tx *bolt.Tx) error {
		var cur []byte
		tb := tx.Bucket(bucketTasks)
		if tb != nil {
			cur = tb.Get([]byte(id))
		}
		if cur == nil {
			return fmt.Errorf("persist: task %q: %w", id, taskstore.ErrNotFound)
		}
		r, b, err := taskstore.Apply(id, cur, fn)
		if err != nil {
			return err
		}
		out = r
		return tb.Put([]byte(id), b)
	})
	if err != nil {
		return taskstore.Record{}, err
	}
	return out, nil
}
