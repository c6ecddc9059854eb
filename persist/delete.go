package persist

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Delete removes childID and its whole subtree in one transaction (see
// seam.Store.Delete): every id under it is found through by_parent, and
// any claim among them refuses the lot before anything is deleted.
func (s *Store) Delete(ctx context.Context, childID string) ([]string, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	var removed []string
	err := s.update(func(tx *bolt.Tx) error {
		removed = removed[:0] // a retried transaction starts over
		if err := requireChild(tx, childID); err != nil {
			return err
		}
		byParent, err := top(tx, bucketByParent)
		if err != nil {
			return err
		}
		active, err := top(tx, bucketActive)
		if err != nil {
			return err
		}
		// The subtree, breadth first. A by_parent bucket under a child's
		// id lists its children; ids seen once are not walked again, so a
		// hand-made cycle cannot loop.
		seen := map[string]bool{childID: true}
		ids := []string{childID}
		var keys [][]byte // the descendants' by_parent keys, for by_ancestor
		for i := 0; i < len(ids); i++ {
			if active.Get([]byte(ids[i])) != nil {
				return fmt.Errorf("persist: child %q: %w", ids[i], seam.ErrClaimed)
			}
			idx := byParent.Bucket([]byte(ids[i]))
			if idx == nil {
				continue
			}
			if err := idx.ForEach(func(k, _ []byte) error {
				if len(k) > 8 && !seen[string(k[8:])] {
					seen[string(k[8:])] = true
					ids = append(ids, string(k[8:]))
					keys = append(keys, bytes.Clone(k))
				}
				return nil
			}); err != nil {
				return err
			}
		}
		if err := unindexSubtree(tx, childID, seen, keys); err != nil {
			return err
		}
		if err := unindex(tx, byParent, childID); err != nil {
			return err
		}
		for _, id := range ids {
			if err := deleteChild(tx, id); err != nil {
				return err
			}
		}
		removed = ids
		return nil
	})
	if err != nil {
		return nil, err
	}
	return removed, nil
}

// unindex removes id's entry from its parent's by_parent bucket (and the
// bucket, once empty, so the parent no longer lists as having children).
// The entry is found from the header; a header that does not decode is
// looked for in every index.
func unindex(tx *bolt.Tx, byParent *bolt.Bucket, id string) error {
	children, err := top(tx, bucketChildren)
	if err != nil {
		return err
	}
	drop := func(parent []byte, key []byte) error {
		idx := byParent.Bucket(parent)
		if idx == nil {
			return nil
		}
		if err := idx.Delete(key); err != nil {
			return err
		}
		if k, _ := idx.Cursor().First(); k == nil {
			return byParent.DeleteBucket(parent)
		}
		return nil
	}
	if h, err := headerOf(id, children.Get([]byte(id))); err == nil {
		return drop([]byte(h.Parent), parentKey(h.CreatedAt.UnixNano(), h.ID))
	}
	type entry struct{ parent, key []byte }
	var found []entry
	err = byParent.ForEach(func(parent, v []byte) error {
		idx := byParent.Bucket(parent)
		if v != nil || idx == nil {
			return nil
		}
		return idx.ForEach(func(k, _ []byte) error {
			if len(k) > 8 && string(k[8:]) == id {
				found = append(found, entry{bytes.Clone(parent), bytes.Clone(k)})
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	for _, e := range found {
		if err := drop(e.parent, e.key); err != nil {
			return err
		}
	}
	return nil
}

// deleteChild removes one child's records from every bucket keyed by its
// id. Its own by_parent bucket goes too: its children are in the same
// Delete.
func deleteChild(tx *bolt.Tx, id string) error {
	key := []byte(id)
	for _, name := range [][]byte{bucketChildren, bucketDescriptors, bucketCheckpoints, bucketActive} {
		b, err := top(tx, name)
		if err != nil {
			return err
		}
		if err := b.Delete(key); err != nil {
			return err
		}
	}
	for _, name := range [][]byte{bucketEpochs, bucketInterrupts} { // made on first use
		if b := tx.Bucket(name); b != nil {
			if err := b.Delete(key); err != nil {
				return err
			}
		}
	}
	if err := deleteQuestions(tx, id); err != nil {
		return err
	}
	if b := tx.Bucket(bucketAbandoned); b != nil { // made on first use
		prefix := abandonedKey(id, "")
		var dead [][]byte
		c := b.Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			dead = append(dead, bytes.Clone(k))
		}
		for _, k := range dead {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
	}
	for _, name := range [][]byte{bucketJournals, bucketInboxes, bucketNotices, bucketByParent} {
		b, err := top(tx, name)
		if err != nil {
			return err
		}
		if err := b.DeleteBucket(key); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
			return err
		}
	}
	return nil
}

// unindexSubtree takes a deleted subtree (the root childID, every id in
// gone, the descendants' by_parent keys) out of by_ancestor. The root's
// place is found from its header; a header that does not decode is looked
// for in every index.
func unindexSubtree(tx *bolt.Tx, childID string, gone map[string]bool, keys [][]byte) error {
	children, err := top(tx, bucketChildren)
	if err != nil {
		return err
	}
	if h, err := headerOf(childID, children.Get([]byte(childID))); err == nil {
		return unindexAncestors(tx, h.Parent, append(keys, parentKey(h.CreatedAt.UnixNano(), h.ID)))
	}
	byAncestor, err := top(tx, bucketByAncestor)
	if err != nil {
		return err
	}
	type entry struct{ anc, key []byte }
	var found []entry
	err = byAncestor.ForEach(func(anc, v []byte) error {
		b := byAncestor.Bucket(anc)
		if v != nil || b == nil {
			return nil
		}
		if gone[string(anc)] {
			found = append(found, entry{bytes.Clone(anc), nil})
			return nil
		}
		return b.ForEach(func(k, _ []byte) error {
			if len(k) > 8 && gone[string(k[8:])] {
				found = append(found, entry{bytes.Clone(anc), bytes.Clone(k)})
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	for _, e := range found {
		if e.key == nil {
			err = byAncestor.DeleteBucket(e.anc)
		} else {
			err = byAncestor.Bucket(e.anc).Delete(e.key)
		}
		if err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
			return err
		}
	}
	return nil
}
