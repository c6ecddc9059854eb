//go:build postgres

package manager_test

import (
	"context"
	"slices"
	"testing"
	"time"

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
		s, err := a.StartContinuable(ctx, "hold", seam.StartRequest{Label: "l", Prompt: "first", Parent: root}, true)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, s, "A's first turn")

		w, err := b.Watch(ctx, root, s.ChildID)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		tr, err := b.Transcript(ctx, root, s.ChildID, 0)
		if err != nil {
			t.Fatal(err)
		}
		seen := tr.Len
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
