// Package memstore is an in-memory manager.Store: for tests, and for a
// server run without a data directory, where children live only as long as
// the process.
//
// It keeps the same contract as the bbolt store in package persist and runs
// the same conformance suite (persist/storetest): values are copied in and
// out (they are kept JSON-encoded, so nothing a caller holds aliases the
// store's state), children list by created_at with ties broken by id, a
// journal's sequence must continue without gaps, notices are numbered per
// principal and taken once; WriteChild applies a child's writes (and a
// settlement's notice) as one, and inboxes are kept (Inboxer). Nothing is
// ever corrupt here, so ErrCorrupt is never returned.
//
// Caveats: everything is lost when the process ends, including the active
// marks a restart would use to announce interrupted epochs.
package memstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
)

var (
	_ manager.Store   = (*Store)(nil)
	_ manager.Inboxer = (*Store)(nil)
)

// ErrNotFound is returned (wrapped, naming the id) by every per-child method
// for an id the store does not hold. It is manager.ErrNotFound.
var ErrNotFound = manager.ErrNotFound

// ErrExists is returned (wrapped) by CreateChild for an id already stored.
var ErrExists = errors.New("child already exists")

// ErrClosed is returned by every method after Close.
var ErrClosed = errors.New("memstore: store is closed")

type child struct {
	header     []byte
	descriptor []byte
	events     [][]byte
	checkpoint []byte   // nil: none
	inbox      [][]byte // queued messages (manager.QueuedMessage JSON), in order
}

// indexEntry orders a parent's children.
type indexEntry struct {
	createdAt int64 // Unix nanoseconds
	id        string
}

type queue struct {
	next  int64
	items [][]byte
}

// Store is an in-memory manager.Store, safe for concurrent use. The zero
// value is not usable; call New.
type Store struct {
	mu       sync.RWMutex
	closed   bool
	children map[string]*child
	byParent map[string][]indexEntry
	notices  map[string]*queue
	active   map[string]bool
}

// New returns an empty store.
func New() *Store {
	return &Store{
		children: map[string]*child{},
		byParent: map[string][]indexEntry{},
		notices:  map[string]*queue{},
		active:   map[string]bool{},
	}
}

func notFound(id string) error { return fmt.Errorf("memstore: child %q: %w", id, ErrNotFound) }

// get returns a child under s.mu (read or write).
func (s *Store) get(id string) (*child, error) {
	if s.closed {
		return nil, ErrClosed
	}
	c, ok := s.children[id]
	if !ok {
		return nil, notFound(id)
	}
	return c, nil
}

var (
	minCreatedAt = time.Unix(0, math.MinInt64)
	maxCreatedAt = time.Unix(0, math.MaxInt64)
)

// CreateChild stores a new child. It refuses an id already stored
// (ErrExists), an empty id or parent, a zero created_at, and a descriptor
// version other than manager.DescriptorVersion.
func (s *Store) CreateChild(h manager.Header, d manager.Descriptor) error {
	hb, db, err := encodeNew(h, d)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if _, ok := s.children[h.ID]; ok {
		return fmt.Errorf("memstore: child %q: %w", h.ID, ErrExists)
	}
	s.create(h, hb, db)
	return nil
}

// create stores a validated new child under s.mu.
func (s *Store) create(h manager.Header, hb, db []byte) {
	s.children[h.ID] = &child{header: hb, descriptor: db}
	e := indexEntry{createdAt: h.CreatedAt.UnixNano(), id: h.ID}
	idx := s.byParent[h.Parent]
	i, _ := slices.BinarySearchFunc(idx, e, compareEntries)
	s.byParent[h.Parent] = slices.Insert(idx, i, e)
	s.active[h.ID] = true // a new child is resident
}

