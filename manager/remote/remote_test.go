package remote

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

func newChild(t *testing.T, st seam.Store, id, parent string) {
	t.Helper()
	h := seam.Header{ID: id, Parent: parent, Principal: "p", Depth: 1, DepthCap: 3, Mode: seam.ModeContinuable, Provider: "spawn", CreatedAt: time.Now()}
	d := seam.Descriptor{Version: seam.DescriptorVersion, Mode: seam.ModeContinuable, Provider: "spawn"}
	if err := st.WriteChild(context.Background(), id, seam.ChildWrite{Create: &seam.NewChild{Header: h, Descriptor: d}}); err != nil {
		t.Fatal(err)
	}
}

// write commits w, numbering its events after the journal's.
func write(t *testing.T, st seam.Store, id string, w seam.ChildWrite) {
	t.Helper()
	n, err := st.JournalLen(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for i := range w.Events {
		w.Events[i].Seq = n + int64(i)
	}
	if err := st.WriteChild(context.Background(), id, w); err != nil {
		t.Fatal(err)
	}
}

// turn is the events of one turn: its start, the user's text, the
// answer and (unless open) its end with stop.
func turn(text, answer string, stop seam.StopReason, open bool) []seam.Event {
	es := []seam.Event{{Kind: seam.EventTurnStart},
		{Kind: seam.EventMessage, Source: seam.SourceUser, Message: &seam.Message{Role: seam.RoleUser, Content: text}},
		{Kind: seam.EventMessage, Message: &seam.Message{Role: seam.RoleAssistant, Content: answer}, Usage: &seam.Usage{InputTokens: 3, OutputTokens: 2}}}
	if !open {
		es = append(es, seam.Event{Kind: seam.EventTurnEnd, StopReason: stop})
	}
	return es
}

// Running: an open turn, or a message queued behind an ended one, runs; an
// ended turn with nothing queued, or a queue parked behind an interrupted
// turn, does not.
func TestRunningAsTheStoreShowsIt(t *testing.T) {
	ctx, st := context.Background(), memstore.New()
	newChild(t, st, "c", "principal:p")
	if Running(ctx, st, "c", nil) {
		t.Error("a child with an empty journal and nothing queued runs")
	}
	write(t, st, "c", seam.ChildWrite{Events: turn("one", "a1", "", true)})
	if !Running(ctx, st, "c", nil) {
		t.Error("a child whose turn is open does not run")
	}
	write(t, st, "c", seam.ChildWrite{Events: []seam.Event{{Kind: seam.EventTurnEnd, StopReason: seam.StopCompleted}}})
	if Running(ctx, st, "c", nil) {
		t.Error("a child whose turn ended, nothing queued, runs")
	}
	write(t, st, "c", seam.ChildWrite{Enqueue: []seam.QueuedMessage{{ID: "m1", Text: "two", Source: seam.SourceUser}}})
	if !Running(ctx, st, "c", nil) {
		t.Error("a child with a message queued behind an ended turn does not run")
	}
	aborted := []seam.Event{{Kind: seam.EventTurnEnd, StopReason: agent.StopAborted}}
	if Running(ctx, st, "c", aborted) {
		t.Error("a queue parked behind an interrupted turn runs")
	}
}

// Listings skip another parent's claims without reading their headers,
// and list the parent's.
func TestListingsOfOneParent(t *testing.T) {
	ctx, st := context.Background(), memstore.New()
	newChild(t, st, "mine", "agent-1")
	newChild(t, st, "theirs", "agent-2")
	claims := map[string]seam.Claim{"mine": {ChildID: "mine", Parent: "agent-1"}, "theirs": {ChildID: "theirs", Parent: "agent-2"},
		"unknown": {ChildID: "unknown"}}
	ls := Listings(ctx, st, "agent-1", claims)
	if len(ls) != 1 || ls[0].Header.ID != "mine" {
		t.Fatalf("listings of agent-1 = %+v; want just its child", ls)
	}
}

// A waited turn is the first after the admission whose user input is the
// message's: turns before it, and another message's in between, are not
// its outcome; its end is, with its usage.
func TestATurnWaitedThroughTheStore(t *testing.T) {
	ctx, st := context.Background(), memstore.New()
	newChild(t, st, "c", "principal:p")
	write(t, st, "c", seam.ChildWrite{Events: turn("asked", "old answer", seam.StopCompleted, false)}) // before the admission
	from, err := st.JournalLen(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	host := Host{Store: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Background: func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Minute)
		},
		Write: func(ctx context.Context, w func(context.Context) error) error { return w(ctx) },
		Usage: func(es []seam.Event) (u seam.Usage) {
			for _, e := range es {
				if e.Usage != nil {
					u = u.Add(*e.Usage)
				}
			}
			return u
		}}
	tw := &Turn{Host: host, ChildID: "c", MsgID: "m", Text: "asked", From: from, Wait: true}
	got := make(chan seam.Result, 1)
	go func() {
		res, ok := tw.Outcome(ctx)
		if !ok {
			t.Error("the wait ended without the outcome")
		}
		got <- res
	}()
	write(t, st, "c", seam.ChildWrite{Events: turn("another", "not yours", seam.StopCompleted, false)})
	write(t, st, "c", seam.ChildWrite{Events: turn("asked", "new answer", "", true)})
	select {
	case res := <-got:
		t.Fatalf("the outcome %+v came before its turn ended", res)
	default:
	}
	write(t, st, "c", seam.ChildWrite{Events: []seam.Event{{Kind: seam.EventTurnEnd, StopReason: seam.StopCompleted}}})
	res := <-got
	if res.Output != "new answer" || res.StopReason != seam.StopCompleted || res.Usage.InputTokens != 3 {
		t.Fatalf("outcome = %+v; want the admitted message's turn, completed, its usage", res)
	}
}
