package manager

import (
	"context"
	"errors"
	"fmt"

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
	if a == nil {
		if m.store == nil {
			return nil
		}
		// Interrupt has no caller context: the lookup is the manager's own,
		// bounded.
		ctx, cancel := m.bg()
		defer cancel()
		h, err := m.store.Header(ctx, childID)
		if errors.Is(err, seam.ErrNotFound) {
			return nil // missing: a no-op
		}
		if err != nil {
			return &seam.Error{Code: seam.CodePersistenceUnavailable, AgentID: childID, Err: err,
				Message: fmt.Sprintf("subagent %s cannot be read from the session store (%v)", childID, err)}
		}
		if !isRootOf(caller, h) && h.Parent != caller.Address() {
			ok, err := m.isStoredAncestor(ctx, caller.AgentID, h)
			if err != nil {
				return &seam.Error{Code: seam.CodePersistenceUnavailable, AgentID: childID, Err: err,
					Message: fmt.Sprintf("the ancestry of subagent %s cannot be read from the session store (%v)", childID, err)}
			}
			if !ok {
				return unauthorizedInterrupt(childID)
			}
		}
		return nil // settled: a no-op
	}
	if caller.AgentID == childID {
		return &seam.Error{Code: seam.CodeUnauthorized, AgentID: childID, Message: "an agent cannot interrupt itself; finish your turn instead"}
	}
	if !isRootOf(caller, a.hdr) && a.hdr.Parent != caller.Address() && !isLiveAncestor(a, caller.AgentID) {
		// An ancestor whose child in between is not resident has no live
		// chain to the target: the stored headers say whether it is one,
		// so the refusal is given only when it is true.
		if m.store == nil {
			return unauthorizedInterrupt(childID)
		}
		ctx, cancel := m.bg()
		ok, err := m.isStoredAncestor(ctx, caller.AgentID, a.hdr)
		cancel()
		if err != nil {
			return &seam.Error{Code: seam.CodePersistenceUnavailable, AgentID: childID, Err: err,
				Message: fmt.Sprintf("the ancestry of subagent %s cannot be read from the session store (%v)", childID, err)}
		}
		if !ok {
			return unauthorizedInterrupt(childID)
		}
	}
	a.interrupt()
	m.log.Info("subagent interrupted", "agent_id", childID, "by", caller.Address())
	return nil
}

func unauthorizedInterrupt(id string) error {
	return &seam.Error{Code: seam.CodeUnauthorized, AgentID: id,
		Message: fmt.Sprintf("you may interrupt only your own descendants (your children and theirs); %s is not one of them", id)}
}

// isRootOf reports whether a root caller is the principal of the tree h
// belongs to, and so an ancestor of h.
func isRootOf(caller seam.ParentRef, h seam.Header) bool {
	return caller.AgentID == "" && caller.Principal != "" && h.Principal == caller.Principal
}

func isLiveAncestor(a *activation, agentID string) bool {
	if agentID == "" {
		return false
	}
	for p := a.parent; p != nil; p = p.parent {
		if p.hdr.ID == agentID {
			return true
		}
	}
	return false
}

func (m *Manager) isStoredAncestor(ctx context.Context, agentID string, h seam.Header) (bool, error) {
	if agentID == "" {
		return false, nil
	}
	for i := 0; i < 64 && h.Parent != "" && h.Parent != seam.PrincipalAddress(h.Principal); i++ {
		if h.Parent == agentID {
			return true, nil
		}
		next, err := m.store.Header(ctx, h.Parent)
		if errors.Is(err, seam.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		h = next
	}
	return false, nil
}
