package persist

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/mcp-subagent/mcp-subagent/manager"
)

var (
	_ manager.Lister  = (*Store)(nil)
	_ manager.Batcher = (*Store)(nil)
	_ manager.Inboxer = (*Store)(nil)
)

// Listings reads a parent's children for a listing in one transaction,
// decoding no JSON: each index entry's binary record (what a row shows),
// the descriptor's bytes checked against the record's checksum, and the
// binary checkpoint (current by construction). Headers are not read: a listing's
// Header carries only the fields a row shows (ID, Parent, Depth, Mode,
// Provider, Label, CreatedAt). A child whose record or descriptor is
// mangled comes back with Corrupt set; the others are unaffected.
func (s *Store) Listings(parent string) ([]manager.Listing, error) {
	var out []manager.Listing
	err := s.view(func(tx *bolt.Tx) error {
		byParent, err := top(tx, bucketByParent)
		if err != nil {
			return err
		}
		descriptors, err := top(tx, bucketDescriptors)
		if err != nil {
			return err
		}
		checkpoints, err := top(tx, bucketCheckpoints)
		if err != nil {
			return err
		}
		idx := byParent.Bucket([]byte(parent))
		if parent == "" || idx == nil {
			return nil
		}
		c := idx.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(k) <= 8 {
				s.log.Warn("skipping malformed index key", "parent", parent, "key", fmt.Sprintf("%x", k))
				continue
			}
			out = append(out, s.listing(parent, k[8:], v, descriptors, checkpoints, byParent))
		}
		return nil
	})
	return out, err
}

