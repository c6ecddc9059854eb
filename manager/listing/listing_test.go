package listing

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// world is a store of root children and the manager's live ones.
type world struct {
	listed      []seam.Listing
	events      map[string][]agent.Event
	checkpoints map[string]seam.Checkpoint
	live        map[string]Live
	fail        error
}

func (w *world) Listings(_ context.Context, parent string, p seam.Page) ([]seam.Listing, error) {
	if w.fail != nil {
		return nil, w.fail
	}
	var out []seam.Listing
	for _, l := range w.listed {
		if l.Header.Parent == parent && (p.After.IsZero() || p.After.Before(l.Key())) {
			out = append(out, l)
		}
	}
	if p.Limit > 0 && len(out) > p.Limit {
		out = out[:p.Limit]
	}
	return out, nil
}
func (w *world) Descendants(ctx context.Context, root string, p seam.Page) ([]seam.Listing, error) {
	return w.Listings(ctx, root, p)
}
func (w *world) Events(_ context.Context, id string) ([]agent.Event, error) { return w.events[id], nil }
func (w *world) SetCheckpoint(_ context.Context, id string, cp seam.Checkpoint) error {
	w.checkpoints[id] = cp
	return nil
}
func (w *world) Resident(id string) (Live, bool) { l, ok := w.live[id]; return l, ok }
func (w *world) ResidentChildren(parent string) []Live {
	var out []Live
	for _, l := range w.live {
		if l.Header.Parent == parent {
			out = append(out, l)
		}
	}
	return out
}
func (w *world) Corrupt(string) string     { return "" }
func (w *world) NoteCorrupt(string, error) {}

// One instance: nothing is resident elsewhere.
func (w *world) Elsewhere(context.Context) map[string]seam.Claim               { return nil }
func (w *world) StatusElsewhere(context.Context, string, []agent.Event) string { return "" }
func (w *world) ResidentElsewhere(context.Context, string, map[string]seam.Claim) []seam.Listing {
	return nil
}

var root = seam.PrincipalAddress("alice")

func newWorld() *world {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := func(id string, n int) seam.Header {
		return seam.Header{ID: id, Parent: root, CreatedAt: t0.Add(time.Duration(n) * time.Minute)}
	}
	w := &world{events: map[string][]agent.Event{}, checkpoints: map[string]seam.Checkpoint{}, live: map[string]Live{}}
	w.listed = []seam.Listing{
		{Header: h("a-live", 1)},
		{Header: h("b-checkpoint", 2), Checkpoint: &seam.Checkpoint{Seq: 3, Usage: seam.Usage{OutputTokens: 7}, Stop: agent.StopCompleted, Closing: "ok"}, JournalLen: 3},
		{Header: h("c-fold", 3)},
		{Header: h("d-corrupt", 4), Corrupt: true},
	}
	w.live["a-live"] = Live{Header: w.listed[0].Header, Model: "m", Status: StatusRunning, Usage: seam.Usage{InputTokens: 1},
		Questions: []PendingQuestion{{ID: "q-1", Text: "ok?"}}}
	w.events["c-fold"] = []agent.Event{{Kind: agent.EventMessage, Message: &seam.Message{Role: seam.RoleAssistant, Content: "bye"}, Usage: &seam.Usage{OutputTokens: 2}},
		{Kind: agent.EventTurnEnd, StopReason: agent.StopCompleted}}
	return w
}

// TestRowsComeFromMemoryTheCheckpointOrOneFold and a corrupt child is a
// diagnostic row.
func TestRowsComeFromMemoryTheCheckpointOrOneFold(t *testing.T) {
	w := newWorld()
	l := Lister{Store: w, Source: w, Log: slog.New(slog.DiscardHandler)}
	rows, err := l.Subtree(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]Row{}
	for _, r := range rows {
		byID[r.ID] = r
	}
	if r := byID["a-live"]; r.Status != StatusInputRequired || r.Model != "m" || len(r.Questions) != 1 {
		t.Errorf("live row %+v, want input_required with its question and model", r)
	}
	if r := byID["b-checkpoint"]; r.Status != StatusReady || r.Usage.OutputTokens != 7 || r.LastMessage != "ok" {
		t.Errorf("checkpoint row %+v", r)
	}
	if r := byID["c-fold"]; r.Usage.OutputTokens != 2 || r.LastStopReason != agent.StopCompleted {
		t.Errorf("folded row %+v", r)
	}
	if _, cached := w.checkpoints["c-fold"]; !cached {
		t.Error("a fold did not cache its checkpoint")
	}
	if r := byID["d-corrupt"]; r.Kind != "diagnostic" || r.Reason != "corrupt" {
		t.Errorf("corrupt row %+v", r)
	}
	u, _ := l.TreeUsage(context.Background(), root)
	if u.OutputTokens != 9 || u.InputTokens != 1 {
		t.Errorf("tree usage %+v, want every row summed", u)
	}
}

// TestPagesVisitEveryRowOnce with a cursor bound to its listing.
func TestPagesVisitEveryRowOnce(t *testing.T) {
	w := newWorld()
	l := Lister{Store: w, Source: w, Log: slog.New(slog.DiscardHandler)}
	var ids []string
	q := Query{Limit: 2}
	for {
		p, err := l.Page(context.Background(), root, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Rows {
			ids = append(ids, r.ID)
		}
		if p.Next == "" {
			break
		}
		q.Cursor = p.Next
	}
	if !slices.Equal(ids, []string{"a-live", "b-checkpoint", "c-fold", "d-corrupt"}) {
		t.Fatalf("pages gave %v", ids)
	}
	first, _ := l.Page(context.Background(), root, Query{Limit: 1})
	_, err := l.Page(context.Background(), root, Query{Limit: 1, Cursor: first.Next, Descendants: true})
	if err == nil || !strings.Contains(err.Error(), "belongs to a listing with scope children") {
		t.Fatalf("a cursor of another listing = %v", err)
	}
	if _, err := l.Page(context.Background(), root, Query{Status: "sleeping"}); err == nil {
		t.Fatal("an unknown status was taken")
	}
	running, _ := l.Page(context.Background(), root, Query{Status: StatusInputRequired})
	if len(running.Rows) != 1 || running.Rows[0].ID != "a-live" {
		t.Fatalf("status filter gave %+v", running.Rows)
	}
}

// TestAnUnreadableStoreListsTheLiveChildrenAndSaysSo.
func TestAnUnreadableStoreListsTheLiveChildrenAndSaysSo(t *testing.T) {
	w := newWorld()
	w.fail = errors.New("disk gone")
	l := Lister{Store: w, Source: w, Log: slog.New(slog.DiscardHandler)}
	p, err := l.Page(context.Background(), root, Query{})
	if err != nil {
		t.Fatal(err)
	}
	rows := p.Rows
	if len(rows) != 2 || rows[0].ID != "a-live" || rows[1].ID != StoreRowID || rows[1].Reason != "unavailable" {
		t.Fatalf("rows %+v, want the live child and the store's diagnostic row", rows)
	}
}
