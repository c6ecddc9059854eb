package persist

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// The by_ancestor index lists every ancestor's whole subtree in one
// order: under each ancestor address (a principal's, or a stored child's
// id), the by_parent key of every descendant (created_at ‖ id) → the
// address of the descendant's own parent, whose by_parent bucket holds its
// index record. A descendants page seeks its cursor here and reads only its
// own rows; the index costs one entry per level of depth per child.

// ancestry is parent and each of its stored ancestors up to the root
// address, nearest first, read from the headers. A header that does not
// decode ends the walk there (Repair rebuilds the index from what it
// keeps); a hand-made cycle ends it at the repeat.
func ancestry(children *bolt.Bucket, parent string) []string {
	out := []string{parent}
	for a := parent; ; {
		b := children.Get([]byte(a))
		if b == nil {
			return out
		}
		h, err := headerOf(a, b)
		if err != nil || h.Parent == "" {
			return out
		}
		for _, seen := range out {
			if seen == h.Parent {
				return out
			}
		}
		a = h.Parent
		out = append(out, a)
	}
}

// indexAncestors records a new child (its by_parent key) under its parent
// and every ancestor above.
func indexAncestors(tx *bolt.Tx, children *bolt.Bucket, parent string, key []byte) error {
	byAncestor, err := top(tx, bucketByAncestor)
	if err != nil {
		return err
	}
	for _, a := range ancestry(children, parent) {
		b, err := byAncestor.CreateBucketIfNotExists([]byte(a))
		if err != nil {
			return fmt.Errorf("persist: index under ancestor %q: %w", a, err)
		}
		if err := b.Put(key, []byte(parent)); err != nil {
			return err
		}
	}
	return nil
}

// unindexAncestors removes a deleted subtree (keys: each removed child's
// by_parent key) from the indexes of the subtree root's ancestors (parent
// and up), and drops the removed children's own indexes.
func unindexAncestors(tx *bolt.Tx, parent string, keys [][]byte) error {
	byAncestor, err := top(tx, bucketByAncestor)
	if err != nil {
		return err
	}
	children, err := top(tx, bucketChildren)
	if err != nil {
		return err
	}
	for _, a := range ancestry(children, parent) {
		b := byAncestor.Bucket([]byte(a))
		if b == nil {
			continue
		}
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		if k, _ := b.Cursor().First(); k == nil {
			if err := byAncestor.DeleteBucket([]byte(a)); err != nil {
				return err
			}
		}
	}
	for _, k := range keys {
		if b := byAncestor.Bucket(k[8:]); b != nil {
			if err := byAncestor.DeleteBucket(k[8:]); err != nil {
				return err
			}
		}
	}
	return nil
}

// buildAncestors builds by_ancestor from by_parent (a file laid out before
// the index existed), each parent's ancestry read once.
func buildAncestors(tx *bolt.Tx) error {
	byParent, err := top(tx, bucketByParent)
	if err != nil {
		return err
	}
	children, err := top(tx, bucketChildren)
	if err != nil {
		return err
	}
	byAncestor, err := top(tx, bucketByAncestor)
	if err != nil {
		return err
	}
	var parents [][]byte
	if err := byParent.ForEach(func(k, v []byte) error {
		if v == nil {
			parents = append(parents, bytes.Clone(k))
		}
		return nil
	}); err != nil {
		return err
	}
	for _, p := range parents {
		idx := byParent.Bucket(p)
		if idx == nil {
			continue
		}
		var dsts []*bolt.Bucket
		for _, a := range ancestry(children, string(p)) {
			b, err := byAncestor.CreateBucketIfNotExists([]byte(a))
			if err != nil {
				return err
			}
			dsts = append(dsts, b)
		}
		if err := idx.ForEach(func(k, _ []byte) error {
			if len(k) <= 8 {
				return nil
			}
			for _, b := range dsts {
				if err := b.Put(bytes.Clone(k), p); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}
