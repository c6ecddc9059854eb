package manager

import (
	"context"
	"errors"
	"fmt"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Who may do what to whom. Every public method that acts on a child for a
// caller asks one of these, and nothing else decides it; the refusals say
// what the caller may do instead (the README and the tool descriptions use
// the same words). A caller is a ParentRef the transport established: a
// root caller (AgentID empty) acts for its principal, an agent caller (an
// in-process child, or an external child through its callback token) for
// itself. Every refusal is UNAUTHORIZED; a store that cannot say whether
// the caller is an ancestor is PERSISTENCE_UNAVAILABLE, never a refusal.
//
//	send       the child's direct parent: the agent that started it, or a
//	           root caller of its principal for a root child (Followup)
//	interrupt  any ancestor: the root principal of its tree, its parent,
//	           an agent above it; never the child itself (Interrupt)
//	read       the same ancestors; a child does not read itself
//	           (Transcript, Watch)
//	answer     who may send to the child: its direct parent (Answer)
//	report     a resident continuable child, to its own parent only: the
//	           recipient is derived, never named (ReportFrom)
//	remove     the root principal of its tree, as a root caller: the
//	worktree   daemon's `worktree rm`, never an agent (RemoveWorktree)

// maySend authorises a message to h's child.
func maySend(caller seam.ParentRef, h seam.Header) error {
	if caller.Principal == h.Principal && h.Parent == caller.Address() {
		return nil
	}
	return refuse(h.ID, "you may send only to your direct children (a root session: its principal's root children); %s is not one of them", h.ID)
}

// mayAnswer authorises answering h's child's question: whoever may send
// to the child may answer it, and no one else.
func mayAnswer(caller seam.ParentRef, h seam.Header) error {
	if maySend(caller, h) == nil {
		return nil
	}
	return refuse(h.ID, "you may answer only your direct children's questions (a root session: its principal's root children's); %s is not one of them", h.ID)
}

// mayInterrupt authorises stopping h's child's turn; live is its
// activation when it is resident here (nil otherwise).
func (m *Manager) mayInterrupt(ctx context.Context, caller seam.ParentRef, h seam.Header, live *activation) error {
	if caller.AgentID != "" && caller.AgentID == h.ID {
		return refuse(h.ID, "an agent cannot interrupt itself (finish your turn instead); you may interrupt only your own descendants (your children and theirs)")
	}
	ok, err := m.isAncestor(ctx, caller, h, live)
	if err != nil || ok {
		return err
	}
	return refuse(h.ID, "you may interrupt only your own descendants (your children and theirs); %s is not one of them", h.ID)
}

// mayRead authorises reading h's child's transcript.
func (m *Manager) mayRead(ctx context.Context, caller seam.ParentRef, h seam.Header, live *activation) error {
	ok, err := m.isAncestor(ctx, caller, h, live)
	if err != nil || ok {
		return err
	}
	return refuse(h.ID, "you may read only your own descendants' transcripts; %s is not one of them", h.ID)
}

// mayReport authorises a report from caller, whose activation here is
// self (nil: not resident). Its recipient is self's parent.
func mayReport(caller seam.ParentRef, self *activation) error {
	if caller.AgentID != "" && self != nil && self.hdr.Principal == caller.Principal {
		return nil
	}
	return refuse("", "only a running continuable subagent may report, and only to its own parent; a root session has no parent to report to")
}

// mayRemoveWorktree authorises removing h's child's worktree.
func mayRemoveWorktree(caller seam.ParentRef, h seam.Header) error {
	if caller.AgentID == "" && caller.Principal != "" && caller.Principal == h.Principal {
		return nil
	}
	return refuse(h.ID, "you may remove only your own principal's subagents' worktrees, as a root caller (mcp-subagent worktree rm), never as an agent; %s is not one of them", h.ID)
}

func refuse(id, format string, args ...any) error {
	return &seam.Error{Code: seam.CodeUnauthorized, AgentID: id, Message: fmt.Sprintf(format, args...)}
}

// isAncestor reports whether caller is an ancestor of h's child: the root
// principal of its tree, or an agent above it in that tree. The live
// chain (live's owning parents) answers first without the store; an
// ancestor whose child in between is not resident has no live chain, so
// the stored headers decide.
func (m *Manager) isAncestor(ctx context.Context, caller seam.ParentRef, h seam.Header, live *activation) (bool, error) {
	target := h.ID
	switch {
	case caller.Principal == "" || caller.Principal != h.Principal:
		return false, nil
	case caller.AgentID == "":
		return true, nil
	case caller.AgentID == h.ID:
		return false, nil
	case h.Parent == caller.AgentID:
		return true, nil
	}
	if live != nil {
		for p := live.parent; p != nil; p = p.parent {
			if p.hdr.ID == caller.AgentID {
				return true, nil
			}
		}
	}
	if m.store == nil {
		return false, nil
	}
	for i := 0; i < 64 && h.Parent != "" && h.Parent != seam.PrincipalAddress(h.Principal); i++ {
		if h.Parent == caller.AgentID {
			return true, nil
		}
		next, err := m.store.Header(ctx, h.Parent)
		if errors.Is(err, seam.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, &seam.Error{Code: seam.CodePersistenceUnavailable, AgentID: target, Err: err,
				Message: fmt.Sprintf("the ancestry of subagent %s cannot be read from the session store (%v)", target, err)}
		}
		h = next
	}
	return false, nil
}
