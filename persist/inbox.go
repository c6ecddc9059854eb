package persist

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// inboxBucket is a stored child's inbox bucket, made if it has none.
func inboxBucket(tx *bolt.Tx, childID string) (*bolt.Bucket, error) {
	if err := requireChild(tx, childID); err != nil {
		return nil, err
	}
	inboxes, err := top(tx, bucketInboxes)
	if err != nil {
		return nil, err
	}
	return inboxes.CreateBucketIfNotExists([]byte(childID))
}

// appendInbox adds encoded messages to an inbox, keyed by a sequence so
// the order is kept.
func appendInbox(b *bolt.Bucket, encoded ...[]byte) error {
	for _, e := range encoded {
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		if err := b.Put(seqKey(seq), e); err != nil {
			return err
		}
	}
	return nil
}

// writeInbox appends admitted messages to a child's inbox and removes
// claimed ones.
func writeInbox(tx *bolt.Tx, childID string, encoded [][]byte, remove []string) error {
	b, err := inboxBucket(tx, childID)
	if err != nil {
		return err
	}
	if err := appendInbox(b, encoded...); err != nil {
		return err
	}
	if len(remove) == 0 {
		return nil
	}
	gone := map[string]bool{}
	for _, id := range remove {
		gone[id] = true
	}
	var dead [][]byte
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		var q seam.QueuedMessage
		if json.Unmarshal(v, &q) != nil || gone[q.ID] {
			dead = append(dead, bytes.Clone(k))
		}
	}
	for _, k := range dead {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// Queued returns a child's inbox in admission order. An entry that does
// not decode is skipped (and logged): a lost message, not a lost child.
func (s *Store) Queued(ctx context.Context, childID string) ([]seam.QueuedMessage, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	var out []seam.QueuedMessage
	err := s.view(func(tx *bolt.Tx) error {
		if err := requireChild(tx, childID); err != nil {
			return err
		}
		inboxes, err := top(tx, bucketInboxes)
		if err != nil {
			return err
		}
		b := inboxes.Bucket([]byte(childID))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var q seam.QueuedMessage
			if err := json.Unmarshal(v, &q); err != nil || q.ID == "" {
				s.log.Error("dropping an inbox entry that does not decode", "child", childID, "key", fmt.Sprintf("%x", k))
				return nil
			}
			out = append(out, q)
			return nil
		})
	})
	return out, err
}