func encodeNew(h manager.Header, d manager.Descriptor) (hb, db []byte, err error) {
	switch {
	case h.ID == "":
		return nil, nil, errors.New("memstore: header id must not be empty")
	case h.Parent == "":
		return nil, nil, fmt.Errorf("memstore: child %q: header parent must not be empty", h.ID)
	case h.CreatedAt.IsZero():
		return nil, nil, fmt.Errorf("memstore: child %q: header created_at must be set", h.ID)
	case h.CreatedAt.Before(minCreatedAt) || h.CreatedAt.After(maxCreatedAt):
		return nil, nil, fmt.Errorf("memstore: child %q: header created_at %s is outside the years 1678-2262", h.ID, h.CreatedAt)
	case d.Version != manager.DescriptorVersion:
		return nil, nil, fmt.Errorf("memstore: child %q: descriptor version %d is not %d", h.ID, d.Version, manager.DescriptorVersion)
	}
	if hb, err = json.Marshal(h); err != nil {
		return nil, nil, fmt.Errorf("memstore: child %q: encode header: %w", h.ID, err)
	}
	if db, err = json.Marshal(d); err != nil {
		return nil, nil, fmt.Errorf("memstore: child %q: encode descriptor: %w", h.ID, err)
	}
	return hb, db, nil
}

func compareEntries(a, b indexEntry) int {
	switch {
	case a.createdAt < b.createdAt:
		return -1
	case a.createdAt > b.createdAt:
		return 1
	}
	return strings.Compare(a.id, b.id)
}

// AppendEvents appends events to the child's journal, all or none. The
// first event's Seq must equal the journal length and the rest must follow
// without a gap.
func (s *Store) AppendEvents(childID string, events []agent.Event) error {
	encoded := make([][]byte, len(events))
	for i, e := range events {
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("memstore: child %q: encode event %d: %w", childID, e.Seq, err)
		}
		encoded[i] = b
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.get(childID)
	if err != nil {
		return err
	}
	n := int64(len(c.events))
	for i, e := range events {
		if want := n + int64(i); e.Seq != want {
			return fmt.Errorf("memstore: child %q: event sequence %d does not continue the journal (next is %d)", childID, e.Seq, want)
		}
		if e.Kind == "" {
			return fmt.Errorf("memstore: child %q: event %d has no kind", childID, e.Seq)
		}
	}
	c.events = append(c.events, encoded...)
	if len(events) > 0 {
		c.checkpoint = nil // stale once the journal grows
	}
	return nil
}

// Header returns the child's header.
func (s *Store) Header(childID string) (manager.Header, error) {
	s.mu.RLock()
	c, err := s.get(childID)
	var b []byte
	if err == nil {
		b = c.header
	}
	s.mu.RUnlock()
	var h manager.Header
	if err != nil {
		return h, err
	}
	return h, json.Unmarshal(b, &h)
}

// Descriptor returns the child's descriptor.
func (s *Store) Descriptor(childID string) (manager.Descriptor, error) {
	s.mu.RLock()
	c, err := s.get(childID)
	var b []byte
	if err == nil {
		b = c.descriptor
	}
	s.mu.RUnlock()
	var d manager.Descriptor
	if err != nil {
		return d, err
	}
	return d, json.Unmarshal(b, &d)
}

// Events returns the child's whole journal.
func (s *Store) Events(childID string) ([]agent.Event, error) {
	s.mu.RLock()
	c, err := s.get(childID)
	var raw [][]byte
	if err == nil {
		// The slice header is copied; the encoded events are never mutated.
		raw = c.events[:len(c.events):len(c.events)]
	}
	s.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	events := make([]agent.Event, len(raw))
	for i, b := range raw {
		if err := json.Unmarshal(b, &events[i]); err != nil {
			return nil, err
		}
	}
	return events, nil
}

// JournalLen returns the number of stored events.
func (s *Store) JournalLen(childID string) (int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, err := s.get(childID)
	if err != nil {
		return 0, err
	}
	return int64(len(c.events)), nil
}

