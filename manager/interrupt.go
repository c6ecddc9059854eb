package manager

import (
	"errors"
	"fmt"

	"github.com/mcp-subagent/mcp-subagent/manager/authority"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Interrupt stops a child's current turn and parks the rest of its queue;
// its descendants keep running and the next message sent wakes the queue.
// The caller must be one of the child's ancestors: its direct parent, an
// agent above it, or the root principal of its tree (a principal is the
// ancestor of every child in its tree, so a root session can stop a
// runaway grandchild). A missing, one-shot or settled target is an
// accepted no-op; a store that cannot say whether the child exists is an
// error, not "missing".
func (m *Manager) Interrupt(caller seam.ParentRef, childID string) error {
	m.mu.Lock()
	a := m.live[childID]
	m.mu.Unlock()
	// Interrupt has no caller context: the lookups are the manager's own,
	// bounded.
	ctx, cancel := m.bg()
	defer cancel()
	if a == nil {
		if m.store == nil {
			return nil
		}
		h, err := m.store.Header(ctx, childID)
		if errors.Is(err, seam.ErrNotFound) {
			return nil // missing: a no-op
		}
		if err != nil {
			return &seam.Error{Code: seam.CodePersistenceUnavailable, AgentID: childID, Err: err,
				Message: fmt.Sprintf("subagent %s cannot be read from the session store (%v)", childID, err)}
		}
		// Settled: a no-op for those who may interrupt it, refused to the
		// rest; resident on another instance: recorded for its owner.
		if err := authority.Interrupt(ctx, m.store, caller, h, nil); err != nil {
			return err
		}
		return m.requestInterrupt(ctx, caller, childID) // remoteinterrupt.go
	}
	if err := authority.Interrupt(ctx, m.store, caller, a.hdr, chain(a)); err != nil {
		return err
	}
	a.interrupt()
	m.log.Info("subagent interrupted", "agent_id", childID, "by", caller.Address())
	return nil
}
