//go:build postgres

package manager_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/pgtest"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/persist/pgstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// pgtest's shared server is removed when the package's tests end.
func TestMain(m *testing.M) { pgtest.Main(m) }

// onSharedStores runs test on each store two managers (two servers) share
// in the takeover tests: the in-memory one, and PostgreSQL, whose own
// clock judges the leases.
func onSharedStores(t *testing.T, test func(t *testing.T, st seam.Store)) {
	for name, open := range map[string]func(t *testing.T) seam.Store{
		"memstore": func(*testing.T) seam.Store { return memstore.New() },
		"pgstore":  openPG,
	} {
		t.Run(name, func(t *testing.T) { test(t, open(t)) })
	}
}

// openPG opens a new database of the shared PostgreSQL server, closed
// when the test ends.
func openPG(t *testing.T) seam.Store {
	s, err := pgstore.Open(context.Background(), pgtest.Shared(t).DSN(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// lockedBuffer collects a manager's log lines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// expire ends server-a's lease (as a pause past it does): its clock falls
// an hour behind, and its claims expire now.
func expire(t *testing.T, st seam.Store, lag *atomic.Int64) {
	t.Helper()
	lag.Store(int64(time.Hour))
	if err := st.Renew(context.Background(), seam.Owner{ID: "server-a", Expires: time.Now().Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
}

// journaled waits until the store holds input in id's journal: the held
// turn's start is committed (A's writer lingers over it, and holding says
// only that the driver began it), so a takeover cuts off that turn, not
// just its admission, which B would run itself.
func journaled(t *testing.T, st seam.Store, id, input string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		events, err := st.Events(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			if e.Kind == agent.EventMessage && e.Message != nil && e.Message.Role == seam.RoleUser && e.Message.Content == input {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the turn of %q was not journaled within 30s:\n%s", input, dump(events))
		}
		time.Sleep(5 * time.Millisecond) // polling the store: no signal tells of another writer's commit
	}
}

// takenOver waits for B's announcement of the cut-off epoch of id.
func takenOver(t *testing.T, notices <-chan seam.Notice, id string) {
	t.Helper()
	select {
	case n := <-notices:
		if n.ChildID != id || n.StopReason != agent.StopAborted {
			t.Fatalf("B announced %+v; want the cut-off epoch of %s, aborted", n, id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("B did not take the child over within 30s of A's lease running out")
	}
}

// Two servers share a store. A's child is mid-turn, with a follow-up
// queued behind it, when A's lease runs out (A is paused past it: its clock
// lags, so its renewals expire at once). B's sweep, run at its lease
// renewals, takes the child over: it closes the cut-off turn as after a
// crash (announced, not re-run), bumps the epoch, and runs the queued
// follow-up. When A wakes, its turn's write is refused by the fence: none
// of it reaches the journal, A logs that it lost the claim, and A's caller
// waiting on the turn gets an error saying so, not A's answer. The
// transcript is the cut-off turn, then B's turn: none interleaved or run
// twice.
func TestTakeoverAfterLeaseFencesTheFormerOwner(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		ctx := context.Background()
		root := seam.ParentRef{Principal: "p", Cwd: "/work"}

		var lag atomic.Int64
		logA := &lockedBuffer{}
		a, pa := server(t, manager.Options{Store: st, OwnerID: "server-a", LeaseTTL: time.Minute, Clock: lagging(&lag),
			Logger: slog.New(slog.NewTextHandler(logA, &slog.HandlerOptions{Level: slog.LevelWarn}))}, "A")
		notices := make(chan seam.Notice, 8)
		b, pb := server(t, manager.Options{Store: st, OwnerID: "server-b", LeaseTTL: 150 * time.Millisecond,
			OnNotice: func(_ string, n seam.Notice) { notices <- n }}, "B")

		s := startHeld(t, a, pa, root)
		// Queued behind the turn in flight; its id is handed out only
		// once committed, and so is everything queued before it (the
		// turn's start).
		if _, err := a.Followup(ctx, root, s.ChildID, "hold: second", false); err != nil {
			t.Fatal(err)
		}
		before, ok, err := st.ClaimOf(ctx, s.ChildID)
		if err != nil || !ok || before.Owner.ID != "server-a" {
			t.Fatalf("ClaimOf before the takeover = %+v, %v, %v; want server-a's claim", before, ok, err)
		}
		if err := b.Recover(ctx); err != nil { // B sweeps from now on, at each renewal
			t.Fatal(err)
		}

		expire(t, st, &lag) // A is paused past its lease
		takenOver(t, notices, s.ChildID)
		// B runs the queued follow-up next: it holds there.
		select {
		case in := <-pb.holding:
			if in != "hold: second" {
				t.Fatalf("B ran %q; want the queued follow-up", in)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("B did not run the queued follow-up")
		}
		after, ok, err := st.ClaimOf(ctx, s.ChildID)
		if err != nil || !ok || after.Owner.ID != "server-b" || after.Epoch <= before.Epoch {
			t.Fatalf("ClaimOf after the takeover = %+v, %v, %v; want server-b's claim at an epoch past %d", after, ok, err, before.Epoch)
		}

		// A wakes: its turn ends, and its write is refused.
		close(pa.release)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res, ok := s.Wait(wctx)
		if !ok {
			t.Fatal("A's waiting caller got no answer")
		}
		if res.StopReason != agent.StopError || !strings.Contains(res.Diagnostic, "lost the claim") || res.Output != "" {
			t.Fatalf("A's caller got %+v; want an error saying A lost the claim, without A's stale answer", res)
		}
		if want := "lost the claim of child " + s.ChildID + " to another owner"; !strings.Contains(logA.String(), want) {
			t.Errorf("A's log does not say %q:\n%s", want, logA.String())
		}

		close(pb.release)
		select {
		case n := <-notices:
			if n.ChildID != s.ChildID || n.StopReason != agent.StopCompleted || !strings.Contains(n.Text, "B done: hold: second") {
				t.Fatalf("B's settlement = %+v; want the follow-up completed by B", n)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("B did not settle the child")
		}

		checkStoredTranscript(t, st, s.ChildID, []string{"hold: first", "hold: second"}, "A done:")
	})
}

// checkStoredTranscript reads the child's stored journal and checks it
// (checkTranscript).
func checkStoredTranscript(t *testing.T, st seam.Store, id string, inputs []string, stale string) {
	t.Helper()
	events, err := st.Events(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	checkTranscript(t, events, inputs, stale)
}

// checkTranscript asserts the journal holds exactly the turns of inputs,
// in order, each started and ended once before the next starts, and no
// message containing stale.
func checkTranscript(t *testing.T, events []agent.Event, inputs []string, stale string) {
	t.Helper()
	var got []string
	open := false
	turns := map[int]bool{}
	for _, e := range events {
		switch e.Kind {
		case agent.EventTurnStart:
			if open || turns[e.Turn] {
				t.Fatalf("turn %d starts inside another or twice:\n%s", e.Turn, dump(events))
			}
			open, turns[e.Turn] = true, true
		case agent.EventTurnEnd:
			if !open {
				t.Fatalf("turn %d ends without a start:\n%s", e.Turn, dump(events))
			}
			open = false
		case agent.EventMessage:
			if e.Message == nil {
				continue
			}
			if strings.Contains(e.Message.Content, stale) {
				t.Fatalf("the journal holds a message written after the takeover (%q):\n%s", e.Message.Content, dump(events))
			}
			if e.Message.Role == seam.RoleUser {
				got = append(got, e.Message.Content)
			}
		}
	}
	if open || strings.Join(got, "|") != strings.Join(inputs, "|") {
		t.Fatalf("turn inputs %q (a turn left open: %v); want %q:\n%s", got, open, inputs, dump(events))
	}
}

func dump(events []agent.Event) string {
	var b strings.Builder
	for _, e := range events {
		b.WriteString(string(e.Kind))
		if e.Message != nil {
			b.WriteString(" " + string(e.Message.Role) + ": " + e.Message.Content)
		}
		if e.StopReason != "" {
			b.WriteString(" (" + string(e.StopReason) + ")")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// A sweep never takes over a claim whose lease runs: neither a server
// whose clock agrees (it skips it) nor one whose clock runs an hour ahead
// and so thinks the lease ran out (the store, judging by its own clock,
// refuses the takeover). The owner's turn then completes as usual.
func TestSweepLeavesALiveClaim(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		ctx := context.Background()
		root := seam.ParentRef{Principal: "p", Cwd: "/work"}
		a, pa := server(t, manager.Options{Store: st, OwnerID: "server-a", LeaseTTL: time.Minute}, "A")
		var noticed atomic.Int32
		b, _ := server(t, manager.Options{Store: st, OwnerID: "server-b", LeaseTTL: time.Minute,
			OnNotice: func(string, seam.Notice) { noticed.Add(1) }}, "B")
		ahead, _ := server(t, manager.Options{Store: st, OwnerID: "server-c", LeaseTTL: time.Minute,
			Clock: func() time.Time { return time.Now().Add(time.Hour) }, OnNotice: func(string, seam.Notice) { noticed.Add(1) }}, "C")
		s := startHeld(t, a, pa, root)
		before, ok, err := st.ClaimOf(ctx, s.ChildID)
		if err != nil || !ok {
			t.Fatalf("ClaimOf = %+v, %v, %v", before, ok, err)
		}
		b.SweepNow(ctx)
		ahead.SweepNow(ctx)
		after, ok, err := st.ClaimOf(ctx, s.ChildID)
		if err != nil || !ok || after.Owner.ID != "server-a" || after.Epoch != before.Epoch {
			t.Fatalf("ClaimOf after the sweeps = %+v, %v, %v; want server-a's claim unchanged (%+v)", after, ok, err, before)
		}
		if noticed.Load() != 0 {
			t.Fatal("a sweep announced a live child's epoch")
		}
		close(pa.release)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res, ok := s.Wait(wctx)
		if !ok || res.StopReason != agent.StopCompleted || res.Output != "A done: hold: first" {
			t.Fatalf("the owner's turn = %+v, %v; want it completed by A", res, ok)
		}
	})
}

// After a takeover, a former owner that has not noticed yet still takes a
// follow-up for the child: its admission is a write of the child too, and
// the fence refuses it, so the message is not queued behind the new
// owner's back (with no event to collide with, only the fence stops it).
// The sender is told the claim was lost; so is the caller waiting on the
// cut-off turn, whose activation stops.
func TestAFormerOwnersLateAdmissionIsRefused(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		ctx := context.Background()
		root := seam.ParentRef{Principal: "p", Cwd: "/work"}
		var lag atomic.Int64
		a, pa := server(t, manager.Options{Store: st, OwnerID: "server-a", LeaseTTL: time.Minute, Clock: lagging(&lag)}, "A")
		notices := make(chan seam.Notice, 8)
		b, _ := server(t, manager.Options{Store: st, OwnerID: "server-b", LeaseTTL: 150 * time.Millisecond,
			OnNotice: func(_ string, n seam.Notice) { notices <- n }}, "B")
		s := startHeld(t, a, pa, root)
		journaled(t, st, s.ChildID, "hold: first")
		if err := b.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		expire(t, st, &lag)
		takenOver(t, notices, s.ChildID)

		_, err := a.Followup(ctx, root, s.ChildID, "late from A", false)
		if err == nil || !errors.Is(err, seam.ErrOwned) || !strings.Contains(err.Error(), "lost the claim") {
			t.Fatalf("A's late follow-up = %v; want it refused: A lost the claim", err)
		}
		queued, err := st.Queued(ctx, s.ChildID)
		if err != nil || len(queued) != 0 {
			t.Fatalf("the child's stored inbox = %+v, %v; want nothing queued by the former owner", queued, err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res, ok := s.Wait(wctx)
		if !ok || res.StopReason != agent.StopError || !strings.Contains(res.Diagnostic, "lost the claim") {
			t.Fatalf("A's waiting caller got %+v, %v; want an error saying A lost the claim", res, ok)
		}
		checkStoredTranscript(t, st, s.ChildID, []string{"hold: first"}, "late from A")
	})
}

// unreadableStore is a store whose journal of one child cannot be read.
type unreadableStore struct {
	seam.Store
	bad string
}

func (s unreadableStore) Events(ctx context.Context, id string) ([]agent.Event, error) {
	if id == s.bad {
		return nil, fmt.Errorf("reading the journal of %s: %w", id, seam.ErrCorrupt)
	}
	return s.Store.Events(ctx, id)
}

// An expired claim whose journal cannot be read is not taken over (its
// claim keeps the epoch to close once it is repaired), and the parent is
// told once, not at every sweep.
func TestSweepTellsOnceOfAnUnreadableJournal(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	root := seam.ParentRef{Principal: "p", Cwd: "/work"}
	var lag atomic.Int64
	a, pa := server(t, manager.Options{Store: st, OwnerID: "server-a", LeaseTTL: time.Minute, Clock: lagging(&lag)}, "A")
	s := startHeld(t, a, pa, root)
	var noticed []seam.Notice
	var mu sync.Mutex
	b := manager.New(manager.Options{Store: unreadableStore{st, s.ChildID}, OwnerID: "server-b", LeaseTTL: time.Minute,
		OnNotice: func(_ string, n seam.Notice) { mu.Lock(); noticed = append(noticed, n); mu.Unlock() }})
	t.Cleanup(func() { _ = b.Close(ctx) })
	before, _, _ := st.ClaimOf(ctx, s.ChildID)
	expire(t, st, &lag)
	for range 3 {
		b.SweepNow(ctx)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(noticed) != 1 || noticed[0].ChildID != s.ChildID || noticed[0].StopReason != agent.StopError {
		t.Fatalf("notices after three sweeps = %+v; want one, saying %s cannot be read", noticed, s.ChildID)
	}
	if after, ok, err := st.ClaimOf(ctx, s.ChildID); err != nil || !ok || after.Owner.ID != before.Owner.ID || after.Epoch != before.Epoch {
		t.Fatalf("ClaimOf after the sweeps = %+v, %v, %v; want the claim kept as it was (%+v)", after, ok, err, before)
	}
}
