package manager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager/listing"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Transcript returns the child's journal from event After on (zero: all),
// each text bounded by MaxTranscriptText. A resident child's journal is
// read from memory (it is ahead of the store); a stored one from the store.
// Only the principal of the child's lineage may read it, as a root caller
// or as one of the child's ancestors; anyone else gets UNAUTHORIZED, and
// an id the store does not hold is INVALID_REQUEST.
func (m *Manager) Transcript(ctx context.Context, caller seam.ParentRef, childID string, after int64) (Transcript, error) {
	if m.store == nil {
		return Transcript{}, newErr(seam.CodeControlUnavailable, "transcripts need a session store; none is configured")
	}
	m.mu.Lock()
	a := m.live[childID]
	m.mu.Unlock()
	var (
		h      seam.Header
		model  string
		events []agent.Event
		status = StatusReady
	)
	if a != nil {
		h, model, status = a.hdr, a.desc.Model, a.status()
		events = a.driver.Journal().Events()
	} else {
		var err error
		if h, err = m.store.Header(ctx, childID); err != nil {
			return Transcript{}, transcriptErr(childID, err)
		}
		model = h.Model
	}
	if err := m.mayRead(ctx, caller, h, a); err != nil {
		return Transcript{}, err
	}
	n, from := int64(len(events)), min(max(after, 0), int64(len(events)))
	if a == nil {
		// From after on only: a watch at another instance reads at each
		// step its owner commits, so the cost must not grow with the
		// journal.
		var err error
		from = max(after, 0)
		if events, err = m.store.EventsFrom(ctx, childID, from); err != nil {
			return Transcript{}, transcriptErr(childID, err)
		}
		n, from = from+int64(len(events)), 0
		if len(events) == 0 {
			// At or past the end: the length, but not past after (what
			// was appended since is read from after next time).
			if n, err = m.store.JournalLen(ctx, childID); err != nil {
				return Transcript{}, transcriptErr(childID, err)
			}
			n = min(n, max(after, 0))
		}
		// Resident at another instance: its owner's status as the store
		// shows it, as listing shows it.
		if _, elsewhere, err := m.heldElsewhere(ctx, childID); err == nil && elsewhere {
			status = m.statusElsewhere(ctx, childID, events)
		}
	}
	t := Transcript{ID: h.ID, Parent: h.Parent, Label: h.Label, Provider: h.Provider, Model: model, Depth: h.Depth,
		CreatedAt: h.CreatedAt, Status: status, Len: n, Entries: []TranscriptEntry{}}
	for _, e := range events[from:] {
		t.Entries = append(t.Entries, listing.Entry(e))
	}
	return t, nil
}

func transcriptErr(id string, err error) error {
	if errors.Is(err, seam.ErrNotFound) {
		return &seam.Error{Code: seam.CodeInvalidRequest, AgentID: id, Err: err,
			Message: fmt.Sprintf("no subagent %s: use an id list_agents shows", id)}
	}
	return &seam.Error{Code: seam.CodePersistenceUnavailable, AgentID: id, Err: err,
		Message: fmt.Sprintf("subagent %s cannot be read from the session store (%v)", id, err)}
}

// Watch signals a reader that a child's transcript changed: on every
// journal event of its activations while it is resident (a later wake or
// resume included), and once when an epoch settles. Signals coalesce: C
// holds at most one, and a reader re-reads the transcript from the length
// it last saw. The watch is its creator's: Stop ends it.
//
// While the child is not resident here (resident at another instance
// sharing the store, or stored) the watch follows the store instead
// (followStore): its wake-ups (seam.Waker), whichever instance committed
// what they signal — each commit to the child's journal (a turn's steps
// and its end: seam.JournalKey), an admission and a settlement (the
// child's id).
type Watch struct {
	// C receives a value after each change (coalesced).
	C <-chan struct{}
	// Settled receives a value when an epoch of the child settles
	// (coalesced), after its final journal events are readable.
	Settled <-chan struct{}

	c, settled chan struct{}
	id         string
	stopLife   func() // ends the lifecycle subscription
	done       atomic.Bool

	mu      sync.Mutex
	stopped bool
	journal *activation // the activation whose journal it follows
	unsub   func()      // ...and that subscription

	quit      chan struct{} // closed by Stop: followStore ends
	stopStore func()        // ends the store's wake-up watch; nil: none
}

