package view

import (
	"context"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/manager"
)

// The view served by instance B of two sharing one store shows a child
// resident at A: its tree row with A's status, and its transcript live —
// the held turn's answer and end arrive at B as A journals them, and the
// row settles when A settles the child.
func TestTheViewAtAnotherInstance(t *testing.T) {
	r := newRig(t, Options{})
	b := manager.New(manager.Options{Store: r.st})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Close(ctx)
	})
	v, at := serveView(t, b, Options{Tick: 20 * time.Millisecond})
	id := r.start(t, alice, "hold the line")
	<-r.holding
	tok, err := v.Token(alice.Principal)
	if err != nil {
		t.Fatal(err)
	}

	tree := at.open(t, "/api/tree?token="+tok)
	snap := decode[Snapshot](t, tree.next(t), "snapshot")
	if len(snap.Rows) != 1 || snap.Rows[0].ID != id || snap.Rows[0].Status != manager.StatusRunning {
		t.Fatalf("B's tree = %+v; want %s running (at A)", snap.Rows, id)
	}
	s := at.open(t, "/api/transcript?id="+id+"&token="+tok)
	if head := decode[TranscriptHead](t, s.next(t), "transcript"); head.ID != id || head.Status != manager.StatusRunning {
		t.Fatalf("B's transcript head = %+v; want %s running (at A)", head.Transcript, id)
	}
	r.unhold()
	waitAnswered(t, s)
	waitRow(t, tree, id, manager.StatusReady)
}
