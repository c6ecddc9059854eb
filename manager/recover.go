package manager

import (
	"context"
	"errors"
	"slices"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/manager/listing"
	"github.com/mcp-subagent/mcp-subagent/manager/questions"
	"github.com/mcp-subagent/mcp-subagent/manager/wording"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Recover finds the children a crash (or a shutdown) left claimed by an
// owner that is gone — an expired claim, one the store knows is stale (the
// earlier opening of an exclusive store, an old active mark), or one of
// this manager's id that is not resident here — closes their interrupted
// turns so they can be resumed, and announces each ended epoch to its
// parent. The claim is taken over first (the epoch goes up, so the former
// owner writes nothing more), then the journal is read; the closing
// events, the checkpoint, the revoked claim and the notice are one write,
// so a crash during recovery repeats it, never half of it (a crash between
// the two leaves the claim this manager's: its next start, or another
// server's sweep once its lease runs out, closes the epoch); and a claim
// another live owner took meanwhile refuses the takeover. Claims of other owners whose lease runs are left
// alone: those children are resident in another server. Call it once after
// the providers are registered; ctx bounds it (a recovery cut short is
// finished by the next start).
//
// A child whose journal cannot be read keeps its claim (revoking it would
// forget the epoch for good; once the file is repaired, a later start
// closes and announces it) and lists as corrupt, and its parent gets a
// notice saying so, once per start while it stays unreadable.
func (m *Manager) Recover(ctx context.Context) error {
	if m.store == nil {
		return nil
	}
	claims, err := m.store.Residents(ctx)
	if err != nil {
		return err
	}
	now := m.now()
	for _, c := range claims {
		if m.resident(c.ChildID) || (c.Owner.ID != m.owner && c.Owner.Expires.After(now)) {
			continue
		}
		m.closeEpoch(ctx, c, false)
	}
	m.wt.Reconcile(ctx, m.store, m.owner, m.resident)
	// From now on each lease renewal also sweeps for claims other servers
	// left to expire.
	m.mu.Lock()
	if !m.closed {
		m.sweeping = true
		m.startRenewer()
	}
	m.mu.Unlock()
	return ctx.Err()
}

// closeEpoch closes the epoch claim c left open and announces it (see
// Recover). It takes the claim over first, fenced by c as read (another
// server's sweep or its owner's renewal wins it otherwise; a claim an older
// build left, with no owner id, is not fenced): that write bumps the epoch,
// so from its commit on every write of the former owner (a writer of its
// still lingering) is refused, and only then is the journal final. Read
// before it, the journal could still grow by a turn's start that the
// closing would not see, leaving that turn open for good. The closing
// events, the checkpoint, the revoked claim and the notice then go in one
// write fenced by the new claim. sweeping: a sweep's, which tells of an
// unreadable journal only the first time. It reports whether the epoch was
// closed, with the child's header.
func (m *Manager) closeEpoch(ctx context.Context, c seam.Claim, sweeping bool) (seam.Header, bool) {
	id := c.ChildID
	h, err := m.store.Header(ctx, id)
	if err != nil {
		m.log.Error("a claimed child cannot be read; leaving it", "agent_id", id, "err", err)
		return h, false
	}
	// Read before the takeover too: a journal that cannot be read is not
	// taken over (its claim keeps the epoch to close once it is repaired).
	events, err := m.store.Events(ctx, id)
	if err != nil {
		m.mu.Lock()
		_, known := m.corrupt[id]
		m.mu.Unlock()
		if sweeping && known {
			// A sweep retries it at each renewal; the parent was told
			// the first time.
			m.log.Debug("a claimed child's journal is still unreadable", "agent_id", id, "err", err)
			return h, false
		}
		m.log.Error("a claimed child's journal cannot be read; keeping its claim", "agent_id", id, "err", err)
		m.noteUnreadable(id, err)
		n := seam.Notice{Source: agent.SourceSettled, StopReason: agent.StopError, Text: wording.Unreadable(id, err)}
		if err := m.deliver(h, n); err != nil {
			m.log.Error("telling the parent of an unreadable child failed", "agent_id", id, "err", err)
		}
		return h, false
	}
	n, closed, ok := m.takeOverAndClose(ctx, h, c, events)
	if !ok {
		return h, false
	}
	m.announce(h, n)
	questions.CancelStored(ctx, m.store, id, m.log)
	m.log.Info("recovered a child left resident", "agent_id", id, "owner", c.Owner.ID, "epoch", c.Epoch, "closed_turn", closed)
	return h, true
}

// takeOverAndClose is closeEpoch's takeover of the child of h, whose
// journal read events: it claims the child, reads what the former owner
// committed meanwhile, and closes and settles the epoch, returning the
// notice to announce and whether a turn was closed. It runs under
// resumeMu, so no resume here claims the child between the takeover and
// the settlement (which would then revoke the resumed activation's claim).
func (m *Manager) takeOverAndClose(ctx context.Context, h seam.Header, c seam.Claim, events []agent.Event) (seam.Notice, bool, bool) {
	id := h.ID
	m.resumeMu.Lock()
	defer m.resumeMu.Unlock()
	if m.resident(id) {
		return seam.Notice{}, false, false // a send resumed it meanwhile
	}
	fence, err := m.takeOver(ctx, c)
	if err != nil {
		if errors.Is(err, seam.ErrOwned) {
			// Renewed by its owner (the store's clock judged the lease
			// live), or taken over by another sweeper first.
			m.log.Debug("a claim that looked expired is held; leaving it", "agent_id", id, "owner", c.Owner.ID, "err", err)
			return seam.Notice{}, false, false
		}
		m.log.Error("taking over an interrupted epoch failed; the next start tries again", "agent_id", id, "err", err)
		return seam.Notice{}, false, false
	}
	// What the former owner committed before the takeover.
	more, err := m.store.EventsFrom(ctx, id, int64(len(events)))
	if err != nil {
		m.log.Error("reading a taken-over child's journal failed; its claim is kept here, and the next start closes it", "agent_id", id, "err", err)
		return seam.Notice{}, false, false
	}
	all, closing := agent.CloseOpenTurn(append(events, more...))
	out := agent.LastOutcome(all)
	last := seam.Result{Output: out.Output, StopReason: out.StopReason, Diagnostic: out.Diagnostic}
	if last.StopReason == "" {
		// No turn of the epoch reached the journal: the crash stopped
		// it before it began (its prompt is still queued, and a resume
		// runs it).
		last.StopReason = agent.StopAborted
	}
	cp := seam.Checkpoint{Seq: int64(len(all)), Mode: h.Mode, Label: h.Label, Usage: listing.FoldUsage(all), Stop: last.StopReason,
		Closing: truncate.Bound(last.Output, seam.MaxClosingBytes)}
	n := stamp(h, seam.Notice{Source: agent.SourceSettled, Text: wording.Settled(id, last), StopReason: last.StopReason})
	w := seam.ChildWrite{Fence: fence, Events: closing, Settle: &cp, Notify: &seam.ParentNotice{To: h.Parent, Notice: n}}
	if err := m.storeWrite(ctx, func(ctx context.Context) error { return m.store.WriteChild(ctx, id, w) }); err != nil {
		if errors.Is(err, seam.ErrOwned) {
			// This manager's lease ran out in between, and another
			// server took the child over: it closes the epoch.
			m.log.Debug("a child taken over was taken over again before its epoch was closed; leaving it", "agent_id", id, "err", err)
			return seam.Notice{}, false, false
		}
		m.log.Error("closing an interrupted epoch failed; its claim is kept here, and the next start closes it", "agent_id", id, "err", err)
		return seam.Notice{}, false, false
	}
	return n, len(closing) > 0, true
}

// takeOver claims the child of c for this manager, fenced by c as read
// (unfenced for a claim without an owner id, which an older build left),
// and returns the fence of the new claim: its epoch is past c's unless c
// was already this manager's.
func (m *Manager) takeOver(ctx context.Context, c seam.Claim) (*seam.Fence, error) {
	var fence *seam.Fence
	if c.Owner.ID != "" {
		fence = &seam.Fence{Owner: c.Owner.ID, Epoch: c.Epoch}
	}
	lease := m.lease()
	w := seam.ChildWrite{Fence: fence, Claim: &lease}
	if err := m.storeWrite(ctx, func(ctx context.Context) error { return m.store.WriteChild(ctx, c.ChildID, w) }); err != nil {
		return nil, err
	}
	return m.fenceOf(ctx, c.ChildID)
}

// startSweep runs a sweep in a goroutine of its own unless one runs: a
// long one (many children taken over at once) must not hold up the
// renewal of this manager's own lease. Called by the renewer.
func (m *Manager) startSweep() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.swept || m.closed {
		return
	}
	m.swept = true
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.sweep(m.ctx)
		m.mu.Lock()
		m.swept = false
		m.mu.Unlock()
	}()
}

