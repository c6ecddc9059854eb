package pgstore

import (
	"context"
	"fmt"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// PutQuestion stores q under its child, replacing one of the same id.
func (s *Store) PutQuestion(ctx context.Context, q seam.Question) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	b, err := seam.EncodeQuestion(q)
	if err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	// The insert reads the child's row: an unknown child stores nothing.
	tag, err := s.pool.Exec(ctx, `insert into questions (child_id, id, created_ns, body)
		select id, $2, $3, $4 from children where id = $1
		on conflict (child_id, id) do update set body = excluded.body, created_ns = excluded.created_ns`,
		q.ChildID, q.ID, q.Created.UnixNano(), b)
	if err != nil {
		return s.fail("storing a question of "+q.ChildID, err)
	}
	if tag.RowsAffected() == 0 {
		return notFound(q.ChildID)
	}
	return nil
}

// Questions returns the child's questions in creation order, ties by id.
func (s *Store) Questions(ctx context.Context, childID string) ([]seam.Question, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `select q.body from children c left join questions q on q.child_id = c.id
		where c.id = $1 order by q.created_ns, q.id`, childID)
	if err != nil {
		return nil, s.fail("reading the questions of "+childID, err)
	}
	defer rows.Close()
	found := false
	out := []seam.Question{}
	for rows.Next() {
		found = true
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, s.fail("reading the questions of "+childID, err)
		}
		if b == nil {
			continue
		}
		q, err := seam.DecodeQuestion(b)
		if err != nil {
			return nil, corrupt(childID, "question", err)
		}
		out = append(out, q)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("reading the questions of "+childID, err)
	}
	if !found {
		return nil, notFound(childID)
	}
	return out, nil
}
