// Package authority owns who may do what to whom. Every public method of
// the manager that acts on a child for a caller asks one of these, and
// nothing else decides it; the refusals say what the caller may do instead
// (the README and the tool descriptions use the same words). A caller is a
// ParentRef the transport established: a root caller (AgentID empty) acts
// for its principal, an agent caller (an in-process child, or an external
// child through its callback token) for itself. Every refusal is
// UNAUTHORIZED; a store that cannot say whether the caller is an ancestor
// is PERSISTENCE_UNAVAILABLE, never a refusal.
//
//	send       the child's direct parent: the agent that started it, or a
//	           root caller of its principal for a root child (Send)
//	interrupt  any ancestor: the root principal of its tree, its parent,
//	           an agent above it; never the child itself (Interrupt)
//	read       the same ancestors; a child does not read itself (Read)
//	answer     who may send to the child: its direct parent (Answer)
//	report     a resident continuable child, to its own parent only: the
//	           recipient is derived, never named (Report)
//	remove     the root principal of its tree, as a root caller: the
//	worktree   daemon's `worktree rm`, never an agent (RemoveWorktree)
//
// What the ancestry check needs of the manager is passed in: the stored
// headers (a Store) and a resident child's live chain of owning parents
// (a Chain). It holds no lock.
package authority

import (
	"context"
	"errors"
	"fmt"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Store is what the ancestry check reads of the session store.
type Store interface {
	Header(ctx context.Context, id string) (seam.Header, error)
}

// Chain yields the ids of a resident child's owning parents, nearest
// first; nil for a child not resident here.
type Chain func(yield func(id string) bool)

// Send authorises a message to h's child.
func Send(caller seam.ParentRef, h seam.Header) error {
	if caller.Principal == h.Principal && h.Parent == caller.Address() {
		return nil
	}
	return refuse(h.ID, "you may send only to your direct children (a root session: its principal's root children); %s is not one of them", h.ID)
}

// Answer authorises answering h's child's question: whoever may send to
// the child may answer it, and no one else.
func Answer(caller seam.ParentRef, h seam.Header) error {
	if Send(caller, h) == nil {
		return nil
	}
	return refuse(h.ID, "you may answer only your direct children's questions (a root session: its principal's root children's); %s is not one of them", h.ID)
}

// Interrupt authorises stopping h's child's turn; live is its chain when
// it is resident here (nil otherwise), store (nil: none) the stored
// ancestry.
func Interrupt(ctx context.Context, store Store, caller seam.ParentRef, h seam.Header, live Chain) error {
	if caller.AgentID != "" && caller.AgentID == h.ID {
		return refuse(h.ID, "an agent cannot interrupt itself (finish your turn instead); you may interrupt only your own descendants (your children and theirs)")
	}
	ok, err := isAncestor(ctx, store, caller, h, live)
	if err != nil || ok {
		return err
	}
	return refuse(h.ID, "you may interrupt only your own descendants (your children and theirs); %s is not one of them", h.ID)
}

// Read authorises reading h's child's transcript.
func Read(ctx context.Context, store Store, caller seam.ParentRef, h seam.Header, live Chain) error {
	ok, err := isAncestor(ctx, store, caller, h, live)
	if err != nil || ok {
		return err
	}
	return refuse(h.ID, "you may read only your own descendants' transcripts; %s is not one of them", h.ID)
}

// Report authorises a report from caller, whose resident child's header
// is self (nil: not resident). Its recipient is self's parent.
func Report(caller seam.ParentRef, self *seam.Header) error {
	if caller.AgentID != "" && self != nil && self.Principal == caller.Principal {
		return nil
	}
	return refuse("", "only a running continuable subagent may report, and only to its own parent; a root session has no parent to report to")
}

// RemoveWorktree authorises removing h's child's worktree.
func RemoveWorktree(caller seam.ParentRef, h seam.Header) error {
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
// chain answers first without the store; an ancestor whose child in
// between is not resident has no live chain, so the stored headers decide.
func isAncestor(ctx context.Context, store Store, caller seam.ParentRef, h seam.Header, live Chain) (bool, error) {
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
		for id := range live {
			if id == caller.AgentID {
				return true, nil
			}
		}
	}
	if store == nil {
		return false, nil
	}
	for i := 0; i < 64 && h.Parent != "" && h.Parent != seam.PrincipalAddress(h.Principal); i++ {
		if h.Parent == caller.AgentID {
			return true, nil
		}
		next, err := store.Header(ctx, h.Parent)
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
