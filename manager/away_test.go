//go:build postgres

package manager_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/managertest"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// What a caller at an instance that does not hold a child gets besides a
// send (cluster_test.go): a turn awaited after a send without a wait (an
// MCP task's), and a live transcript.

// A follow-up sent at B without a wait, for a child A holds, is awaited
// afterwards (as an MCP task does): the wait gets A's answer to it, not
// the outcome of the turn A ran before.
func TestAwaitSentAtAnotherInstance(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		ctx := context.Background()
		root := seam.ParentRef{Principal: "p", Cwd: "/work"}
		a, pa := server(t, manager.Options{Store: st, OwnerID: "server-a", LeaseTTL: time.Minute}, "A")
		b, _ := server(t, manager.Options{Store: st, OwnerID: "server-b", LeaseTTL: time.Minute}, "B")
		s := startHeld(t, a, pa, root)

		sent, err := b.Followup(ctx, root, s.ChildID, "second", false)
		if err != nil || sent.Route != manager.RouteForwarded {
			t.Fatalf("the follow-up at B = %+v, %v; want it forwarded to A", sent, err)
		}
		turn := b.AwaitSent(sent, nil)
		close(pa.release)
		if res := waitFor(t, turn, "the awaited follow-up at B"); res.Output != "A done: second" {
			t.Fatalf("the awaited follow-up at B = %+v; want A's answer to it", res)
		}
	})
}

// A transcript watched at B, of a child resident at A, is live: a turn A
// starts is signalled and readable at B while it runs (its status
// running, as A has it), and its end too.
func TestTranscriptAtAnotherInstanceIsLive(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		ctx := context.Background()
		root := seam.ParentRef{Principal: "p", Cwd: "/work"}
		a, pa := server(t, manager.Options{Store: st, OwnerID: "server-a", LeaseTTL: time.Minute}, "A")
		b, _ := server(t, manager.Options{Store: st, OwnerID: "server-b", LeaseTTL: time.Minute}, "B")
		s, w, seen := watchedAt(t, a, b, "hold", root)
		if _, err := a.Followup(ctx, root, s.ChildID, "hold: second", false); err != nil {
			t.Fatal(err)
		}
		<-pa.holding
		// readUntil reads B's transcript at each signal of the watch until
		// ok holds of what it read since seen.
		readUntil := func(what string, ok func(manager.Transcript, []manager.TranscriptEntry) bool) {
			t.Helper()
			var got []manager.TranscriptEntry
			deadline := time.After(30 * time.Second)
			for {
				select {
				case <-w.C:
				case <-deadline:
					t.Fatalf("no signal of the watch at B showed %s within 30s; read %+v", what, got)
				}
				tr, err := b.Transcript(ctx, root, s.ChildID, seen)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, tr.Entries...)
				seen = tr.Len
				if ok(tr, got) {
					return
				}
			}
		}
		readUntil("the held turn's input while it runs at A", func(tr manager.Transcript, es []manager.TranscriptEntry) bool {
			return tr.Status == manager.StatusRunning && slices.ContainsFunc(es, func(e manager.TranscriptEntry) bool { return e.Text == "hold: second" })
		})
		close(pa.release)
		readUntil("the held turn's answer", func(tr manager.Transcript, es []manager.TranscriptEntry) bool {
			return slices.ContainsFunc(es, func(e manager.TranscriptEntry) bool { return e.Text == "A done: hold: second" })
		})
		// Nothing more queued: A settles the child, which the watch at B
		// says too.
		select {
		case <-w.Settled:
		case <-time.After(30 * time.Second):
			t.Fatal("the watch at B did not signal A's settlement within 30s")
		}
	})
}

// watchedAt starts a child of provider at a, waits for its first turn
// ("first", answered at once) and watches it at b: the child, the watch
// (stopped when the test ends) and the transcript's length b reads then.
func watchedAt(t *testing.T, a, b *manager.Manager, provider string, root seam.ParentRef) (*manager.Started, *manager.Watch, int64) {
	t.Helper()
	ctx := context.Background()
	s, err := a.StartContinuable(ctx, provider, seam.StartRequest{Label: "l", Prompt: "first", Parent: root}, true)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, s, "A's first turn")
	w, err := b.Watch(ctx, root, s.ChildID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	tr, err := b.Transcript(ctx, root, s.ChildID, 0)
	if err != nil {
		t.Fatal(err)
	}
	return s, w, tr.Len
}

// stepWait bounds how long a step journaled at the owner may take to
// reach a watch at another instance: well under a second, the interval
// at which such a watch used to poll the journal's length.
const stepWait = 400 * time.Millisecond

// Each step of a turn running at A (an entry journaled mid-turn, no
// turn's end) reaches a watch at B within stepWait of being journaled,
// one after another: B is woken by the store per committed step, not by a
// poll of the journal (which would leave a step journaled just after a
// poll unseen for a second).
func TestTranscriptStepsReachAnotherInstanceAtOnce(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		ctx := context.Background()
		root := seam.ParentRef{Principal: "p", Cwd: "/work"}
		a, _ := server(t, manager.Options{Store: st, OwnerID: "server-a", LeaseTTL: time.Minute}, "A")
		p := &managertest.Rounds{Steps: make(chan string)}
		if err := a.Register(p); err != nil {
			t.Fatal(err)
		}
		b, _ := server(t, manager.Options{Store: st, OwnerID: "server-b", LeaseTTL: time.Minute}, "B")
		s, w, seen := watchedAt(t, a, b, "rounds", root)
		if _, err := a.Followup(ctx, root, s.ChildID, "rounds: go", false); err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			step := fmt.Sprintf("step %d", i)
			p.Steps <- step // taken: the driver journals it now
			journaled := time.Now()
			deadline := time.After(stepWait)
			var got []manager.TranscriptEntry
			for !slices.ContainsFunc(got, func(e manager.TranscriptEntry) bool { return e.Text == step }) {
				select {
				case <-w.C:
				case <-deadline:
					t.Fatalf("%s, journaled at A mid-turn, was not signalled and readable at B within %s; read %+v", step, stepWait, got)
				}
				tr, err := b.Transcript(ctx, root, s.ChildID, seen)
				if err != nil {
					t.Fatal(err)
				}
				got, seen = append(got, tr.Entries...), tr.Len
			}
			t.Logf("%s reached B %s after it was journaled at A", step, time.Since(journaled).Round(time.Millisecond))
		}
		close(p.Steps)
		select {
		case <-w.Settled:
		case <-time.After(30 * time.Second):
			t.Fatal("the watch at B did not signal A's settlement within 30s")
		}
	})
}
