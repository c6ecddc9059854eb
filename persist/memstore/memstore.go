// Package memstore is an in-memory seam.Store and taskstore.Store (MCP
// task records, tasks.go): for tests, and for a server run without a data
// directory, where children live only as long as the process.
//
// It keeps the whole contract of the bbolt store in package persist and
// passes the same conformance suite (persist/storetest): values are copied
// in and out (they are kept JSON-encoded, so nothing a caller holds aliases
// the store's state), children list by created_at with ties broken by id, a
// journal's sequence must continue without gaps, notices are numbered per
// address and taken once; WriteChild checks everything before it changes
// anything, so a refused write leaves no trace; inboxes are kept; claims
// are granted, renewed and revoked as the contract says, with expiry read
// from the clock. A store lives in one process, so every owner is of its
// one opening: an owner whose Close let its lease go (Renew with a past
// time) is taken over at once, and one that just stopped renewing after its
// lease ran out. Root sessions (seam.Sessions) live by their owner's last
// lease, as a shared store keeps them, so managers sharing one store in a
// process share them. Nothing is ever corrupt here, so ErrCorrupt is never
// returned and no Listing is Corrupt.
//
// Caveats: everything is lost when the process ends, including the claims
// a restart would use to announce interrupted epochs. A ctx is checked
// before each call; no call blocks on anything but the store's mutex.
package memstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/wake"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

var _ seam.Store = (*Store)(nil)

// ErrNotFound is returned (wrapped, naming the id) by every per-child method
// for an id the store does not hold. It is seam.ErrNotFound.
var ErrNotFound = seam.ErrNotFound

// ErrExists is returned (wrapped) by WriteChild for a Create of an id
// already stored.
var ErrExists = errors.New("child already exists")

// ErrClosed is returned by every method after Close.
var ErrClosed = errors.New("memstore: store is closed")

type child struct {
	header     []byte
	descriptor []byte
	events     [][]byte
	checkpoint []byte       // nil: none
	inbox      [][]byte     // queued messages (seam.QueuedMessage JSON), in order
	questions  [][]byte     // seam.EncodeQuestion's bytes
	listing    seam.Listing // what a listing row shows, without the checkpoint

	interrupt *seam.InterruptRequest // the pending interrupt request (wake.go)
	abandoned map[string]bool        // messages whose in-band wait was given up (wake.go)
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

// Store is an in-memory seam.Store, safe for concurrent use. The zero
// value is not usable; call New.
type Store struct {
	mu       sync.RWMutex
	closed   bool
	children map[string]*child
	byParent map[string][]indexEntry
	// byAncestor orders every ancestor's descendants (all levels), for
	// Descendants' pages.
	byAncestor map[string][]indexEntry
	notices    map[string]*queue
	claims     map[string]seam.Owner // child id → its owner
	// epochs is each child's last claim epoch; it outlives the claim.
	epochs map[string]int64
	wake   wake.Hub // Watch's watches (wake.go)
	// leases is each owner's lease as its last claim, renewal or session
	// set it, and sessions the connected root sessions (sessions.go).
	leases   map[string]time.Time
	sessions map[sessionKey]seam.Session
	tasks    map[string][]byte // task id → taskstore.Encode's bytes (tasks.go)
}

// New returns an empty store.
func New() *Store {
	return &Store{
		children:   map[string]*child{},
		byParent:   map[string][]indexEntry{},
		byAncestor: map[string][]indexEntry{},
		notices:    map[string]*queue{},
		claims:     map[string]seam.Owner{},
		epochs:     map[string]int64{},
		leases:     map[string]time.Time{},
		sessions:   map[sessionKey]seam.Session{},
		tasks:      map[string][]byte{},
	}
}

func notFound(id string) error { return fmt.Errorf("memstore: child %q: %w", id, ErrNotFound) }

func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: %w", err)
	}
	return nil
}

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

// read runs fn on a child under the read lock, after checking ctx.
func (s *Store) read(ctx context.Context, id string, fn func(c *child)) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, err := s.get(id)
	if err != nil {
		return err
	}
	fn(c)
	return nil
}

var (
	minCreatedAt = time.Unix(0, math.MinInt64)
	maxCreatedAt = time.Unix(0, math.MaxInt64)
)

