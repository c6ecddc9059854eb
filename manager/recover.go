package manager

import (
	"context"
	"errors"
	"slices"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager/listing"
	"github.com/mcp-subagent/mcp-subagent/manager/questions"
	"github.com/mcp-subagent/mcp-subagent/manager/recovery"
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
	if err := m.recovery().Recover(ctx); err != nil {
		return err
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

// recovery closes this manager's share of the open epochs (package
// recovery), through policyHost.
func (m *Manager) recovery() recovery.Recoverer {
	return recovery.Recoverer{Store: m.store, Host: policyHost{m}, Owner: m.owner, Shared: shared(m.store), Now: m.now,
		Timeout: storeTimeout, Log: m.log}
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
		m.recovery().Sweep(m.ctx)
		m.mu.Lock()
		m.swept = false
		m.mu.Unlock()
	}()
}

// runQueued resumes a child taken over whose stored inbox holds messages
// (a follow-up admitted by its former owner), so they run here, in order.
// A resume that meets a race another try can win tries again (as a send
// does, manager/pacing), unless another instance now holds the child (it runs
// them): a claim refused only because the child's row was being written
// right then must not leave acknowledged messages queued with nobody to
// run them.
func (m *Manager) runQueued(ctx context.Context, h seam.Header) {
	retry := m.pace(h.ID)
	defer retry.Close()
	for {
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
		if err == nil {
			go a.run()
			return
		}
		// errResident: a send resumed it meanwhile, and it runs them.
		if errors.Is(err, errResident) {
			return
		}
		// ErrOwned: another instance claimed it first, and it runs them.
		if errors.Is(err, seam.ErrOwned) {
			if _, elsewhere, rerr := m.heldElsewhere(ctx, h.ID); rerr == nil && elsewhere {
				return
			}
		}
		if transientSend(err) && ctx.Err() == nil {
			if err = retry.Again(ctx, nil, err); err == nil {
				continue
			}
		}
		m.log.Error("resuming a taken-over child failed; its queued messages run at its next send", "agent_id", h.ID, "err", err)
		return
	}
}

// Exclusive runs fn under resumeMu (recovery.Host): a takeover's claim,
// read and settlement are serialised with cold resumes.
func (h policyHost) Exclusive(fn func()) {
	h.m.resumeMu.Lock()
	defer h.m.resumeMu.Unlock()
	fn()
}

// TakeOver claims the child of c for this manager (recovery.Host), fenced
// by c as read (unfenced for a claim without an owner id, which an older
// build left), and returns the fence of the new claim: its epoch is past
// c's unless c was already this manager's.
func (h policyHost) TakeOver(ctx context.Context, c seam.Claim) (*seam.Fence, error) {
	var fence *seam.Fence
	if c.Owner.ID != "" {
		fence = &seam.Fence{Owner: c.Owner.ID, Epoch: c.Epoch}
	}
	lease := h.m.lease()
	if err := h.Write(ctx, c.ChildID, seam.ChildWrite{Fence: fence, Claim: &lease}); err != nil {
		return nil, err
	}
	return h.m.fenceOf(ctx, c.ChildID)
}

// Write commits w for child id with the manager's retry (recovery.Host).
func (h policyHost) Write(ctx context.Context, id string, w seam.ChildWrite) error {
	return h.m.storeWrite(ctx, func(ctx context.Context) error { return h.m.store.WriteChild(ctx, id, w) })
}

// Unreadable reports whether child id lists as corrupt or unavailable
// (recovery.Host).
func (h policyHost) Unreadable(id string) bool {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	_, known := h.m.corrupt[id]
	return known
}

// TellUnreadable lists hdr's child as unreadable and tells its parent
// (recovery.Host).
func (h policyHost) TellUnreadable(hdr seam.Header, err error) {
	h.m.noteUnreadable(hdr.ID, err)
	n := seam.Notice{Source: agent.SourceSettled, StopReason: agent.StopError, Text: wording.Unreadable(hdr.ID, err)}
	if err := h.m.deliver(hdr, n); err != nil {
		h.m.log.Error("telling the parent of an unreadable child failed", "agent_id", hdr.ID, "err", err)
	}
}

// Settled is the settlement notice of hdr's child (recovery.Host).
func (h policyHost) Settled(hdr seam.Header, last seam.Result) seam.Notice {
	return stamp(hdr, seam.Notice{Source: agent.SourceSettled, Text: wording.Settled(hdr.ID, last), StopReason: last.StopReason})
}

func (h policyHost) Usage(events []agent.Event) seam.Usage          { return listing.FoldUsage(events) }
func (h policyHost) Announce(hdr seam.Header, n seam.Notice)        { h.m.announce(hdr, n) }
func (h policyHost) RunQueued(ctx context.Context, hdr seam.Header) { h.m.runQueued(ctx, hdr) }

// Closed cancels the stored questions of a child whose epoch was closed
// (recovery.Host).
func (h policyHost) Closed(ctx context.Context, id string) {
	questions.CancelStored(ctx, h.m.store, id, h.m.log)
}
