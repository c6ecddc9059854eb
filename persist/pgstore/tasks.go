package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/mcp-subagent/mcp-subagent/tasks/taskstore"
)

var _ taskstore.Store = (*Store)(nil)

// Task records are stored in the encoding every backend shares
// (taskstore.Encode), so the bbolt store and this one read them alike.

// PutTask creates or replaces a task record.
func (s *Store) PutTask(ctx context.Context, r taskstore.Record) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	b, err := taskstore.Encode(r)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `insert into tasks (id, body) values ($1, $2) on conflict (id) do update set body = excluded.body`, r.ID, b)
	return s.fail("storing task "+r.ID, err)
}

// Task reads a task record: taskstore.ErrNotFound for an unknown id.
func (s *Store) Task(ctx context.Context, id string) (taskstore.Record, error) {
	if err := s.begin(ctx); err != nil {
		return taskstore.Record{}, err
	}
	var b []byte
	err := s.pool.QueryRow(ctx, `select body from tasks where id = $1`, id).Scan(&b)
	if errors.Is(err, pgx.ErrNoRows) {
		return taskstore.Record{}, fmt.Errorf("pgstore: task %q: %w", id, taskstore.ErrNotFound)
	}
	if err != nil {
		return taskstore.Record{}, s.fail("reading task "+id, err)
	}
	return taskstore.Decode(b)
}

// DeleteTask removes a task record; an unknown id is not an error.
func (s *Store) DeleteTask(ctx context.Context, id string) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `delete from tasks where id = $1`, id)
	return s.fail("deleting task "+id, err)
}

// Tasks lists every task record; one that does not decode is skipped and
// logged.
func (s *Store) Tasks(ctx context.Context) ([]taskstore.Record, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `select id, body from tasks order by id`)
	if err != nil {
		return nil, s.fail("listing tasks", err)
	}
	defer rows.Close()
	var out []taskstore.Record
	for rows.Next() {
		var id string
		var b []byte
		if err := rows.Scan(&id, &b); err != nil {
			return nil, s.fail("listing tasks", err)
		}
		r, err := taskstore.Decode(b)
		if err != nil {
			s.log.Error("a task record does not decode; skipping it", "task", id, "err", err)
			continue
		}
		out = append(out, r)
	}
	return out, s.fail("listing tasks", rows.Err())
}

// UpdateTask is a compare-and-set of the record of id (taskstore.Store):
// fn runs inside one transaction holding the row's lock (select ... for
// update), so another instance's write of that task waits for its commit.
func (s *Store) UpdateTask(ctx context.Context, id string, fn func(taskstore.Record) (taskstore.Record, error)) (taskstore.Record, error) {
	if err := s.begin(ctx); err != nil {
		return taskstore.Record{}, err
	}
	var out taskstore.Record
	var declined error // fn's or the record's own error, returned as it is
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var cur []byte
		err := tx.QueryRow(ctx, `select body from tasks where id = $1 for update`, id).Scan(&cur)
		if errors.Is(err, pgx.ErrNoRows) {
			declined = fmt.Errorf("pgstore: task %q: %w", id, taskstore.ErrNotFound)
			return declined
		}
		if err != nil {
			return err
		}
		r, b, err := taskstore.Apply(id, cur, fn)
		if err != nil {
			declined = err
			return err
		}
		if _, err := tx.Exec(ctx, `update tasks set body = $2 where id = $1`, id, b); err != nil {
			return err
		}
		out = r
		return nil
	})
	if declined != nil {
		return taskstore.Record{}, declined
	}
	if err != nil {
		return taskstore.Record{}, s.fail("updating task "+id, err)
	}
	return out, nil
}