// listing reads one indexed child for Listings. A damaged page under one
// child (a bbolt panic reading its descriptor or checkpoint) makes that
// child corrupt, not the listing.
func (s *Store) listing(parent string, id, rec []byte, descriptors, checkpoints, byParent *bolt.Bucket) (l manager.Listing) {
	l = manager.Listing{Header: manager.Header{ID: string(id), Parent: parent}}
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("listing a child on a damaged page", "path", s.path, "child", string(id), "panic", clip(fmt.Sprint(r)))
			l = manager.Listing{Header: manager.Header{ID: string(id), Parent: parent}, Corrupt: true}
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
	l.Header.Depth, l.Header.Mode, l.Header.Provider, l.Header.Label = int(r.depth), manager.Mode(r.mode), r.provider, r.label
	l.Header.Cwd = r.cwd
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

// WriteChild applies a child's pending writes (create, inbox, events,
// settle) in one commit. Writes from several children that arrive while a
// commit is in flight share the next one (group commit): one disk sync for
// everything that piled up, with no added delay. A write that fails its
// checks is refused alone; the others in its commit still land.
func (s *Store) WriteChild(childID string, w manager.ChildWrite) error {
	req, err := encodeWrite(childID, w)
	if err != nil {
		return err
	}
	s.wmu.Lock()
	s.wqueue = append(s.wqueue, req)
	if s.wleading {
		s.wmu.Unlock()
		return <-req.done
	}
	// This caller commits for everyone queued until the queue is empty.
	s.wleading = true
	for len(s.wqueue) > 0 {
		batch := s.wqueue
		s.wqueue = nil
		s.wmu.Unlock()
		s.commit(batch)
		s.wmu.Lock()
	}
	s.wleading = false
	s.wmu.Unlock()
	return <-req.done
}

// writeReq is one child's encoded write waiting for a group commit.
type writeReq struct {
	id             string
	w              manager.ChildWrite
	hb, db, cb     []byte
	events, queued [][]byte
	notify         []byte // the settlement notice for a parent's inbox, encoded
	done           chan error
	err            error
}

func encodeWrite(childID string, w manager.ChildWrite) (*writeReq, error) {
	r := &writeReq{id: childID, w: w, done: make(chan error, 1)}
	var err error
	if c := w.Create; c != nil {
		if c.Header.ID != childID {
			return nil, fmt.Errorf("persist: child %q: create names %q", childID, c.Header.ID)
		}
		if err := validateNew(c.Header, c.Descriptor); err != nil {
			return nil, err
		}
		if r.hb, err = json.Marshal(c.Header); err != nil {
			return nil, err
		}
		if r.db, err = json.Marshal(c.Descriptor); err != nil {
			return nil, err
		}
	}
	if r.events, err = encodeEvents(childID, w.Events); err != nil {
		return nil, err
	}
	r.queued = make([][]byte, len(w.Enqueue))
	for i, q := range w.Enqueue {
		if r.queued[i], err = json.Marshal(q); err != nil {
			return nil, err
		}
	}
	if w.Settle != nil {
		r.cb = encodeCheckpoint(*w.Settle)
	}
	if n := w.Notify; n != nil {
		if w.Settle == nil {
			return nil, fmt.Errorf("persist: child %q: a notice is written only with its settlement", childID)
		}
		if n.To == "" {
			return nil, fmt.Errorf("persist: child %q: the settlement notice has no recipient", childID)
		}
		if n.Inbox {
			if r.notify, err = json.Marshal(n.Message); err != nil {
				return nil, err
			}
		} else if n.Notice.Time.IsZero() {
			c := *n
			c.Notice.Time = time.Now().UTC()
			r.w.Notify = &c
		}
	}
	return r, nil
}

// commit applies a batch of writes in one transaction and answers each.
func (s *Store) commit(batch []*writeReq) {
	err := s.update(func(tx *bolt.Tx) error {
		for _, r := range batch {
			if r.err = checkWrite(tx, r); r.err != nil {
				continue // refused alone, before it touched anything
			}
			if err := applyWrite(tx, r); err != nil {
				return err // a storage fault: the whole commit fails
			}
		}
		return nil
	})
	for _, r := range batch {
		if err != nil {
			r.done <- err
		} else {
			r.done <- r.err
		}
	}
}

// checkWrite refuses a write that cannot apply whole: a duplicate create,
// an unknown child, events that do not continue the journal.
func checkWrite(tx *bolt.Tx, r *writeReq) error {
	next := int64(0)
	if r.w.Create != nil {
		children, err := top(tx, bucketChildren)
		if err != nil {
			return err
		}
		if children.Get([]byte(r.id)) != nil {
			return fmt.Errorf("persist: child %q: %w", r.id, ErrExists)
		}
	} else {
		if err := requireChild(tx, r.id); err != nil {
			return err
		}
		if len(r.w.Events) > 0 {
			j, err := journal(tx, r.id)
			if err != nil {
				return err
			}
			if next, err = journalLen(r.id, j); err != nil {
				return err
			}
		}
	}
	if n := r.w.Notify; n != nil && n.Inbox {
		if err := requireChild(tx, n.To); err != nil {
			return fmt.Errorf("persist: child %q: the settlement notice's recipient: %w", r.id, err)
		}
	}
	for i, e := range r.w.Events {
		if want := next + int64(i); e.Seq != want {
			return fmt.Errorf("persist: child %q: event sequence %d does not continue the journal (next is %d)", r.id, e.Seq, want)
		}
		if e.Kind == "" {
			return fmt.Errorf("persist: child %q: event %d has no kind", r.id, e.Seq)
		}
	}
	return nil
}

func applyWrite(tx *bolt.Tx, r *writeReq) error {
	w := r.w
	if w.Create != nil {
		if err := putChild(tx, w.Create.Header, r.hb, r.db); err != nil {
			return err
		}
	}
	if len(w.Enqueue)+len(w.Dequeue) > 0 {
		if err := writeInbox(tx, r.id, r.queued, w.Dequeue); err != nil {
			return err
		}
	}
	if len(w.Events) > 0 {
		if err := appendEvents(tx, r.id, w.Events, r.events); err != nil {
			return err
		}
	}
	if w.Settle == nil {
		return nil
	}
	if err := putCheckpoint(tx, r.id, *w.Settle, r.cb); err != nil {
		return err
	}
	marks, err := top(tx, bucketActive)
	if err != nil {
		return err
	}
	if err := marks.Delete([]byte(r.id)); err != nil {
		return err
	}
	switch n := w.Notify; {
	case n == nil:
		return nil
	case n.Inbox:
		b, err := inboxBucket(tx, n.To)
		if err != nil {
			return err
		}
		return appendInbox(b, r.notify)
	default:
		return putNotice(tx, n.To, n.Notice)
	}
}

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
		var q manager.QueuedMessage
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
func (s *Store) Queued(childID string) ([]manager.QueuedMessage, error) {
	var out []manager.QueuedMessage
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
			var q manager.QueuedMessage
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