// sweep takes over the children of other servers sharing the store whose
// lease ran out: run at each lease renewal once Recover ran. Each expired
// claim is closed as Recover closes it (the cut-off turn is not re-run;
// the epoch is closed and announced), fenced by the claim as read, so a
// claim the store judges live (its clock, not ours, decides) or that
// another server took first is left alone; then the messages queued for
// the child run here, in order. This manager's own claims that are not
// resident here (a child whose writes failed) are closed the same way
// (closeOwn).
func (m *Manager) sweep(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	claims, err := m.store.Residents(ctx)
	if err != nil {
		m.log.Warn("listing claims for the takeover sweep failed; retrying at the next renewal", "err", err)
		return
	}
	now := m.now()
	for _, c := range claims {
		if ctx.Err() != nil {
			return
		}
		if c.Owner.ID == m.owner {
			if h, ok := m.closeOwn(ctx, c); ok {
				m.runQueued(ctx, h)
			}
			continue
		}
		if c.Owner.ID == "" || c.Owner.Expires.After(now) {
			continue
		}
		if m.resident(c.ChildID) {
			continue
		}
		h, ok := m.closeEpoch(ctx, c, true)
		if !ok {
			continue
		}
		m.log.Warn("took over a child whose owner's lease expired", "agent_id", c.ChildID, "owner", c.Owner.ID, "epoch", c.Epoch)
		m.runQueued(ctx, h)
	}
}

