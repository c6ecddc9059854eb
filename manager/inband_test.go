package manager_test

import (
	"context"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// A turn's outcome reaches the caller once, wherever the caller is: a
// caller that waited and got it in band is issued no settlement notice for
// it; a caller that gave up waiting gets the notice. At one instance (the
// child's owner) and at another, through the store (storedWait). The
// postgres tier runs the same on PostgreSQL (inband_pg_test.go).

func TestAnOutcomeInBandIsNotAlsoANotice(t *testing.T) {
	inBandCases(t, func(*testing.T) seam.Store { return memstore.New() }, 40)
}

// inBandCases runs each case on a new store open returns, shared by two
// managers: the caller at the one that does not hold the child, and at
// the one that does; races is how many rounds the racing case runs.
func inBandCases(t *testing.T, open func(t *testing.T) seam.Store, races int) {
	for name, at := range map[string]func(a, b *manager.Manager) *manager.Manager{
		"at another instance": func(_, b *manager.Manager) *manager.Manager { return b },
		"at the owner":        func(a, _ *manager.Manager) *manager.Manager { return a },
	} {
		t.Run(name, func(t *testing.T) {
			t.Run("waited", func(t *testing.T) { waitedSendIsInBand(t, open(t), at) })
			t.Run("given up", func(t *testing.T) { givenUpSendIsNoticed(t, open(t), at) })
			t.Run("awaited after the send, as a task", func(t *testing.T) { awaitedLaterIsInBand(t, open(t), at, false) })
			t.Run("awaited after the send, given up", func(t *testing.T) { awaitedLaterIsInBand(t, open(t), at, true) })
			t.Run("given up as the turn ends", func(t *testing.T) {
				for i := range races {
					givingUpRacesTheTurnEnd(t, open(t), at, time.Duration(i%8)*250*time.Microsecond)
				}
			})
		})
	}
}

// waitedSendIsInBand: a send whose caller, at the manager at picks, waits
// for the outcome gets it, and the principal is then issued no
// settlement notice of the child.
func waitedSendIsInBand(t *testing.T, st seam.Store, at func(a, b *manager.Manager) *manager.Manager) {
	ctx := context.Background()
	root, b, pa, s, sender := heldAtA(t, st, at) // resident at A while the send is made
	sent := followup(t, sender, b, root, s.ChildID)
	close(pa.release)
	waitFor(t, s, "A's first turn")
	if res := waitFor(t, sent, "the waited send"); res.Output != "A done: second" {
		t.Fatalf("the waited send = %+v; want A's answer to it", res)
	}
	// The settlement commits its notice, if any, with the revoked claim.
	if err := waitSettled(ctx, st, s.ChildID); err != nil {
		t.Fatal(err)
	}
	if n := settledNotices(sender, s.ChildID); len(n) != 0 {
		t.Fatalf("the principal was also issued %d settlement notice(s) of the turn its caller got in band: %+v", len(n), n)
	}
}

// givenUpSendIsNoticed: a send whose caller's wait runs out before the
// turn ends yields exactly one settlement notice, with the turn's answer.
func givenUpSendIsNoticed(t *testing.T, st seam.Store, at func(a, b *manager.Manager) *manager.Manager) {
	ctx := context.Background()
	root, b, pa, s, sender := heldAtA(t, st, at)
	sent := followup(t, sender, b, root, s.ChildID)
	// The send's turn is queued behind the held one, which ends only once
	// released: the wait runs out first, whenever its timer fires.
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	res, ok := sent.Wait(wctx)
	cancel()
	if ok {
		t.Fatalf("the wait ended with an outcome %+v before the turn could end", res)
	}
	close(pa.release)
	waitFor(t, s, "A's first turn")
	if err := waitSettled(ctx, st, s.ChildID); err != nil {
		t.Fatal(err)
	}
	n := settledNotices(sender, s.ChildID)
	if len(n) != 1 || n[0].StopReason != agent.StopCompleted {
		t.Fatalf("settlement notices of the child = %+v; want exactly one, of the completed turn whose wait ran out", n)
	}
	if again := settledNotices(sender, s.ChildID); len(again) != 0 {
		t.Fatalf("a second take found %+v; want none", again)
	}
}

// awaitedLaterIsInBand: a send made without a wait by a caller that then
// waits on its turn (FollowupAwaited, AwaitSent: a durable MCP task) gets
// the outcome, and the principal is then issued no settlement notice of
// it; one whose wait runs out (giveUp) gets exactly one notice instead.
func awaitedLaterIsInBand(t *testing.T, st seam.Store, at func(a, b *manager.Manager) *manager.Manager, giveUp bool) {
	ctx := context.Background()
	root, b, pa, s, sender := heldAtA(t, st, at)
	sent, err := sender.FollowupAwaited(ctx, root, s.ChildID, "second", nil)
	if err != nil {
		t.Fatal(err)
	}
	if forwarded := sent.Route == manager.RouteForwarded; forwarded != (sender == b) {
		t.Fatalf("the send's route is %q; want it forwarded only from the instance that does not hold the child", sent.Route)
	}
	turn := sender.AwaitSent(sent, nil)
	want := 0
	if giveUp {
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		if res, ok := turn.Wait(wctx); ok {
			t.Fatalf("the wait ended with an outcome %+v before the turn could end", res)
		}
		cancel()
		want = 1
	}
	close(pa.release)
	waitFor(t, s, "A's first turn")
	if !giveUp {
		if res := waitFor(t, turn, "the awaited send"); res.Output != "A done: second" {
			t.Fatalf("the awaited send = %+v; want A's answer to it", res)
		}
	}
	if err := waitSettled(ctx, st, s.ChildID); err != nil {
		t.Fatal(err)
	}
	if n := settledNotices(sender, s.ChildID); len(n) != want {
		t.Fatalf("settlement notices of the child = %+v; want %d (the outcome went in band: %v)", n, want, !giveUp)
	}
}

// heldAtA starts managers A and B on st and a child resident at A, its
// first turn held (pa), and returns the principal's root, B, and the
// manager at picks as the sender.
func heldAtA(t *testing.T, st seam.Store, at func(a, b *manager.Manager) *manager.Manager) (seam.ParentRef, *manager.Manager, *holdProvider, *manager.Started, *manager.Manager) {
	t.Helper()
	root := seam.ParentRef{Principal: "p", Cwd: "/work"}
	a, pa := server(t, manager.Options{Store: st, OwnerID: "server-a", LeaseTTL: time.Minute}, "A")
	b, _ := server(t, manager.Options{Store: st, OwnerID: "server-b", LeaseTTL: time.Minute}, "B")
	return root, b, pa, startHeld(t, a, pa, root), at(a, b)
}

// followup sends "second" to child id at sender, waited for, and checks
// it is forwarded if and only if the sender is b (not the owner).
func followup(t *testing.T, sender, b *manager.Manager, root seam.ParentRef, id string) *manager.Sent {
	t.Helper()
	sent, err := sender.Followup(context.Background(), root, id, "second", true)
	if err != nil {
		t.Fatal(err)
	}
	if forwarded := sent.Route == manager.RouteForwarded; forwarded != (sender == b) {
		t.Fatalf("the send's route is %q; want it forwarded only from the instance that does not hold the child", sent.Route)
	}
	return sent
}

// givingUpRacesTheTurnEnd: a wait that runs out (after d) about when the
// turn ends, released at once, never loses the outcome: a caller that did
// not get it in band is issued the settlement notice, and one that did is
// issued at most one (a repeat only in the race the protocol allows).
func givingUpRacesTheTurnEnd(t *testing.T, st seam.Store, at func(a, b *manager.Manager) *manager.Manager, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	root, b, pa, s, sender := heldAtA(t, st, at)
	sent := followup(t, sender, b, root, s.ChildID)
	close(pa.release)
	wctx, cancel := context.WithTimeout(ctx, d)
	res, inBand := sent.Wait(wctx)
	cancel()
	waitFor(t, s, "A's first turn")
	if err := waitSettled(ctx, st, s.ChildID); err != nil {
		t.Fatal(err)
	}
	n := settledNotices(sender, s.ChildID)
	switch {
	case inBand && res.Output != "A done: second":
		t.Fatalf("the wait (%s) got %+v; want A's answer", d, res)
	case !inBand && len(n) != 1:
		t.Fatalf("the wait (%s) ran out before the outcome and the principal was issued %d settlement notices: %+v; want exactly one", d, len(n), n)
	case len(n) > 1:
		t.Fatalf("the wait (%s) got the outcome and the principal was issued %d settlement notices; want at most one", d, len(n))
	}
}

// settledNotices takes the principal "p"'s pending notices at m, as the
// edge does, and returns the settlement notices of child id.
func settledNotices(m *manager.Manager, id string) []seam.Notice {
	var out []seam.Notice
	for _, n := range m.TakeNotices("p", "") {
		if n.ChildID == id && n.Source == agent.SourceSettled {
			out = append(out, n)
		}
	}
	return out
}
