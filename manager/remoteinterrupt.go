package manager

import (
	"context"

	"github.com/mcp-subagent/mcp-subagent/manager/interrupts"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Interrupts across instances sharing a store are package interrupts':
// these hand it the manager's store and a resident child.

// requestInterrupt records an interrupt of childID, which is not resident
// here, for the owner that holds it live (interrupts.Request).
func (m *Manager) requestInterrupt(ctx context.Context, caller seam.ParentRef, childID string) error {
	return interrupts.Request(ctx, m.store, m.owner, m.now(), caller, childID, m.log)
}

// watchInterrupts consumes the interrupt requests other instances record
// for this resident child, and adopts the follow-ups they admit to its
// stored inbox (adoptStored, cluster.go), until the activation is
// released (interrupts.Watch). Called by run with m.wg held for it.
func (a *activation) watchInterrupts() {
	defer a.m.wg.Done()
	interrupts.Watch(a.ctx, a.m.store, interrupts.Child{ID: a.hdr.ID, Released: a.released, Created: a.persist.Created(),
		Fence: a.persist.Fence, Interrupt: a.interrupt, Adopt: a.adoptStored}, storeTimeout, a.m.log)
}
