package persist

import (
	"bytes"
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// bucketQuestions holds children's questions to the person: child id →
// nested bucket: question id → seam.EncodeQuestion's bytes (versioned
// JSON). It is made by the first question stored, so a store from before
// it opens unchanged (it is not one of topBuckets, which checkLayout
// requires).
var bucketQuestions = []byte("questions")

// PutQuestion stores q under its child, replacing one of the same id.
func (s *Store) PutQuestion(ctx context.Context, q seam.Question) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	b, err := seam.EncodeQuestion(q)
	if err != nil {
		return fmt.Errorf("persist: %w", err)
	}
	return s.update(func(tx *bolt.Tx) error {
		if err := requireChild(tx, q.ChildID); err != nil {
			return err
		}
		qb, err := tx.CreateBucketIfNotExists(bucketQuestions)
		if err != nil {
			return err
		}
		cb, err := qb.CreateBucketIfNotExists([]byte(q.ChildID))
		if err != nil {
			return err
		}
		return cb.Put([]byte(q.ID), b)
	})
}

// Questions returns the child's questions in creation order, ties by id.
// A question that does not decode makes the read fail with ErrCorrupt:
// an answer must not silently vanish.
func (s *Store) Questions(ctx context.Context, childID string) ([]seam.Question, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	var raw [][]byte
	err := s.view(func(tx *bolt.Tx) error {
		if err := requireChild(tx, childID); err != nil {
			return err
		}
		qb := tx.Bucket(bucketQuestions)
		if qb == nil {
			return nil
		}
		cb := qb.Bucket([]byte(childID))
		if cb == nil {
			return nil
		}
		return cb.ForEach(func(_, v []byte) error {
			raw = append(raw, bytes.Clone(v))
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	out := make([]seam.Question, 0, len(raw))
	for _, b := range raw {
		q, err := seam.DecodeQuestion(b)
		if err != nil {
			return nil, corrupt(childID, "question", err)
		}
		out = append(out, q)
	}
	seam.SortQuestions(out)
	return out, nil
}

// deleteQuestions removes a child's questions (a Delete's).
func deleteQuestions(tx *bolt.Tx, id string) error {
	qb := tx.Bucket(bucketQuestions)
	if qb == nil || qb.Bucket([]byte(id)) == nil {
		return nil
	}
	return qb.DeleteBucket([]byte(id))
}
