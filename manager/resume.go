package manager

import (
	"context"
	"errors"
	"fmt"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// header reads a child's header, live or stored, under the caller's ctx.
func (m *Manager) header(ctx context.Context, childID string) (seam.Header, error) {
	m.mu.Lock()
	a := m.live[childID]
	m.mu.Unlock()
	if a != nil {
		return a.hdr, nil
	}
	h, err := m.store.Header(ctx, childID)
	if err != nil {
		if errors.Is(err, seam.ErrCorrupt) {
			return h, &seam.Error{Code: seam.CodeNotResumable, AgentID: childID, Err: err,
				Message: fmt.Sprintf("subagent %q cannot be resumed: its stored record is corrupt; do not retry send_message with this id", childID)}
		}
		if !errors.Is(err, seam.ErrNotFound) && ctx.Err() == nil {
			// The store failed (a database down): the child may be fine.
			return h, &seam.Error{Code: seam.CodePersistenceUnavailable, AgentID: childID, Err: err,
				Message: fmt.Sprintf("the session store cannot be read (%s); nothing was sent to subagent %q, send again once it is back", truncate.Head(err.Error(), 300), childID)}
		}
		return h, &seam.Error{Code: seam.CodeNotResumable, AgentID: childID, Err: err,
			Message: fmt.Sprintf("subagent %q is unavailable", childID)}
	}
	return h, nil
}

// resume rebuilds a stored child: a new activation from its journal and
// descriptor, without asking the provider for anything new. The reads and
// the claim run under the caller's ctx (lookup and materialisation); once
// the activation is registered, its reads run under the manager's own.
//
// The journal is read before the claim, so on a store other instances
// share it can be stale by the claim's time: another instance held the
// child, ran a turn and let it go in between. The claim is conditional on
// the length read (seam.ChildWrite.JournalIs): a stale one is refused,
// and the reads start over, so a child never runs on a journal that
// misses a turn (whose message it would run again).
func (m *Manager) resume(ctx context.Context, hdr seam.Header, caller seam.ParentRef) (*activation, error) {
	m.resumeMu.Lock()
	defer m.resumeMu.Unlock()
	for try := 1; ; try++ {
		a, err := m.resumeOnce(ctx, hdr, caller)
		if !errors.Is(err, seam.ErrStale) || try == 5 || ctx.Err() != nil {
			return a, err
		}
		m.log.Debug("a resume read a journal that grew before its claim; reading it again", "agent_id", hdr.ID, "try", try)
	}
}

// resumeOnce is one try of resume, under resumeMu.
func (m *Manager) resumeOnce(ctx context.Context, hdr seam.Header, caller seam.ParentRef) (*activation, error) {
	if m.resident(hdr.ID) {
		return nil, errResident
	}
	notResumable := func(why string, err error) error {
		return &seam.Error{Code: seam.CodeNotResumable, AgentID: hdr.ID, Err: err,
			Message: fmt.Sprintf("subagent %q cannot be resumed (%s); do not retry send_message with this id", hdr.ID, why)}
	}
	desc, err := m.store.Descriptor(ctx, hdr.ID)
	if err != nil {
		return nil, notResumable("its descriptor is unreadable", err)
	}
	events, err := m.store.Events(ctx, hdr.ID)
	if err != nil {
		m.noteCorrupt(hdr.ID, err)
		return nil, notResumable("its journal is unreadable", err)
	}
	var read int64 // the journal's length as read: the claim's condition
	if n := len(events); n > 0 {
		read = events[n-1].Seq + 1
	}
	events, closing := agent.CloseOpenTurn(events)
	journal, err := agent.NewJournal(events)
	if err != nil {
		return nil, notResumable("its journal breaks the invariants", err)
	}
	m.mu.Lock()
	p := m.providers[desc.Provider]
	m.mu.Unlock()
	cp, ok := p.(seam.Continuable)
	if !ok {
		return nil, notResumable(fmt.Sprintf("its provider %q is not registered or cannot continue children", desc.Provider), nil)
	}
	m.budgets.Restore(ctx, hdr, events)
	if err := m.wt.Ensure(ctx, hdr); err != nil {
		return nil, notResumable("its worktree could not be recreated: "+truncate.Head(err.Error(), 300), err)
	}
	self := selfOf(hdr, desc, journal)
	cb, revoke := m.callback(self)
	drv, err := cp.NewDriver(ctx, seam.DriverRequest{Header: hdr, Descriptor: desc, Journal: journal, Self: self, Callback: cb,
		Budget: m.budgets.Hook(hdr.ID, hdr.Parent), Ask: m.asker(hdr)})
	if err != nil {
		revoke()
		// The cause (a stored output_schema that no longer compiles, say)
		// tells the model why; it is clipped, as every error it reads is.
		return nil, notResumable("its provider could not rebuild it: "+truncate.Head(err.Error(), 300), err)
	}
	drv = revokingDriver{drv, revoke}
	// The closing events are stored with the claim, in activate.
	a, err := m.activate(ctx, hdr, desc, drv, caller.AgentID, nil, closing, read)
	if err != nil {
		_ = drv.Close()
		return nil, err
	}
	// Messages a crash or a settlement left in the inbox run first, in
	// order (they are already stored); notices that reached the child while
	// it was cold ride with its next turn.
	bg, cancel := m.bg()
	defer cancel()
	queued, err := m.store.Queued(bg, hdr.ID)
	if err != nil {
		m.log.Error("reading a child's stored inbox failed", "agent_id", hdr.ID, "err", err)
	}
	a.mu.Lock()
	for _, q := range queued {
		msg := fromQueued(q)
		a.seen[q.ID] = true
		if q.Quiet {
			a.injects = append(a.injects, msg)
		} else {
			a.inbox = append(a.inbox, msg)
		}
	}
	a.mu.Unlock()
	m.adoptNotices(bg, a)
	m.log.Info("subagent resumed", "agent_id", hdr.ID, "events", len(events))
	return a, nil
}

// adoptNotices moves the notices stored for a resumed agent into its inbox:
// each is admitted (and committed) before it leaves the notice queue, so a
// crash or a failed write between the two repeats a notice, never loses
// one.
func (m *Manager) adoptNotices(ctx context.Context, a *activation) {
	seen := map[int64]bool{}
	var notes []seam.Notice
	// A take that accepts nothing reads without writing.
	if _, err := m.store.TakeNotices(ctx, a.hdr.ID, func(n seam.Notice) bool {
		if !seen[n.Seq] {
			seen[n.Seq] = true
			notes = append(notes, n)
		}
		return false
	}); err != nil {
		m.log.Error("reading a child's stored notices failed", "agent_id", a.hdr.ID, "err", err)
		return
	}
	if len(notes) == 0 {
		return
	}
	for _, n := range notes {
		a.inject(n.Text, n.Source)
	}
	if err := a.durable(); err != nil {
		return // they stay queued for the next resume
	}
	if _, err := m.store.TakeNotices(ctx, a.hdr.ID, func(n seam.Notice) bool { return seen[n.Seq] }); err != nil {
		m.log.Error("removing a child's adopted notices failed; they will be delivered again", "agent_id", a.hdr.ID, "err", err)
	}
}

// noteCorrupt remembers a child whose stored bytes failed to decode.
func (m *Manager) noteCorrupt(id string, err error) {
	if errors.Is(err, seam.ErrCorrupt) {
		m.mu.Lock()
		m.corrupt[id] = "corrupt"
		m.mu.Unlock()
	}
}

// noteUnreadable remembers a child whose journal could not be read at all:
// corrupt bytes, or a store that failed.
func (m *Manager) noteUnreadable(id string, err error) {
	reason := "unavailable"
	if errors.Is(err, seam.ErrCorrupt) {
		reason = "corrupt"
	}
	m.mu.Lock()
	m.corrupt[id] = reason
	m.mu.Unlock()
}