// Children returns the headers of parent's direct children ordered by
// created_at, ties by id. corrupt is always empty.
func (s *Store) Children(parent string) (headers []manager.Header, corrupt []string, err error) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, nil, ErrClosed
	}
	idx := s.byParent[parent]
	raw := make([][]byte, len(idx))
	for i, e := range idx {
		raw[i] = s.children[e.id].header
	}
	s.mu.RUnlock()
	if len(raw) == 0 {
		return nil, nil, nil
	}
	headers = make([]manager.Header, len(raw))
	for i, b := range raw {
		if err := json.Unmarshal(b, &headers[i]); err != nil {
			return nil, nil, err
		}
	}
	return headers, nil, nil
}

// Checkpoint returns the child's projection checkpoint, if one is stored.
func (s *Store) Checkpoint(childID string) (manager.Checkpoint, bool, error) {
	s.mu.RLock()
	c, err := s.get(childID)
	var b []byte
	if err == nil {
		b = c.checkpoint
	}
	s.mu.RUnlock()
	var cp manager.Checkpoint
	if err != nil || b == nil {
		return cp, false, err
	}
	if err := json.Unmarshal(b, &cp); err != nil {
		return manager.Checkpoint{}, false, err
	}
	return cp, true, nil
}

// SetCheckpoint replaces the child's projection checkpoint.
func (s *Store) SetCheckpoint(childID string, cp manager.Checkpoint) error {
	b, err := json.Marshal(cp)
	if err != nil {
		return fmt.Errorf("memstore: child %q: encode checkpoint: %w", childID, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.get(childID)
	if err != nil {
		return err
	}
	if cp.Seq == int64(len(c.events)) { // only a current checkpoint is kept
		c.checkpoint = b
	}
	return nil
}

// AddNotice queues n for principal. The store assigns n.Seq (per principal,
// from 1, never reused, whatever the caller set) and n.Time when zero.
func (s *Store) AddNotice(principal string, n manager.Notice) error {
	if principal == "" {
		return errors.New("memstore: notice principal must not be empty")
	}
	if n.Time.IsZero() {
		n.Time = time.Now().UTC()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return s.addNotice(principal, n)
}

// addNotice queues n under s.mu.
func (s *Store) addNotice(principal string, n manager.Notice) error {
	q := s.notices[principal]
	if q == nil {
		q = &queue{}
		s.notices[principal] = q
	}
	n.Seq = q.next + 1
	b, err := json.Marshal(n)
	if err != nil {
		return fmt.Errorf("memstore: notices of %q: encode: %w", principal, err)
	}
	q.next++
	q.items = append(q.items, b)
	return nil
}

// WriteChild applies a child's writes (create, inbox, events, settle and
// its notice) as one: every check passes before anything changes, so a
// refused write leaves no trace.
func (s *Store) WriteChild(childID string, w manager.ChildWrite) error {
	var hb, db []byte
	if c := w.Create; c != nil {
		if c.Header.ID != childID {
			return fmt.Errorf("memstore: child %q: create names %q", childID, c.Header.ID)
		}
		var err error
		if hb, db, err = encodeNew(c.Header, c.Descriptor); err != nil {
			return err
		}
	}
	events := make([][]byte, len(w.Events))
	for i, e := range w.Events {
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("memstore: child %q: encode event %d: %w", childID, e.Seq, err)
		}
		events[i] = b
	}
	queued := make([][]byte, len(w.Enqueue))
	for i, q := range w.Enqueue {
		b, err := json.Marshal(q)
		if err != nil {
			return err
		}
		queued[i] = b
	}
	var cb, nb []byte
	if w.Settle != nil {
		var err error
		if cb, err = json.Marshal(*w.Settle); err != nil {
			return err
		}
	}
	n := w.Notify
	if n != nil {
		switch {
		case w.Settle == nil:
			return fmt.Errorf("memstore: child %q: a notice is written only with its settlement", childID)
		case n.To == "":
			return fmt.Errorf("memstore: child %q: the settlement notice has no recipient", childID)
		case n.Inbox:
			var err error
			if nb, err = json.Marshal(n.Message); err != nil {
				return err
			}
		case n.Notice.Time.IsZero():
			c := *n
			c.Notice.Time = time.Now().UTC()
			n = &c
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	// Check everything first.
	next := 0
	if w.Create != nil {
		if _, ok := s.children[childID]; ok {
			return fmt.Errorf("memstore: child %q: %w", childID, ErrExists)
		}
	} else {
		c, err := s.get(childID)
		if err != nil {
			return err
		}
		next = len(c.events)
	}
	for i, e := range w.Events {
		if want := int64(next + i); e.Seq != want {
			return fmt.Errorf("memstore: child %q: event sequence %d does not continue the journal (next is %d)", childID, e.Seq, want)
		}
		if e.Kind == "" {
			return fmt.Errorf("memstore: child %q: event %d has no kind", childID, e.Seq)
		}
	}
	if n != nil && n.Inbox {
		if _, err := s.get(n.To); err != nil {
			return fmt.Errorf("memstore: child %q: the settlement notice's recipient: %w", childID, err)
		}
	}
	// Then apply.
	if w.Create != nil {
		s.create(w.Create.Header, hb, db)
	}
	c := s.children[childID]
	c.inbox = append(c.inbox, queued...)
	if len(w.Dequeue) > 0 {
		gone := map[string]bool{}
		for _, id := range w.Dequeue {
			gone[id] = true
		}
		c.inbox = slices.DeleteFunc(c.inbox, func(b []byte) bool {
			var q manager.QueuedMessage
			return json.Unmarshal(b, &q) != nil || gone[q.ID]
		})
	}
	if len(events) > 0 {
		c.events = append(c.events, events...)
		c.checkpoint = nil
	}
	if w.Settle == nil {
		return nil
	}
	if w.Settle.Seq == int64(len(c.events)) {
		c.checkpoint = cb
	}
	delete(s.active, childID)
	switch {
	case n == nil:
	case n.Inbox:
		p := s.children[n.To]
		p.inbox = append(p.inbox, nb)
	default:
		return s.addNotice(n.To, n.Notice)
	}
	return nil
}

// Queued returns a child's inbox in admission order.
func (s *Store) Queued(childID string) ([]manager.QueuedMessage, error) {
	s.mu.RLock()
	c, err := s.get(childID)
	var raw [][]byte
	if err == nil {
		raw = slices.Clone(c.inbox)
	}
	s.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	out := make([]manager.QueuedMessage, 0, len(raw))
	for _, b := range raw {
		var q manager.QueuedMessage
		if err := json.Unmarshal(b, &q); err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, nil
}

// TakeNotices removes and returns the notices queued for principal that
// take accepts (every one when take is nil), in order; a notice is
// returned once and the rest stay queued.
func (s *Store) TakeNotices(principal string, take func(manager.Notice) bool) ([]manager.Notice, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	q := s.notices[principal]
	if q == nil {
		return nil, nil
	}
	var out []manager.Notice
	kept := q.items[:0]
	for _, b := range q.items {
		var n manager.Notice
		if err := json.Unmarshal(b, &n); err != nil {
			return nil, err
		}
		if take != nil && !take(n) {
			kept = append(kept, b)
			continue
		}
		out = append(out, n)
	}
	clear(q.items[len(kept):])
	q.items = kept
	return out, nil
}

// SetActive sets (true) or clears (false) the child's live-activation mark.
func (s *Store) SetActive(childID string, active bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.get(childID); err != nil {
		return err
	}
	if active {
		s.active[childID] = true
	} else {
		delete(s.active, childID)
	}
	return nil
}

// Active returns the ids of marked children in byte order.
func (s *Store) Active() ([]string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	ids := make([]string, 0, len(s.active))
	for id := range s.active {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if len(ids) == 0 {
		return nil, nil
	}
	return ids, nil
}

// Close discards the store's contents; later calls fail with ErrClosed.
// Calling it again is a no-op.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.children, s.byParent, s.notices, s.active = nil, nil, nil, nil
	return nil
}
