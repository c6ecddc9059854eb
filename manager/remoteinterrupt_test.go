package manager_test

import (
	"context"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// An interrupt received by an instance where the child is not resident
// reaches the instance that owns it: recorded in the store, the owner is
// woken and stops the turn, and the queue behind it is parked as after a
// local interrupt.
func TestInterruptAtAnotherInstance(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		ctx := context.Background()
		root := seam.ParentRef{Principal: "p", Cwd: "/work"}
		a, pa := server(t, manager.Options{Store: st, OwnerID: "server-a", LeaseTTL: time.Minute}, "A")
		b, _ := server(t, manager.Options{Store: st, OwnerID: "server-b", LeaseTTL: time.Minute}, "B")
		s := startHeld(t, a, pa, root)
		if err := b.Interrupt(root, s.ChildID); err != nil {
			t.Fatalf("the interrupt at B = %v", err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res, ok := s.Wait(wctx)
		if !ok || res.StopReason != agent.StopAborted {
			t.Fatalf("A's turn after the interrupt at B = %+v, %v; want it aborted", res, ok)
		}
		// The request was consumed: none is left for a later turn.
		if r, ok, err := st.(seam.Interrupts).TakeInterrupt(ctx, s.ChildID, nil); err != nil || ok {
			t.Errorf("a request left in the store after A consumed it: %+v, %v, %v", r, ok, err)
		}
		// Someone outside the tree is refused at B as at A.
		if err := b.Interrupt(seam.ParentRef{Principal: "other", Cwd: "/work"}, s.ChildID); err == nil {
			t.Error("an interrupt by another principal at B was accepted")
		}
	})
}
