package manager

import (
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// release removes a from the manager and from its owning parent. A notice
// (when given) goes into the owning parent's inbox in the same critical
// section that drops the ownership, so the parent can never settle between
// the two and miss it. stored is the notice as the settlement already
// committed it (nil: not stored yet, so it is stored here).
func (m *Manager) release(a *activation, notice *inboxMsg, stored *seam.ParentNotice) {
	delivered := false
	if pa := a.parent; pa != nil {
		pa.mu.Lock()
		if notice != nil && !pa.settling {
			pa.inbox = append(pa.inbox, *notice)
			pa.seen[notice.id] = true
			if stored == nil || !stored.Inbox {
				pa.persist.Enqueue(notice.queued())
			}
			pa.parked = false
			delivered = true
		}
		delete(pa.owned, a.hdr.ID)
		pa.signal()
		pa.mu.Unlock()
		if delivered {
			m.signalAddr(pa.hdr.ID)
		}
	}
	if notice != nil && !delivered {
		switch {
		case stored == nil:
			if err := m.deliver(a.hdr, seam.Notice{Source: notice.source, Text: notice.text, StopReason: notice.stop}); err != nil {
				m.log.Error("a settlement notice could not be stored; the next start announces the epoch again", "child", a.hdr.ID, "err", err)
			}
		case stored.Inbox:
			// In the stopped parent's stored inbox: its next resume runs it.
			m.signalAddr(stored.To)
		default:
			m.announce(a.hdr, stored.Notice)
		}
	}
	m.mu.Lock()
	if m.live[a.hdr.ID] == a {
		delete(m.live, a.hdr.ID)
	}
	m.mu.Unlock()
}

// settleNotice is how a settlement's notice is committed with it: into the
// owning parent's stored inbox, or queued under the parent's address. Nil
// when there is no notice, or when the parent is a live agent that does
// not own the child (then deliver admits it after the settlement).
func (m *Manager) settleNotice(a *activation, n *inboxMsg) *seam.ParentNotice {
	if n == nil {
		return nil
	}
	if pa := a.parent; pa != nil {
		pa.mu.Lock()
		settling := pa.settling
		if !settling {
			// release puts it in the parent's inbox: the parent must not
			// adopt it from its stored inbox too once it is committed.
			pa.seen[n.id] = true
		}
		pa.mu.Unlock()
		if !settling {
			return &seam.ParentNotice{To: pa.hdr.ID, Inbox: true, Message: n.queued()}
		}
	} else {
		m.mu.Lock()
		pa := m.live[a.hdr.Parent]
		m.mu.Unlock()
		if pa != nil {
			return nil
		}
	}
	return &seam.ParentNotice{To: a.hdr.Parent, Notice: stamp(a.hdr, seam.Notice{Source: n.source, Text: n.text, StopReason: n.stop})}
}

// flush drains the child's journal writer and writes its projection
// checkpoint; settled also revokes its claim and commits notify, in the
// same commit. A failed settlement write stops the
// child (persistFailed) and is returned; a failed checkpoint at shutdown is
// logged: a later list folds the journal instead.
func (m *Manager) flush(a *activation, settled bool, notify *seam.ParentNotice) error {
	a.unsubscribe()
	a.mu.Lock()
	cp := seam.Checkpoint{Seq: int64(a.driver.Journal().Len()), Mode: a.hdr.Mode, Label: a.hdr.Label, Usage: a.usage, Stop: a.last.StopReason,
		Closing: truncate.Bound(a.last.Output, seam.MaxClosingBytes)}
	a.mu.Unlock()
	var err error
	if settled {
		err = a.persist.Flush(&cp, notify)
	} else if err = a.persist.Flush(nil, nil); err == nil {
		// At shutdown: m.ctx is cancelled by now, and the checkpoint is
		// still worth writing.
		ctx, cancel := m.bg()
		defer cancel()
		if err := m.store.SetCheckpoint(ctx, a.hdr.ID, cp); err != nil {
			m.log.Warn("writing a child's checkpoint failed", "agent_id", a.hdr.ID, "err", err)
		}
	}
	a.persist.Close()
	return err
}
