package manager

import (
	"fmt"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/llm"
)

// Recover finds the children a crash (or a shutdown) left active, closes
// their interrupted turns so they can be resumed, and announces each ended
// epoch to its parent: the closing events, the checkpoint, the clearing of
// the mark and the notice are one write, so a crash during recovery
// repeats it, never half of it. Call it once after the providers are
// registered.
//
// A child whose journal cannot be read keeps its mark (clearing it would
// forget the epoch for good; once the file is repaired, a later start
// closes and announces it) and lists as corrupt, and its parent gets a
// notice saying so, once per start while it stays unreadable.
func (m *Manager) Recover() error {
	if m.store == nil {
		return nil
	}
	ids, err := m.store.Active()
	if err != nil {
		return err
	}
	for _, id := range ids {
		h, err := m.store.Header(id)
		if err != nil {
			m.log.Error("an active child cannot be read; leaving it", "agent_id", id, "err", err)
			continue
		}
		events, err := m.store.Events(id)
		if err != nil {
			m.log.Error("an active child's journal cannot be read; keeping its mark", "agent_id", id, "err", err)
			m.noteUnreadable(id, err)
			n := Notice{Source: agent.SourceSettled, StopReason: agent.StopError, Text: unreadableText(id, err)}
			if err := m.deliver(h, n); err != nil {
				m.log.Error("telling the parent of an unreadable child failed", "agent_id", id, "err", err)
			}
			continue
		}
		all, closing := closeOpenTurn(events)
		last := lastOutcome(all)
		if last.StopReason == "" {
			// No turn of the epoch reached the journal: the crash stopped
			// it before it began (its prompt is still queued, and a resume
			// runs it).
			last.StopReason = agent.StopAborted
		}
		cp := Checkpoint{Seq: int64(len(all)), Mode: h.Mode, Label: h.Label, Usage: foldUsage(all), Stop: last.StopReason,
			Closing: truncate.Bound(last.Output, MaxClosingBytes)}
		n := stamp(h, Notice{Source: agent.SourceSettled, Text: settlementText(id, last), StopReason: last.StopReason})
		w := ChildWrite{Events: closing, Settle: &cp, Notify: &ParentNotice{To: h.Parent, Notice: n}}
		if err := m.storeWrite(func() error { return writeChild(m.store, id, w) }); err != nil {
			m.log.Error("closing an interrupted epoch failed; the next start tries again", "agent_id", id, "err", err)
			continue
		}
		m.announce(h, n)
		m.log.Info("recovered a child left active", "agent_id", id, "closed_turn", len(closing) > 0)
	}
	return nil
}

// unreadableText is the notice about an active child whose journal cannot
// be read.
func unreadableText(id string, err error) string {
	return fmt.Sprintf("Background subagent %s cannot be read from the session store, so how its last run ended is unknown (%s). "+
		"It lists as corrupt; stop the server and run `mcp-subagent doctor` to copy every readable child into a fresh store.",
		id, truncate.Bound(err.Error(), 300))
}

// lastOutcome reads how the journal's last turn ended and its last
// assistant message.
func lastOutcome(events []agent.Event) Result {
	var r Result
	for _, e := range events {
		switch {
		case e.Kind == agent.EventTurnStart:
			r.Output = ""
		case e.Kind == agent.EventMessage && e.Message != nil && e.Message.Role == llm.RoleAssistant && e.Message.Content != "":
			r.Output = e.Message.Content
		case e.Kind == agent.EventTurnEnd:
			r.StopReason, r.Diagnostic = e.StopReason, e.Diagnostic
		}
	}
	return r
}
