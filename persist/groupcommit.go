package persist

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// WriteChild applies a child's pending writes (create, claim, inbox,
// events, settle) in one commit. Writes from several children that arrive
// while a commit is in flight share the next one (group commit): one disk
// sync for everything that piled up, with no added delay. A write that
// fails its checks is refused alone; the others in its commit still land.
// ctx is checked once, before the write is queued: a queued write is
// committed whatever ctx does.
func (s *Store) WriteChild(ctx context.Context, childID string, w seam.ChildWrite) (err error) {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	defer func() {
		if err == nil {
			s.wake.Signal(seam.WakeKeys(childID, w)...) // wake.go
		}
	}()
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
	w              seam.ChildWrite
	hb, db, cb     []byte
	events, queued [][]byte // queued: the admissions left after netInbox, encoded
	dequeue        []string // the removals left after netInbox
	notify         []byte   // the settlement notice for a parent's inbox, encoded
	done           chan error
	err            error
}

func encodeWrite(childID string, w seam.ChildWrite) (*writeReq, error) {
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
	if c := w.Claim; c != nil && c.ID == "" {
		return nil, fmt.Errorf("persist: child %q: a claim needs an owner id", childID)
	}
	if r.events, err = encodeEvents(childID, w.Events); err != nil {
		return nil, err
	}
	enqueue, dequeue := netInbox(w.Enqueue, w.Dequeue)
	r.queued, r.dequeue = make([][]byte, len(enqueue)), dequeue
	for i, q := range enqueue {
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
			if r.err = s.checkWrite(tx, r); r.err != nil {
				continue // refused alone, before it touched anything
			}
			if c := r.w.Claim; c != nil {
				s.know(c.ID)
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
// an unknown child, a claim another live owner holds, events that do not
// continue the journal.
func (s *Store) checkWrite(tx *bolt.Tx, r *writeReq) error {
	next := int64(0)
	if r.w.Create != nil {
		children, err := top(tx, bucketChildren)
		if err != nil {
			return err
		}
		if children.Get([]byte(r.id)) != nil {
			return fmt.Errorf("persist: child %q: %w", r.id, ErrExists)
		}
		if f := r.w.Fence; f != nil {
			return checkFence(tx, r.id, *f) // nobody holds a child not yet created
		}
	} else {
		if err := requireChild(tx, r.id); err != nil {
			return err
		}
		if len(r.w.Events) > 0 || r.w.JournalIs != nil {
			j, err := journal(tx, r.id)
			if err != nil {
				return err
			}
			if next, err = journalLen(r.id, j); err != nil {
				return err
			}
		}
	}
	if f := r.w.Fence; f != nil && r.w.Create == nil {
		if err := checkFence(tx, r.id, *f); err != nil {
			return err
		}
	}
	if c := r.w.Claim; c != nil {
		if err := s.checkClaim(tx, r.id, *c); err != nil {
			return err
		}
	}
	if n := r.w.Notify; n != nil && n.Inbox {
		if err := requireChild(tx, n.To); err != nil {
			return fmt.Errorf("persist: child %q: the settlement notice's recipient: %w", r.id, err)
		}
	}
	if n := r.w.JournalIs; n != nil && r.w.Create == nil && *n != next {
		return fmt.Errorf("persist: child %q: the journal holds %d events, not the %d the write was made on: %w", r.id, next, *n, seam.ErrStale)
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
	// A tenure that begins and ends in this one write (a whole short
	// life) is not numbered: no other write can carry its fence, and a
	// short life's commit stays free of claim pages.
	if w.Claim != nil && !(w.Create != nil && w.Settle != nil) {
		if err := grantClaim(tx, r.id, *w.Claim); err != nil {
			return err
		}
	}
	// A claim the same write revokes (a child created, or taken over, and
	// settled in one commit) is not put: putting and deleting it would
	// still rewrite the active bucket's pages, for nothing.
	if w.Claim != nil && w.Settle == nil {
		if err := putClaim(tx, r.id, *w.Claim); err != nil {
			return err
		}
	}
	// Likewise a message admitted and taken in one write (a short turn's
	// prompt) never touches the inbox bucket (netInbox, in encodeWrite).
	if len(r.queued)+len(r.dequeue) > 0 {
		if err := writeInbox(tx, r.id, r.queued, r.dequeue); err != nil {
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
	if err := revokeClaim(tx, r.id); err != nil {
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

// netInbox returns what a write leaves to do in the stored inbox: the
// admissions and the removals, less each message the same write both
// admits and removes (it is neither stored nor encoded).
func netInbox(enqueue []seam.QueuedMessage, dequeue []string) ([]seam.QueuedMessage, []string) {
	if len(enqueue) == 0 || len(dequeue) == 0 {
		return enqueue, dequeue
	}
	admitted := make(map[string]bool, len(enqueue))
	for _, q := range enqueue {
		admitted[q.ID] = true
	}
	var rest []string
	taken := make(map[string]bool, len(dequeue))
	for _, id := range dequeue {
		if admitted[id] {
			taken[id] = true
		} else {
			rest = append(rest, id)
		}
	}
	var kept []seam.QueuedMessage
	for _, q := range enqueue {
		if !taken[q.ID] {
			kept = append(kept, q)
		}
	}
	return kept, rest
}
