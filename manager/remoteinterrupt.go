package manager

import (
	"context"
	"errors"
	"fmt"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Interrupts across instances sharing a store (DESIGN §10). An interrupt
// of a child resident on another live owner is recorded in the store
// (seam.Interrupts) by the instance that received it; the owner's
// activation watches its child (seam.Waker) and consumes the request,
// fenced by its claim, as a local Interrupt. A store without both
// abilities keeps the old behaviour: such an interrupt is a no-op here.

// requestInterrupt records an interrupt of childID, which is not resident
// here, when another owner holds it under a live lease. A child nobody
// holds live has no turn to stop: a no-op, as before.
func (m *Manager) requestInterrupt(ctx context.Context, caller seam.ParentRef, childID string) error {
	is, ok := m.store.(seam.Interrupts)
	if !ok {
		return nil
	}
	c, claimed, err := m.store.ClaimOf(ctx, childID)
	if err == nil && (!claimed || c.Owner.ID == m.owner || !c.Owner.Expires.After(m.now())) {
		return nil
	}
	if err == nil {
		err = is.RequestInterrupt(ctx, childID, seam.InterruptRequest{From: m.owner, Reason: "interrupted by " + caller.Address(), Epoch: c.Epoch})
	}
	if err != nil {
		return &seam.Error{Code: seam.CodePersistenceUnavailable, AgentID: childID, Err: err,
			Message: fmt.Sprintf("subagent %s runs on another instance and the interrupt could not be recorded in the session store (%v)", childID, err)}
	}
	m.log.Info("subagent interrupt requested from its owner", "agent_id", childID, "owner", c.Owner.ID, "by", caller.Address())
	return nil
}

// watchInterrupts consumes the interrupt requests other instances record
// for this resident child, and adopts the follow-ups they admit to its
// stored inbox, from the run's start until the activation is released: at
// once, then at every wake-up of the child (an admission, a request, or
// the store's reconnect, after which it rescans). A request
// of an earlier claim epoch was for a turn that is gone with its former
// owner: it is dropped. Called by run with m.wg held for it.
func (a *activation) watchInterrupts() {
	defer a.m.wg.Done()
	wk, ok := a.m.store.(seam.Waker)
	is, ok2 := a.m.store.(seam.Interrupts)
	if !ok || !ok2 {
		return
	}
	ctx, cancel := context.WithCancel(a.ctx)
	defer cancel()
	go func() { // ends with ctx, at the latest when this function returns
		select {
		case <-a.released:
			cancel()
		case <-ctx.Done():
		}
	}()
	wake, stop, err := wk.Watch(ctx, a.hdr.ID)
	if err != nil {
		if ctx.Err() == nil {
			a.m.log.Warn("cannot watch the store for interrupts of a resident child; an interrupt at another instance will not reach it", "agent_id", a.hdr.ID, "err", err)
		}
		return
	}
	defer stop()
	// A new child's fence exists once its record is committed.
	select {
	case <-a.persist.Created():
	case <-ctx.Done():
		return
	}
	for {
		a.takeInterrupt(ctx, is)
		a.adoptStored() // cluster.go: follow-ups admitted at other instances
		select {
		case <-wake:
		case <-ctx.Done():
			return
		}
	}
}

func (a *activation) takeInterrupt(ctx context.Context, is seam.Interrupts) {
	fence := a.persist.Fence()
	if fence == nil {
		return // the record failed: the run stops the child
	}
	// Not cancelled with the activation: a child released mid-query would
	// otherwise cost pgx the connection, and the next write a new one.
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	r, ok, err := is.TakeInterrupt(tctx, a.hdr.ID, fence)
	switch {
	case err != nil && !errors.Is(err, seam.ErrOwned) && ctx.Err() == nil:
		a.m.log.Debug("reading the child's interrupt requests failed; retrying at the next wake-up", "agent_id", a.hdr.ID, "err", err)
	case !ok:
	case r.Epoch != 0 && r.Epoch < fence.Epoch:
		a.m.log.Info("dropped an interrupt request of the child's former owner's tenure", "agent_id", a.hdr.ID, "from", r.From, "epoch", r.Epoch)
	default:
		a.interrupt()
		a.m.log.Info("subagent interrupted at another instance's request", "agent_id", a.hdr.ID, "from", r.From, "reason", r.Reason)
	}
}
