package manager

import (
	"context"

	"github.com/mcp-subagent/mcp-subagent/manager/authority"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Who may do what to whom is package authority's; every method that acts
// on a child for a caller asks it, through these names or directly.

// maySend authorises a message to h's child (authority.Send).
func maySend(caller seam.ParentRef, h seam.Header) error { return authority.Send(caller, h) }

// mayRead authorises reading h's child's transcript (authority.Read);
// live is its activation when it is resident here (nil otherwise).
func (m *Manager) mayRead(ctx context.Context, caller seam.ParentRef, h seam.Header, live *activation) error {
	return authority.Read(ctx, m.store, caller, h, chain(live))
}

// chain is a's live chain of owning parents, for authority; nil when a is
// nil (not resident here).
func chain(a *activation) authority.Chain {
	if a == nil {
		return nil
	}
	return func(yield func(string) bool) {
		for p := a.parent; p != nil && yield(p.hdr.ID); p = p.parent {
		}
	}
}
