package manager

import (
	"context"
	"fmt"
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
	now := time.Now()
	for _, c := range claims {
		id := c.ChildID
		m.mu.Lock()
		_, resident := m.live[id]
		m.mu.Unlock()
		if resident || (c.Owner.ID != m.owner && c.Owner.Expires.After(now)) {
			continue
		}
		h, err := m.store.Header(ctx, id)
		if err != nil {
			m.log.Error("a claimed child cannot be read; leaving it", "agent_id", id, "err", err)
			continue
		}
		events, err := m.store.Events(ctx, id)
		if err != nil {
			m.log.Error("a claimed child's journal cannot be read; keeping its claim", "agent_id", id, "err", err)
			m.noteUnreadable(id, err)
			n := seam.Notice{Source: agent.SourceSettled, StopReason: agent.StopError, Text: unreadableText(id, err)}
			if err := m.deliver(h, n); err != nil {
				m.log.Error("telling the parent of an unreadable child failed", "agent_id", id, "err", err)
			}
			continue
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
		w := seam.ChildWrite{Claim: &lease, Events: closing, Settle: &cp, Notify: &seam.ParentNotice{To: h.Parent, Notice: n}}
		if err := m.storeWrite(ctx, func(ctx context.Context) error { return m.store.WriteChild(ctx, id, w) }); err != nil {
			m.log.Error("closing an interrupted epoch failed; the next start tries again", "agent_id", id, "err", err)
			continue
		}
		m.announce(h, n)
		m.log.Info("recovered a child left resident", "agent_id", id, "owner", c.Owner.ID, "closed_turn", len(closing) > 0)
	}
	m.reconcileWorktrees(ctx)
	return ctx.Err()
}

// unreadableText is the notice about an active child whose journal cannot
// be read.
func unreadableText(id string, err error) string {
	return fmt.Sprintf("Background subagent %s cannot be read from the session store, so how its last run ended is unknown (%s). "+
		"It lists as corrupt; stop the server and run `mcp-subagent doctor` to copy every readable child into a fresh store.",
		id, truncate.Bound(err.Error(), 300))
}