// create stores a validated new child under s.mu.
func (s *Store) create(h seam.Header, hb, db []byte) *child {
	c := &child{header: hb, descriptor: db, listing: seam.Listing{Header: seam.Header{ID: h.ID, Parent: h.Parent,
		Depth: h.Depth, Mode: h.Mode, Provider: h.Provider, Label: h.Label, Cwd: h.Cwd, Model: h.Model, CreatedAt: h.CreatedAt}}}
	s.children[h.ID] = c
	e := indexEntry{createdAt: h.CreatedAt.UnixNano(), id: h.ID}
	idx := s.byParent[h.Parent]
	i, _ := slices.BinarySearchFunc(idx, e, compareEntries)
	s.byParent[h.Parent] = slices.Insert(idx, i, e)
	for _, a := range s.ancestry(h.Parent) {
		idx := s.byAncestor[a]
		i, _ := slices.BinarySearchFunc(idx, e, compareEntries)
		s.byAncestor[a] = slices.Insert(idx, i, e)
	}
	return c
}

// ancestry is parent and each of its stored ancestors up to the root
// address, nearest first.
func (s *Store) ancestry(parent string) []string {
	out := []string{parent}
	for a := parent; ; {
		c := s.children[a]
		if c == nil || slices.Contains(out, c.listing.Header.Parent) {
			return out
		}
		a = c.listing.Header.Parent
		out = append(out, a)
	}
}

