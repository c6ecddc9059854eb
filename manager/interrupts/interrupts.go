// Package interrupts owns interrupts across instances sharing a store
// (DESIGN §10). An interrupt of a child resident on another live owner is
// recorded in the store (seam.Interrupts) by the instance that received it
// (Request); the owner's activation watches its child (seam.Waker) and
// consumes the request, fenced by its claim, as a local interrupt (Watch).
// A store without both abilities keeps the old behaviour: such an
// interrupt is a no-op there.
//
// What it needs of the manager — the store, the resident child's fence,
// its interrupt — is passed in. It holds no lock.
package interrupts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Claims is what Request reads of the store; it records the request when
// the store also has seam.Interrupts.
type Claims interface {
	ClaimOf(ctx context.Context, childID string) (seam.Claim, bool, error)
}

// Request records an interrupt of childID, which is not resident at the
// instance of owner, when another owner holds it under a lease live at
// now. A child nobody holds live has no turn to stop: a no-op, as before.
func Request(ctx context.Context, store Claims, owner string, now time.Time, caller seam.ParentRef, childID string, log *slog.Logger) error {
	is, ok := store.(seam.Interrupts)
	if !ok {
		return nil
	}
	c, claimed, err := store.ClaimOf(ctx, childID)
	if err == nil && (!claimed || c.Owner.ID == owner || !c.Owner.Expires.After(now)) {
		return nil
	}
	if err == nil {
		err = is.RequestInterrupt(ctx, childID, seam.InterruptRequest{From: owner, Reason: "interrupted by " + caller.Address(), Epoch: c.Epoch})
	}
	if err != nil {
		return &seam.Error{Code: seam.CodePersistenceUnavailable, AgentID: childID, Err: err,
			Message: fmt.Sprintf("subagent %s runs on another instance and the interrupt could not be recorded in the session store (%v)", childID, err)}
	}
	log.Info("subagent interrupt requested from its owner", "agent_id", childID, "owner", c.Owner.ID, "by", caller.Address())
	return nil
}

// Child is the resident child a Watch serves.
type Child struct {
	ID string
	// Released is closed when the activation is released: the watch ends.
	Released <-chan struct{}
	// Created is closed once the child's record is committed: a new
	// child's fence exists from then on.
	Created <-chan struct{}
	// Fence is the child's claim's fence; nil when its record failed.
	Fence func() *seam.Fence
	// Interrupt interrupts the child's turn here.
	Interrupt func()
	// Adopt adopts the follow-ups other instances admitted to the child's
	// stored inbox.
	Adopt func()
}

// Watch consumes the interrupt requests other instances record for the
// resident child c, and adopts the follow-ups they admit to its stored
// inbox (c.Adopt), from the run's start until c is released or ctx ends:
// at once, then at every wake-up of the child (an admission, a request,
// or the store's reconnect, after which it rescans). A request of an
// earlier claim epoch was for a turn that is gone with its former owner:
// it is dropped. Each store read is bounded by timeout. A store without
// seam.Waker and seam.Interrupts is not watched.
func Watch(ctx context.Context, store any, c Child, timeout time.Duration, log *slog.Logger) {
	wk, ok := store.(seam.Waker)
	is, ok2 := store.(seam.Interrupts)
	if !ok || !ok2 {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // ends with ctx, at the latest when this function returns
		select {
		case <-c.Released:
			cancel()
		case <-ctx.Done():
		}
	}()
	wake, stop, err := wk.Watch(ctx, c.ID)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("cannot watch the store for interrupts of a resident child; an interrupt at another instance will not reach it", "agent_id", c.ID, "err", err)
		}
		return
	}
	defer stop()
	select {
	case <-c.Created:
	case <-ctx.Done():
		return
	}
	for {
		take(ctx, is, c, timeout, log)
		c.Adopt()
		select {
		case <-wake:
		case <-ctx.Done():
			return
		}
	}
}

// take consumes one interrupt request of c's, if the store holds one.
func take(ctx context.Context, is seam.Interrupts, c Child, timeout time.Duration, log *slog.Logger) {
	fence := c.Fence()
	if fence == nil {
		return // the record failed: the run stops the child
	}
	// Not cancelled with the activation: a child released mid-query would
	// otherwise cost pgx the connection, and the next write a new one.
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	r, ok, err := is.TakeInterrupt(tctx, c.ID, fence)
	switch {
	case err != nil && !errors.Is(err, seam.ErrOwned) && ctx.Err() == nil:
		log.Debug("reading the child's interrupt requests failed; retrying at the next wake-up", "agent_id", c.ID, "err", err)
	case !ok:
	case r.Epoch != 0 && r.Epoch < fence.Epoch:
		log.Info("dropped an interrupt request of the child's former owner's tenure", "agent_id", c.ID, "from", r.From, "epoch", r.Epoch)
	default:
		c.Interrupt()
		log.Info("subagent interrupted at another instance's request", "agent_id", c.ID, "from", r.From, "reason", r.Reason)
	}
}