// closeOwn closes an epoch of this manager's own that is not resident
// here: a child whose writes failed (the store was down) keeps its claim
// so that its epoch is announced, and this manager's renewals keep that
// claim live, so no other instance would; messages other instances queued
// for it meanwhile run once it is closed (the caller runs them). A child
// resident here again is left alone: closeEpoch's takeover checks that
// under resumeMu, so a resume between its claim and its registration is
// not taken for one.
func (m *Manager) closeOwn(ctx context.Context, c seam.Claim) (seam.Header, bool) {
	if m.resident(c.ChildID) {
		return seam.Header{}, false // the common case, read nothing (checked again under resumeMu)
	}
	h, ok := m.closeEpoch(ctx, c, true)
	if ok {
		m.log.Warn("closed an epoch of a child whose writes had failed here", "agent_id", c.ChildID, "epoch", c.Epoch)
	}
	return h, ok
}

// runQueued resumes a child taken over whose stored inbox holds messages
// (a follow-up admitted by its former owner), so they run here, in order.
func (m *Manager) runQueued(ctx context.Context, h seam.Header) {
	queued, err := m.store.Queued(ctx, h.ID)
	if err != nil {
		m.log.Error("reading a taken-over child's inbox failed; its queued messages run at its next send", "agent_id", h.ID, "err", err)
		return
	}
	if !slices.ContainsFunc(queued, func(q seam.QueuedMessage) bool { return !q.Quiet }) {
		return
	}
	caller := seam.ParentRef{Principal: h.Principal}
	if h.Parent != seam.PrincipalAddress(h.Principal) {
		caller.AgentID = h.Parent
	}
	a, err := m.resume(ctx, h, caller)
	if err != nil {
		// errResident: a send resumed it meanwhile, and it runs them;
		// ErrOwned: another instance claimed it first, and it runs them.
		if !errors.Is(err, errResident) && !errors.Is(err, seam.ErrOwned) {
			m.log.Error("resuming a taken-over child failed; its queued messages run at its next send", "agent_id", h.ID, "err", err)
		}
		return
	}
	go a.run()
}
