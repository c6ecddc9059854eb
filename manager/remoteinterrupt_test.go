//go:build postgres

package manager_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
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

// A request recorded for an earlier tenure (the claim epoch its requester
// saw) is dropped by the owner that took the child over: that turn went
// with its former owner, and the new owner's turn runs to its end.
func TestAStaleInterruptRequestIsDropped(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		ctx := context.Background()
		root := seam.ParentRef{Principal: "p", Cwd: "/work"}
		var lag atomic.Int64
		a, pa := server(t, manager.Options{Store: st, OwnerID: "server-a", LeaseTTL: time.Minute, Clock: lagging(&lag)}, "A")
		notices := make(chan seam.Notice, 8)
		dropped := &logSignal{msg: "dropped an interrupt request", ch: make(chan struct{}, 1)}
		b, pb := server(t, manager.Options{Store: st, OwnerID: "server-b", LeaseTTL: 150 * time.Millisecond,
			OnNotice: func(_ string, n seam.Notice) { notices <- n }, Logger: slog.New(dropped)}, "B")
		s := startHeld(t, a, pa, root)
		if _, err := a.Followup(ctx, root, s.ChildID, "hold: second", false); err != nil {
			t.Fatal(err)
		}
		if err := b.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		expire(t, st, &lag)
		takenOver(t, notices, s.ChildID)
		select {
		case <-pb.holding:
		case <-time.After(30 * time.Second):
			t.Fatal("B did not run the queued follow-up")
		}
		// Meant for A's turn at epoch 1, recorded late.
		if err := st.(seam.Interrupts).RequestInterrupt(ctx, s.ChildID, seam.InterruptRequest{From: "server-c", Epoch: 1}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-dropped.ch:
		case <-time.After(30 * time.Second):
			t.Fatal("B did not consume the stale request")
		}
		close(pb.release)
		close(pa.release)
		select {
		case n := <-notices:
			if n.ChildID != s.ChildID || n.StopReason != agent.StopCompleted {
				t.Fatalf("B's settlement = %+v; want the follow-up completed, not interrupted", n)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("B did not settle the child")
		}
	})
}

// logSignal is a slog.Handler that signals ch when a record's message
// starts with msg.
type logSignal struct {
	msg string
	ch  chan struct{}
}

func (l *logSignal) Enabled(context.Context, slog.Level) bool { return true }
func (l *logSignal) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, l.msg) {
		select {
		case l.ch <- struct{}{}:
		default:
		}
	}
	return nil
}
func (l *logSignal) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logSignal) WithGroup(string) slog.Handler      { return l }
