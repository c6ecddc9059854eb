package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Recover finds the children a crash (or a shutdown) left claimed by an
// owner that is gone — an expired claim, one the store knows is stale (the
// earlier opening of an exclusive store, an old active mark), or one of
// this manager's id that is not resident here — closes their interrupted
// turns so they can be resumed, and announces each ended epoch to its
// parent: the claim taken over, the closing events, the checkpoint, the
// revoked claim and the notice are one write, so a crash during recovery
// repeats it, never half of it; and a claim another live owner took
// meanwhile refuses it. Claims of other owners whose lease runs are left
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
		m.mu.Lock()
		_, resident := m.live[c.ChildID]
		m.mu.Unlock()
		if resident || (c.Owner.ID != m.owner && c.Owner.Expires.After(now)) {
			continue
		}
		m.closeEpoch(ctx, c, false)
	}
	m.reconcileWorktrees(ctx)
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
// Recover), in a write fenced by c as read: the takeover is conditional on
// the claim being unchanged (another server's sweep or its owner's renewal
// wins it otherwise; a claim an older build left, with no owner id, is
// not fenced). sweeping: a sweep's, which tells of an unreadable journal
// only the first time. It reports whether the epoch was closed, with the
// child's header.
func (m *Manager) closeEpoch(ctx context.Context, c seam.Claim, sweeping bool) (seam.Header, bool) {
	id := c.ChildID
	var fence *seam.Fence
	if c.Owner.ID != "" {
		fence = &seam.Fence{Owner: c.Owner.ID, Epoch: c.Epoch}
	}
	h, err := m.store.Header(ctx, id)
	if err != nil {
		m.log.Error("a claimed child cannot be read; leaving it", "agent_id", id, "err", err)
		return h, false
	}
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
		n := seam.Notice{Source: agent.SourceSettled, StopReason: agent.StopError, Text: unreadableText(id, err)}
		if err := m.deliver(h, n); err != nil {
			m.log.Error("telling the parent of an unreadable child failed", "agent_id", id, "err", err)
		}
		return h, false
	}
	all, closing := agent.CloseOpenTurn(events)
	out := agent.LastOutcome(all)
	last := seam.Result{Output: out.Output, StopReason: out.StopReason, Diagnostic: out.Diagnostic}
	if last.StopReason == "" {
		// No turn of the epoch reached the journal: the crash stopped
		// it before it began (its prompt is still queued, and a resume
		// runs it).
		last.StopReason = agent.StopAborted
	}
	cp := seam.Checkpoint{Seq: int64(len(all)), Mode: h.Mode, Label: h.Label, Usage: foldUsage(all), Stop: last.StopReason,
		Closing: truncate.Bound(last.Output, seam.MaxClosingBytes)}
	n := stamp(h, seam.Notice{Source: agent.SourceSettled, Text: settlementText(id, last), StopReason: last.StopReason})
	lease := m.lease()
	w := seam.ChildWrite{Fence: fence, Claim: &lease, Events: closing, Settle: &cp, Notify: &seam.ParentNotice{To: h.Parent, Notice: n}}
	if err := m.storeWrite(ctx, func(ctx context.Context) error { return m.store.WriteChild(ctx, id, w) }); err != nil {
		if errors.Is(err, seam.ErrOwned) {
			// Renewed by its owner (the store's clock judged the lease
			// live), or taken over by another sweeper first.
			m.log.Debug("a claim that looked expired is held; leaving it", "agent_id", id, "owner", c.Owner.ID, "err", err)
			return h, false
		}
		m.log.Error("closing an interrupted epoch failed; the next start tries again", "agent_id", id, "err", err)
		return h, false
	}
	m.announce(h, n)
	m.cancelStoredQuestions(ctx, id)
	m.log.Info("recovered a child left resident", "agent_id", id, "owner", c.Owner.ID, "epoch", c.Epoch, "closed_turn", len(closing) > 0)
	return h, true
}

// cancelStoredQuestions closes the questions a closed epoch left pending:
// the turn that held them is gone, so nobody's answer can reach it, and a
// later list_agents or answer must not show them as waiting. They are
// recorded as cancelled by the turn's end (ByInterrupt), never as a
// person's answer.
func (m *Manager) cancelStoredQuestions(ctx context.Context, id string) {
	qs, err := m.store.Questions(ctx, id)
	if err != nil {
		m.log.Warn("reading a recovered child's questions failed; they stay pending in the store", "agent_id", id, "err", err)
		return
	}
	for _, q := range qs {
		if !q.Pending() {
			continue
		}
		q.Answer = &seam.Answer{By: seam.ByInterrupt, Outcome: seam.OutcomeCancelled, At: time.Now()}
		if err := m.store.PutQuestion(ctx, q); err != nil {
			m.log.Warn("closing a recovered child's question failed", "agent_id", id, "question", q.ID, "err", err)
		}
	}
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
		m.mu.Lock()
		_, resident := m.live[c.ChildID]
		m.mu.Unlock()
		if resident {
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
// for it meanwhile run once it is closed (the caller runs them). Under
// resumeMu, so a resume between its claim and its registration is not
// taken for one.
func (m *Manager) closeOwn(ctx context.Context, c seam.Claim) (seam.Header, bool) {
	m.resumeMu.Lock()
	defer m.resumeMu.Unlock()
	m.mu.Lock()
	_, resident := m.live[c.ChildID]
	m.mu.Unlock()
	if resident {
		return seam.Header{}, false
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

// unreadableText is the notice about an active child whose journal cannot
// be read.
func unreadableText(id string, err error) string {
	return fmt.Sprintf("Background subagent %s cannot be read from the session store, so how its last run ended is unknown (%s). "+
		"It lists as corrupt; stop the server and run `mcp-subagent doctor` to copy every readable child into a fresh store.",
		id, truncate.Bound(err.Error(), 300))
}