func encodeNew(h seam.Header, d seam.Descriptor) (hb, db []byte, err error) {
	switch {
	case h.ID == "":
		return nil, nil, errors.New("memstore: header id must not be empty")
	case h.Parent == "":
		return nil, nil, fmt.Errorf("memstore: child %q: header parent must not be empty", h.ID)
	case h.CreatedAt.IsZero():
		return nil, nil, fmt.Errorf("memstore: child %q: header created_at must be set", h.ID)
	case h.CreatedAt.Before(minCreatedAt) || h.CreatedAt.After(maxCreatedAt):
		return nil, nil, fmt.Errorf("memstore: child %q: header created_at %s is outside the years 1678-2262", h.ID, h.CreatedAt)
	case d.Version != seam.DescriptorVersion:
		return nil, nil, fmt.Errorf("memstore: child %q: descriptor version %d is not %d", h.ID, d.Version, seam.DescriptorVersion)
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

// Header returns the child's header.
func (s *Store) Header(ctx context.Context, childID string) (seam.Header, error) {
	var b []byte
	var h seam.Header
	if err := s.read(ctx, childID, func(c *child) { b = c.header }); err != nil {
		return h, err
	}
	return h, json.Unmarshal(b, &h)
}

// Descriptor returns the child's descriptor.
func (s *Store) Descriptor(ctx context.Context, childID string) (seam.Descriptor, error) {
	var b []byte
	var d seam.Descriptor
	if err := s.read(ctx, childID, func(c *child) { b = c.descriptor }); err != nil {
		return d, err
	}
	return d, json.Unmarshal(b, &d)
}

// Events returns the child's whole journal.
func (s *Store) Events(ctx context.Context, childID string) ([]agent.Event, error) {
	return s.EventsFrom(ctx, childID, 0)
}

// EventsFrom returns the journal from sequence number from on.
func (s *Store) EventsFrom(ctx context.Context, childID string, from int64) ([]agent.Event, error) {
	if from < 0 {
		return nil, fmt.Errorf("memstore: child %q: events from %d: the sequence must not be negative", childID, from)
	}
	var raw [][]byte
	// The slice header is copied; the encoded events are never mutated.
	if err := s.read(ctx, childID, func(c *child) {
		if from < int64(len(c.events)) {
			raw = c.events[from:len(c.events):len(c.events)]
		}
	}); err != nil {
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
func (s *Store) JournalLen(ctx context.Context, childID string) (int64, error) {
	var n int64
	err := s.read(ctx, childID, func(c *child) { n = int64(len(c.events)) })
	return n, err
}

// Listings returns parent's direct children ordered by created_at, ties by
// id, each with its checkpoint.
func (s *Store) Listings(ctx context.Context, parent string, page seam.Page) ([]seam.Listing, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, ErrClosed
	}
	return s.page(s.byParent[parent], page)
}

// Descendants returns root's whole subtree in creation order, ties by id.
func (s *Store) Descendants(ctx context.Context, root string, page seam.Page) ([]seam.Listing, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, ErrClosed
	}
	return s.page(s.byAncestor[root], page)
}

// page reads one page of an index; it is called with s.mu read-locked
// and unlocks it.
func (s *Store) page(idx []indexEntry, page seam.Page) ([]seam.Listing, error) {
	if !page.After.IsZero() {
		after := indexEntry{createdAt: page.After.CreatedAt.UnixNano(), id: page.After.ID}
		i, found := slices.BinarySearchFunc(idx, after, compareEntries)
		if found {
			i++
		}
		idx = idx[i:]
	}
	if page.Limit > 0 && len(idx) > page.Limit {
		idx = idx[:page.Limit]
	}
	out := make([]seam.Listing, len(idx))
	cps := make([][]byte, len(idx))
	for i, e := range idx {
		c := s.children[e.id]
		out[i] = c.listing
		out[i].HasChildren = len(s.byParent[e.id]) > 0
		cps[i] = c.checkpoint
	}
	s.mu.RUnlock()
	for i, b := range cps {
		if b == nil {
			continue
		}
		var cp seam.Checkpoint
		if err := json.Unmarshal(b, &cp); err != nil {
			return nil, err
		}
		out[i].Checkpoint, out[i].JournalLen = &cp, cp.Seq // current by construction
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// Checkpoint returns the child's projection checkpoint, if one is stored.
func (s *Store) Checkpoint(ctx context.Context, childID string) (seam.Checkpoint, bool, error) {
	var b []byte
	var cp seam.Checkpoint
	if err := s.read(ctx, childID, func(c *child) { b = c.checkpoint }); err != nil || b == nil {
		return cp, false, err
	}
	if err := json.Unmarshal(b, &cp); err != nil {
		return seam.Checkpoint{}, false, err
	}
	return cp, true, nil
}

// SetCheckpoint replaces the child's projection checkpoint, if it is
// current (its Seq is the journal's length); a stale one is dropped.
func (s *Store) SetCheckpoint(ctx context.Context, childID string, cp seam.Checkpoint) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
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
	if cp.Seq == int64(len(c.events)) {
		c.checkpoint = b
	}
	return nil
}

// AddNotice queues n under to. The store assigns n.Seq (per address, from
// 1, never reused, whatever the caller set) and n.Time when zero.
func (s *Store) AddNotice(ctx context.Context, to string, n seam.Notice) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	if to == "" {
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
	if err := s.addNotice(to, n); err != nil {
		return err
	}
	s.wake.Signal(to) // wake.go
	return nil
}

// addNotice numbers and queues n under s.mu.
func (s *Store) addNotice(to string, n seam.Notice) error {
	q := s.notices[to]
	if q == nil {
		q = &queue{}
		s.notices[to] = q
	}
	n.Seq = q.next + 1
	b, err := json.Marshal(n)
	if err != nil {
		return fmt.Errorf("memstore: notices of %q: encode: %w", to, err)
	}
	q.next++
	q.items = append(q.items, b)
	return nil
}

// TakeNotices removes and returns the notices queued under to that take
// accepts (every one when take is nil), in order; a notice is returned
// once and the rest stay queued.
func (s *Store) TakeNotices(ctx context.Context, to string, take func(seam.Notice) bool) ([]seam.Notice, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	q := s.notices[to]
	if q == nil {
		return nil, nil
	}
	var out []seam.Notice
	kept := q.items[:0]
	for _, b := range q.items {
		var n seam.Notice
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

// WriteChild applies a child's writes (create, claim, inbox, events,
// settle and its notice) as one: every check passes before anything
// changes, so a refused write leaves no trace.
func (s *Store) WriteChild(ctx context.Context, childID string, w seam.ChildWrite) (err error) {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	defer func() {
		if err == nil {
			s.wake.Signal(seam.WakeKeys(childID, w)...) // wake.go
		}
	}()
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
	if c := w.Claim; c != nil && c.ID == "" {
		return fmt.Errorf("memstore: child %q: a claim needs an owner id", childID)
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
	var notice seam.Notice
	if w.Settle != nil {
		var err error
		if cb, err = json.Marshal(*w.Settle); err != nil {
			return err
		}
	}
	n := w.Notify
	if n != nil {
		var err error
		switch {
		case w.Settle == nil:
			return fmt.Errorf("memstore: child %q: a notice is written only with its settlement", childID)
		case n.To == "":
			return fmt.Errorf("memstore: child %q: the settlement notice has no recipient", childID)
		case n.Inbox:
			nb, err = json.Marshal(n.Message)
		default:
			notice = n.Notice
			if notice.Time.IsZero() {
				notice.Time = time.Now().UTC()
			}
		}
		if err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	// Check everything first.
	next := 0
	var c *child
	if w.Create != nil {
		if _, ok := s.children[childID]; ok {
			return fmt.Errorf("memstore: child %q: %w", childID, ErrExists)
		}
		if f := w.Fence; f != nil {
			return s.checkFence(childID, *f) // nobody holds a child not yet created
		}
	} else {
		var err error
		if c, err = s.get(childID); err != nil {
			return err
		}
		next = len(c.events)
		if f := w.Fence; f != nil {
			if err := s.checkFence(childID, *f); err != nil {
				return err
			}
		}
		if w.Claim != nil {
			if err := s.checkClaim(childID, *w.Claim); err != nil {
				return err
			}
		}
	}
	if n := w.JournalIs; n != nil && w.Create == nil && *n != int64(next) {
		return fmt.Errorf("memstore: child %q: the journal holds %d events, not the %d the write was made on: %w", childID, next, *n, seam.ErrStale)
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
		c = s.create(w.Create.Header, hb, db)
	}
	if w.Claim != nil {
		if held, ok := s.claims[childID]; !ok || held.ID != w.Claim.ID {
			s.epochs[childID]++ // a takeover, or a claim of an unclaimed child
		}
		s.claims[childID] = *w.Claim
		s.leases[w.Claim.ID] = w.Claim.Expires
	}
	c.inbox = append(c.inbox, queued...)
	if len(w.Dequeue) > 0 {
		gone := map[string]bool{}
		for _, id := range w.Dequeue {
			gone[id] = true
		}
		c.inbox = slices.DeleteFunc(c.inbox, func(b []byte) bool {
			var q seam.QueuedMessage
			return json.Unmarshal(b, &q) != nil || gone[q.ID]
		})
	}
	if len(events) > 0 {
		c.events = append(c.events, events...)
		c.checkpoint = nil // stale once the journal grows
	}
	if w.Settle == nil {
		return nil
	}
	if w.Settle.Seq == int64(len(c.events)) {
		c.checkpoint = cb
	}
	delete(s.claims, childID)
	switch {
	case n == nil:
	case n.Inbox:
		p := s.children[n.To]
		p.inbox = append(p.inbox, nb)
	default:
		return s.addNotice(n.To, notice)
	}
	return nil
}

// checkClaim refuses a claim while another owner's lease is unexpired.
func (s *Store) checkClaim(id string, want seam.Owner) error {
	held, ok := s.claims[id]
	if !ok || held.ID == want.ID || !time.Now().Before(held.Expires) {
		return nil
	}
	return fmt.Errorf("memstore: child %q is claimed by owner %q until %s: %w", id, held.ID, held.Expires.UTC().Format(time.RFC3339), seam.ErrOwned)
}

// checkFence refuses a write whose writer no longer holds the child's
// claim at its epoch.
func (s *Store) checkFence(id string, f seam.Fence) error {
	held, ok := s.claims[id]
	if ok && held.ID == f.Owner && s.epochs[id] == f.Epoch {
		return nil
	}
	return fmt.Errorf("memstore: child %q: the write is fenced to owner %q at epoch %d, and the child's claim is no longer that (owner %q, epoch %d): %w",
		id, f.Owner, f.Epoch, held.ID, s.epochs[id], seam.ErrOwned)
}

// ClaimOf returns the child's claim, if it is claimed.
func (s *Store) ClaimOf(ctx context.Context, childID string) (seam.Claim, bool, error) {
	var cl seam.Claim
	var ok bool
	err := s.read(ctx, childID, func(*child) {
		var o seam.Owner
		if o, ok = s.claims[childID]; ok {
			cl = seam.Claim{ChildID: childID, Owner: o, Epoch: s.epochs[childID]}
		}
	})
	return cl, ok, err
}

// Queued returns a child's inbox in admission order.
func (s *Store) Queued(ctx context.Context, childID string) ([]seam.QueuedMessage, error) {
	var raw [][]byte
	if err := s.read(ctx, childID, func(c *child) { raw = slices.Clone(c.inbox) }); err != nil {
		return nil, err
	}
	out := make([]seam.QueuedMessage, 0, len(raw))
	for _, b := range raw {
		var q seam.QueuedMessage
		if err := json.Unmarshal(b, &q); err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, nil
}

// Renew sets the expiry of every claim owner.ID holds to owner.Expires.
func (s *Store) Renew(ctx context.Context, owner seam.Owner) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	if owner.ID == "" {
		return errors.New("memstore: renew: the owner has no id")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	for id, o := range s.claims {
		if o.ID == owner.ID {
			s.claims[id] = owner
		}
	}
	s.leases[owner.ID] = owner.Expires
	return nil
}

// Residents lists every claim, by child id.
func (s *Store) Residents(ctx context.Context) ([]seam.Claim, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	var out []seam.Claim
	for id, o := range s.claims {
		c := seam.Claim{ChildID: id, Owner: o, Epoch: s.epochs[id]}
		if ch := s.children[id]; ch != nil {
			c.Parent = ch.listing.Header.Parent
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b seam.Claim) int { return strings.Compare(a.ChildID, b.ChildID) })
	return out, nil
}

// Close discards the store's contents; later calls fail with ErrClosed.
// Calling it again is a no-op.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.children, s.byParent, s.byAncestor, s.notices, s.claims, s.epochs = nil, nil, nil, nil, nil, nil
	s.leases, s.sessions = nil, nil
	return nil
}

// Delete removes childID and its whole subtree (see seam.Store.Delete),
// refusing the lot while any of them holds a claim.
func (s *Store) Delete(ctx context.Context, childID string) ([]string, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	root, err := s.get(childID)
	if err != nil {
		return nil, err
	}
	ids := []string{childID}
	for i := 0; i < len(ids); i++ {
		if _, claimed := s.claims[ids[i]]; claimed {
			return nil, fmt.Errorf("memstore: child %q: %w", ids[i], seam.ErrClaimed)
		}
		for _, e := range s.byParent[ids[i]] {
			ids = append(ids, e.id)
		}
	}
	parent := root.listing.Header.Parent
	e := indexEntry{createdAt: root.listing.Header.CreatedAt.UnixNano(), id: childID}
	if i, found := slices.BinarySearchFunc(s.byParent[parent], e, compareEntries); found {
		s.byParent[parent] = slices.Delete(s.byParent[parent], i, i+1)
	}
	if len(s.byParent[parent]) == 0 {
		delete(s.byParent, parent)
	}
	// The subtree leaves each of the root's ancestors' indexes (its parent
	// and up) and takes its own indexes with it.
	gone := make(map[string]bool, len(ids))
	for _, id := range ids {
		gone[id] = true
	}
	for _, a := range s.ancestry(parent) {
		idx := slices.DeleteFunc(s.byAncestor[a], func(e indexEntry) bool { return gone[e.id] })
		if len(idx) == 0 {
			delete(s.byAncestor, a)
		} else {
			s.byAncestor[a] = idx
		}
	}
	for _, id := range ids {
		delete(s.children, id)
		delete(s.byParent, id)
		delete(s.byAncestor, id)
		delete(s.notices, id)
		delete(s.epochs, id)
	}
	return ids, nil
}

// PutQuestion stores q under its child, replacing one of the same id in
// its place.
func (s *Store) PutQuestion(ctx context.Context, q seam.Question) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	b, err := seam.EncodeQuestion(q)
	if err != nil {
		return fmt.Errorf("memstore: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.get(q.ChildID)
	if err != nil {
		return err
	}
	for i, old := range c.questions {
		if o, err := seam.DecodeQuestion(old); err == nil && o.ID == q.ID {
			c.questions[i] = b
			return nil
		}
	}
	c.questions = append(c.questions, b)
	return nil
}

// Questions returns the child's questions in creation order, ties by id.
func (s *Store) Questions(ctx context.Context, childID string) ([]seam.Question, error) {
	var raw [][]byte
	if err := s.read(ctx, childID, func(c *child) { raw = slices.Clone(c.questions) }); err != nil {
		return nil, err
	}
	out := make([]seam.Question, 0, len(raw))
	for _, b := range raw {
		q, err := seam.DecodeQuestion(b)
		if err != nil {
			return nil, fmt.Errorf("memstore: child %q: %w", childID, err)
		}
		out = append(out, q)
	}
	seam.SortQuestions(out)
	return out, nil
}
