package persist

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Listings reads a parent's children for a listing in one transaction,
// decoding no JSON: each index entry's binary record (what a row shows),
// the descriptor's bytes checked against the record's checksum, and the
// binary checkpoint (current by construction). Headers are not read: a listing's
// Header carries only the fields a row shows (ID, Parent, Depth, Mode,
// Provider, Label, Cwd, Model, Worktree, CreatedAt). A child whose record or descriptor is
// mangled comes back with Corrupt set; the others are unaffected.
func (s *Store) Listings(ctx context.Context, parent string, page seam.Page) ([]seam.Listing, error) {
	var out []seam.Listing
	err := s.listingView(ctx, bucketByParent, parent, page, func(k, v []byte, b listingBuckets) {
		if len(k) <= 8 {
			s.log.Warn("skipping malformed index key", "parent", parent, "key", fmt.Sprintf("%x", k))
			return
		}
		out = append(out, s.listing(parent, k[8:], v, b.descriptors, b.checkpoints, b.byParent))
	}, func() bool { return page.Limit <= 0 || len(out) < page.Limit })
	return out, err
}

// Descendants reads a root address's whole subtree for a listing, in one
// transaction, from by_ancestor: a page seeks its first key and reads only
// its own rows, each as Listings reads it (from its parent's by_parent
// entry).
func (s *Store) Descendants(ctx context.Context, root string, page seam.Page) ([]seam.Listing, error) {
	var out []seam.Listing
	err := s.listingView(ctx, bucketByAncestor, root, page, func(k, v []byte, b listingBuckets) {
		if len(k) <= 8 || v == nil {
			s.log.Warn("skipping malformed ancestor index key", "root", root, "key", fmt.Sprintf("%x", k))
			return
		}
		var rec []byte
		if p := b.byParent.Bucket(v); p != nil {
			rec = p.Get(k)
		}
		if rec == nil {
			s.log.Warn("skipping an ancestor index entry with no child index entry", "root", root, "child", string(k[8:]))
			return
		}
		out = append(out, s.listing(string(v), k[8:], rec, b.descriptors, b.checkpoints, b.byParent))
	}, func() bool { return page.Limit <= 0 || len(out) < page.Limit })
	return out, err
}

// listingBuckets are the buckets a listing row is read from.
type listingBuckets struct{ byParent, descriptors, checkpoints *bolt.Bucket }

// listingView walks the index bucket under key (a parent's by_parent or a
// root's by_ancestor entries, both keyed created-at + id) in one
// transaction, from the key after page.After, calling row for each entry
// while more() holds: a page seeks its first key and reads only its own
// rows.
func (s *Store) listingView(ctx context.Context, index []byte, key string, page seam.Page, row func(k, v []byte, b listingBuckets), more func() bool) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	return s.view(func(tx *bolt.Tx) error {
		indexTop, err := top(tx, index)
		if err != nil {
			return err
		}
		var b listingBuckets
		if b.byParent, err = top(tx, bucketByParent); err != nil {
			return err
		}
		if b.descriptors, err = top(tx, bucketDescriptors); err != nil {
			return err
		}
		if b.checkpoints, err = top(tx, bucketCheckpoints); err != nil {
			return err
		}
		idx := indexTop.Bucket([]byte(key))
		if key == "" || idx == nil {
			return nil
		}
		c := idx.Cursor()
		k, v := c.First()
		if !page.After.IsZero() {
			after := parentKey(page.After.CreatedAt.UnixNano(), page.After.ID)
			k, v = c.Seek(after)
			if k != nil && bytes.Equal(k, after) {
				k, v = c.Next()
			}
		}
		for ; k != nil && more(); k, v = c.Next() {
			row(k, v, b)
		}
		return nil
	})
}

// listing reads one indexed child for Listings. A damaged page under one
// child (a bbolt panic reading its descriptor or checkpoint) makes that
// child corrupt, not the listing.
func (s *Store) listing(parent string, id, rec []byte, descriptors, checkpoints, byParent *bolt.Bucket) (l seam.Listing) {
	l = seam.Listing{Header: seam.Header{ID: string(id), Parent: parent}}
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("listing a child on a damaged page", "path", s.path, "child", string(id), "panic", clip(fmt.Sprint(r)))
			l = seam.Listing{Header: seam.Header{ID: string(id), Parent: parent}, Corrupt: true}
		}
	}()
	r, err := decodeIndexRecord(rec)
	if err == nil {
		if d := descriptors.Get(id); d == nil || checksum(d) != r.descCRC {
			err = errors.New("descriptor bytes do not match their checksum")
		}
	}
	if err != nil {
		s.log.Warn("listing a corrupt child", "parent", parent, "child", string(id), "err", err)
		l.Corrupt = true
		return l
	}
	l.Header.Depth, l.Header.Mode, l.Header.Provider, l.Header.Label = int(r.depth), seam.Mode(r.mode), r.provider, r.label
	l.Header.Cwd, l.Header.Model = r.cwd, r.model
	if r.wtPath != "" {
		l.Header.Worktree = &seam.Worktree{Path: r.wtPath, Branch: r.wtBranch, Base: r.wtBase, Repo: r.wtRepo}
	}
	l.Header.CreatedAt = unixTime(r.createdAt)
	l.HasChildren = byParent.Bucket(id) != nil
	// A stored checkpoint is current (appends drop it), so its Seq is
	// the journal's length: no journal is opened here.
	if b := checkpoints.Get(id); b != nil {
		if cp, err := decodeCheckpoint(b); err == nil {
			l.Checkpoint = &cp
			l.JournalLen = cp.Seq
		}
	}
	return l
}