// Watch starts watching childID for caller, who must be allowed to read it
// (see Transcript). Stop it when done.
func (m *Manager) Watch(ctx context.Context, caller seam.ParentRef, childID string) (*Watch, error) {
	if m.store == nil {
		return nil, newErr(seam.CodeControlUnavailable, "transcripts need a session store; none is configured")
	}
	m.mu.Lock()
	a := m.live[childID]
	m.mu.Unlock()
	h, err := seam.Header{}, error(nil)
	if a != nil {
		h = a.hdr
	} else if h, err = m.store.Header(ctx, childID); err != nil {
		return nil, transcriptErr(childID, err)
	}
	if err := m.mayRead(ctx, caller, h, a); err != nil {
		return nil, err
	}
	w := &Watch{c: make(chan struct{}, 1), settled: make(chan struct{}, 1), id: childID, quit: make(chan struct{})}
	w.C, w.Settled = w.c, w.settled
	// Lifecycle first, then the live check: an activation that starts in
	// between is seen by one of the two (follow ignores a repeat).
	w.stopLife = m.Subscribe(func(e Event) {
		if e.RunID != childID {
			return
		}
		switch e.Type {
		case EventStart:
			m.mu.Lock()
			a := m.live[childID]
			m.mu.Unlock()
			w.follow(a, true)
		case EventEnd:
			w.follow(nil, false)
			w.poke(w.c)
			w.poke(w.settled)
		}
	})
	m.mu.Lock()
	a = m.live[childID]
	m.mu.Unlock()
	w.follow(a, false) // the reader reads after this returns: nothing to catch up on
	w.watchStore(ctx, m)
	return w, nil
}

// watchStore starts following the store (see Watch), unless the store has
// no wake-ups or no other instance writes it (seam.Shared: then only this
// manager's activations change a journal, and the lifecycle follows
// them): it watches the child's journal key and its id, and takes the
// journal's length now, before the reader's first read, so what is
// journaled after is signalled.
func (w *Watch) watchStore(ctx context.Context, m *Manager) {
	wk, ok := m.store.(seam.Waker)
	if !ok || !shared(m.store) {
		return
	}
	fail := func(err error) {
		if ctx.Err() == nil {
			m.log.Debug("cannot watch the store for a transcript; only this instance's journal signals it", "agent_id", w.id, "err", err)
		}
	}
	journal, stopJournal, err := wk.Watch(ctx, seam.JournalKey(w.id))
	if err != nil {
		fail(err)
		return
	}
	child, stopChild, err := wk.Watch(ctx, w.id)
	if err != nil {
		stopJournal()
		fail(err)
		return
	}
	w.stopStore = func() { stopJournal(); stopChild() }
	n, err := m.store.JournalLen(ctx, w.id)
	if err != nil {
		n = -1 // the first wake-up of the journal's key signals
	}
	_, held, _ := m.heldElsewhere(ctx, w.id)
	go w.followStore(m, journal, child, n, held)
}

// followStore signals the reader of a child not resident here: at a
// wake-up of its journal's key when the journal's length, read then, is
// not the last one (a reconnection's wake-up, which may stand for steps
// whose wake-ups were lost, reads it too), learning then whether another
// instance holds the child if it was not known to; at each wake-up of the
// child's id; Settled when a child held elsewhere (as last read) is found
// unclaimed at a wake-up of its id (a settlement here is signalled by the
// lifecycle, once). It reads nothing while an activation here is followed
// (its journal signals) and ends at Stop.
func (w *Watch) followStore(m *Manager, journal, child <-chan struct{}, last int64, held bool) {
	// claim reads who holds the child before a signal, so a reader woken
	// by one has had the child's residency looked at since; true when a
	// child held elsewhere is found settled.
	claim := func() bool {
		ctx, cancel := m.bg()
		defer cancel()
		c, claimed, err := m.store.ClaimOf(ctx, w.id)
		if err != nil {
			return false
		}
		settled := held && !claimed
		held = claimed && m.othersLive(c)
		return settled
	}
	for {
		select {
		case <-w.quit:
			return
		case <-child:
			if w.local() {
				continue
			}
			settled := claim()
			w.poke(w.c)
			if settled {
				w.poke(w.settled)
			}
		case <-journal:
			if w.local() {
				last = -1 // back to the store later: signal once then
				continue
			}
			ctx, cancel := m.bg()
			n, err := m.store.JournalLen(ctx, w.id)
			cancel()
			if err == nil && n != last {
				last = n
				if !held {
					claim() // taken here since: its settlement is then told
				}
				w.poke(w.c)
			}
		}
	}
}

// local reports whether w follows an activation of this manager.
func (w *Watch) local() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.journal != nil
}

// follow moves w's journal subscription to a's (nil: none); catchUp
// signals once for events a journaled before the subscription (a wake
// seen late).
func (w *Watch) follow(a *activation, catchUp bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || a == w.journal {
		return
	}
	if w.unsub != nil {
		w.unsub()
		w.unsub = nil
	}
	w.journal = a
	if a != nil {
		// Runs under the journal's lock: it must not block, nor take w.mu
		// (follow holds it while it subscribes).
		w.unsub = a.driver.Journal().Subscribe(func(agent.Event) { w.poke(w.c) })
		if catchUp {
			w.poke(w.c)
		}
	}
}

// Stop ends the watch: no signal is sent once it has returned, except
// one a listener had already begun (a reader stops reading C anyway).
func (w *Watch) Stop() {
	w.done.Store(true)
	w.stopLife()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		close(w.quit)
		if w.stopStore != nil {
			w.stopStore()
		}
	}
	w.stopped = true
	if w.unsub != nil {
		w.unsub()
		w.unsub = nil
	}
	w.journal = nil
}

func (w *Watch) poke(c chan struct{}) {
	if w.done.Load() {
		return
	}
	select {
	case c <- struct{}{}:
	default:
	}
}
