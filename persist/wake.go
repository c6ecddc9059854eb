package persist

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

var (
	_ seam.Waker      = (*Store)(nil)
	_ seam.Interrupts = (*Store)(nil)
	_ seam.AwaitMarks = (*Store)(nil)
)

// bucketInterrupts holds each child's pending interrupt request (child id
// → seam.InterruptRequest JSON). It is made by the first request, so a
// store from before it opens unchanged (it is not one of topBuckets);
// Delete removes a child's entry, Compact copies it, Repair does not (a
// pending request is a hint the owner may lose in a repair).
var bucketInterrupts = []byte("interrupts")

// bucketAbandoned holds the marks of in-band waits given up
// (seam.AwaitMarks): key child id, a zero byte, message id; empty value.
// Made by the first mark, like bucketInterrupts; Delete removes a child's
// marks, Compact copies them, Repair does not (only one process opens the
// file, so no caller at another instance waits on it).
var bucketAbandoned = []byte("abandoned")

// abandonedKey is the key of the mark of childID's message msgID; with
// msgID "" it is the prefix of all the child's marks.
func abandonedKey(childID, msgID string) []byte {
	return []byte(childID + "\x00" + msgID)
}

// Watch watches key (see seam.Waker). Only one process opens the file, so
// WriteChild, AddNotice and RequestInterrupt signal the watches directly
// after their commits.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := ctxErr(ctx); err != nil {
		return nil, nil, err
	}
	// A closed store refuses, as its other methods do.
	if err := s.view(func(*bolt.Tx) error { return nil }); err != nil {
		return nil, nil, fmt.Errorf("persist: watch %q: %w", key, err)
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
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("persist: child %q: encode interrupt request: %w", childID, err)
	}
	err = s.update(func(tx *bolt.Tx) error {
		if err := requireChild(tx, childID); err != nil {
			return err
		}
		ib, err := tx.CreateBucketIfNotExists(bucketInterrupts)
		if err != nil || ib.Get([]byte(childID)) != nil {
			return err
		}
		return ib.Put([]byte(childID), b)
	})
	if err != nil {
		return err
	}
	s.wake.Signal(childID)
	return nil
}

// TakeInterrupt removes and returns the child's pending interrupt
// request, refused (ErrOwned) when fence is set and no longer holds.
func (s *Store) TakeInterrupt(ctx context.Context, childID string, fence *seam.Fence) (seam.InterruptRequest, bool, error) {
	var r seam.InterruptRequest
	if err := ctxErr(ctx); err != nil {
		return r, false, err
	}
	// pending checks in tx and reports whether a request is pending.
	pending := func(tx *bolt.Tx) ([]byte, *bolt.Bucket, error) {
		if err := requireChild(tx, childID); err != nil {
			return nil, nil, err
		}
		if fence != nil {
			if err := checkFence(tx, childID, *fence); err != nil {
				return nil, nil, err
			}
		}
		ib := tx.Bucket(bucketInterrupts)
		if ib == nil {
			return nil, nil, nil
		}
		return ib.Get([]byte(childID)), ib, nil
	}
	// An owner takes at every wake-up of its child (each admission): a
	// read answers the common case, none pending, without a write's sync.
	var none bool
	if err := s.view(func(tx *bolt.Tx) error {
		v, _, err := pending(tx)
		none = v == nil
		return err
	}); err != nil || none {
		return r, false, err
	}
	found := false
	err := s.update(func(tx *bolt.Tx) error {
		v, ib, err := pending(tx)
		if err != nil || v == nil {
			return err
		}
		found = true
		// A request that does not decode is still a request: taken, with
		// what could be read.
		if err := json.Unmarshal(v, &r); err != nil {
			s.log.Warn("an interrupt request does not decode; taking it without its details", "child", childID, "err", err)
			r = seam.InterruptRequest{}
		}
		return ib.Delete([]byte(childID))
	})
	if err != nil {
		return seam.InterruptRequest{}, false, err
	}
	return r, found, nil
}

// MarkAbandoned sets or removes the mark of the child's message msgID
// (see seam.AwaitMarks).
func (s *Store) MarkAbandoned(ctx context.Context, childID, msgID string, abandoned bool) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	return s.update(func(tx *bolt.Tx) error {
		if err := requireChild(tx, childID); err != nil {
			return err
		}
		if !abandoned {
			if b := tx.Bucket(bucketAbandoned); b != nil {
				return b.Delete(abandonedKey(childID, msgID))
			}
			return nil
		}
		b, err := tx.CreateBucketIfNotExists(bucketAbandoned)
		if err != nil {
			return err
		}
		return b.Put(abandonedKey(childID, msgID), []byte{})
	})
}

// TakeAbandoned removes the child's marks of msgIDs and returns those that
// were set (see seam.AwaitMarks).
func (s *Store) TakeAbandoned(ctx context.Context, childID string, msgIDs []string) ([]string, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	var out []string
	err := s.update(func(tx *bolt.Tx) error {
		out = nil
		if err := requireChild(tx, childID); err != nil {
			return err
		}
		b := tx.Bucket(bucketAbandoned)
		if b == nil {
			return nil
		}
		for _, id := range msgIDs {
			k := abandonedKey(childID, id)
			if b.Get(k) == nil {
				continue
			}
			out = append(out, id)
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
