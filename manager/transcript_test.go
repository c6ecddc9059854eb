package manager_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// stepProvider runs continuable children whose turns journal like the
// agent loop (turn/start, the user messages with their sources, an
// assistant tool call and its result, the answer, turn/end), holding after
// the tool round until the test sends on step.
type stepProvider struct{ step chan string }

func (*stepProvider) Name() string                    { return "step" }
func (*stepProvider) Capabilities() seam.Capabilities { return seam.Capabilities{} }
func (*stepProvider) InheritsParentContext() bool     { return false }
func (*stepProvider) Continuable()                    {}
func (*stepProvider) Prepare(context.Context, seam.StartRequest) (seam.CreationInputs, error) {
	return seam.CreationInputs{}, nil
}
func (p *stepProvider) NewDriver(_ context.Context, r seam.DriverRequest) (seam.Driver, error) {
	return &stepDriver{p: p, j: r.Journal}, nil
}

type stepDriver struct {
	p *stepProvider
	j *agent.Journal
}

func (d *stepDriver) RunTurn(ctx context.Context, in []agent.Input) agent.TurnResult {
	turn := d.j.NextTurn()
	d.j.Append(agent.Event{Kind: agent.EventTurnStart, Turn: turn})
	for _, i := range in {
		d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: turn, Source: i.Source, Message: &seam.Message{Role: seam.RoleUser, Content: i.Text}})
	}
	d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: turn, Usage: &seam.Usage{InputTokens: 10, OutputTokens: 2},
		Message: &seam.Message{Role: seam.RoleAssistant, ToolCalls: []seam.ToolCall{{ID: "c1", Name: "read_file", Arguments: `{"path":"a.go"}`}}}})
	d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: turn, Message: agent.ToolResult("c1", strings.Repeat("x", 3*manager.MaxTranscriptText))})
	var answer string
	select {
	case answer = <-d.p.step:
	case <-ctx.Done():
		d.j.Append(agent.Event{Kind: agent.EventTurnEnd, Turn: turn, StopReason: agent.StopAborted, Diagnostic: "interrupted"})
		return agent.TurnResult{StopReason: agent.StopAborted, Diagnostic: "interrupted"}
	}
	d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: turn, Usage: &seam.Usage{InputTokens: 20, OutputTokens: 5}, Message: &seam.Message{Role: seam.RoleAssistant, Content: answer}})
	d.j.Append(agent.Event{Kind: agent.EventTurnEnd, Turn: turn, StopReason: agent.StopCompleted})
	return agent.TurnResult{Output: answer, StopReason: agent.StopCompleted}
}
func (d *stepDriver) Journal() *agent.Journal { return d.j }
func (*stepDriver) Close() error              { return nil }

// wantSignal waits for c.
func wantSignal(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("no signal: %s", what)
	}
}

// A transcript reads a running child from memory and a settled one from
// the store, bounded per entry, with each user message's source kind; a
// watch signals the running child's next step, its settlement, and a later
// wake's steps; nobody outside the lineage reads or watches it.
func TestTranscriptAndWatch(t *testing.T) {
	p := &stepProvider{step: make(chan string)}
	m := newManager(t, manager.Options{Store: memstore.New()}, p)
	ctx := context.Background()
	owner := seam.ParentRef{Principal: "local", Cwd: "/work"}
	st, err := m.StartContinuable(ctx, "step", seam.StartRequest{Label: "reader", Prompt: "read a.go", Parent: owner}, false)
	if err != nil {
		t.Fatal(err)
	}
	w, err := m.Watch(ctx, owner, st.ChildID)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	// Running, held after its tool round: the watch has signalled, and the
	// transcript (from memory) shows the round.
	// A reader reads, then waits for a signal before each re-read.
	var tr manager.Transcript
	for {
		if tr, err = m.Transcript(ctx, owner, st.ChildID, 0); err != nil {
			t.Fatal(err)
		}
		if tr.Len == 5 { // the budget grant, then the turn so far
			break
		}
		wantSignal(t, w.C, "the running child's tool round")
	}
	if tr.Status != manager.StatusRunning || tr.Label != "reader" || tr.Provider != "step" {
		t.Fatalf("transcript header = %+v, want a running child labelled reader on step", tr)
	}
	if e := tr.Entries[0]; e.Kind != string(agent.EventBudget) || e.Budget == nil || *e.Budget != (seam.Budget{}) {
		t.Fatalf("entry 0 = %+v, want the first turn's grant (unlimited)", e)
	}
	if e := tr.Entries[2]; e.Role != "user" || e.Source != agent.SourceUser || e.Text != "read a.go" {
		t.Fatalf("entry 2 = %+v, want the prompt from the user", e)
	}
	if e := tr.Entries[3]; len(e.ToolCalls) != 1 || e.ToolCalls[0].Name != "read_file" || e.Usage == nil || e.Usage.InputTokens != 10 {
		t.Fatalf("entry 3 = %+v, want the read_file call with its usage", e)
	}
	if e := tr.Entries[4]; !e.Truncated || len(e.Text) > manager.MaxTranscriptText || e.ToolCallID != "c1" {
		t.Fatalf("entry 4 = truncated %v, %d bytes, call %q; want the result cut to %d bytes", e.Truncated, len(e.Text), e.ToolCallID, manager.MaxTranscriptText)
	}

	// Another principal, and an agent of another lineage, may not read it.
	for _, stranger := range []seam.ParentRef{{Principal: "mallory"}, {Principal: "mallory", AgentID: st.ChildID}} {
		if _, err := m.Transcript(ctx, stranger, st.ChildID, 0); seam.CodeOf(err) != seam.CodeUnauthorized {
			t.Fatalf("Transcript as %+v: %v, want UNAUTHORIZED", stranger, err)
		}
		if _, err := m.Watch(ctx, stranger, st.ChildID); seam.CodeOf(err) != seam.CodeUnauthorized {
			t.Fatalf("Watch as %+v: %v, want UNAUTHORIZED", stranger, err)
		}
	}
	if _, err := m.Transcript(ctx, owner, "agent-missing", 0); seam.CodeOf(err) != seam.CodeInvalidRequest {
		t.Fatalf("Transcript of a missing child: %v, want INVALID_REQUEST", err)
	}

	// Released: it settles; the watch says so, and the store's transcript
	// from where the reader left off holds the rest.
	p.step <- "a.go is short"
	wantSignal(t, w.Settled, "settlement")
	tr, err = m.Transcript(ctx, owner, st.ChildID, 5)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status != manager.StatusReady || tr.Len != 7 || len(tr.Entries) != 2 || tr.Entries[0].Seq != 5 ||
		tr.Entries[0].Text != "a.go is short" || tr.Entries[1].Kind != "turn/end" || tr.Entries[1].StopReason != agent.StopCompleted {
		t.Fatalf("settled transcript after 5 = %+v", tr)
	}

	// A follow-up resumes it: the same watch follows the new activation.
	drain(w.C)
	if _, err := m.Followup(ctx, owner, st.ChildID, "and b.go?", false); err != nil {
		t.Fatal(err)
	}
	for {
		wantSignal(t, w.C, "the resumed child's tool round")
		if tr, err = m.Transcript(ctx, owner, st.ChildID, 7); err != nil {
			t.Fatal(err)
		}
		if tr.Len == 11 {
			break
		}
	}
	select {
	case <-w.Settled:
		t.Fatal("a settlement was signalled while the resumed child runs")
	default:
	}
	if e := tr.Entries[1]; e.Text != "and b.go?" || e.Turn != 2 {
		t.Fatalf("resumed entry = %+v, want the follow-up in turn 2", e)
	}
	p.step <- "b.go too"
	wantSignal(t, w.Settled, "the second settlement")
}

func drain(c <-chan struct{}) {
	select {
	case <-c:
	default:
	}
}

// journalReads records the journal reads a store serves: whole journals,
// and reads from an offset.
type journalReads struct {
	seam.Store
	mu    sync.Mutex
	whole int
	from  []int64
}

func (s *journalReads) Events(ctx context.Context, id string) ([]agent.Event, error) {
	s.mu.Lock()
	s.whole++
	s.mu.Unlock()
	return s.Store.Events(ctx, id)
}

func (s *journalReads) EventsFrom(ctx context.Context, id string, from int64) ([]agent.Event, error) {
	s.mu.Lock()
	s.from = append(s.from, from)
	s.mu.Unlock()
	return s.Store.EventsFrom(ctx, id, from)
}

// A stored child's transcript from event After on reads the journal from
// there, not the whole of it (a watch at another instance reads at each
// step of a turn), and says the journal's length whatever After is.
func TestStoredTranscriptReadsFromAfter(t *testing.T) {
	ctx := context.Background()
	st := &journalReads{Store: memstore.New()}
	root := seam.ParentRef{Principal: "p", Cwd: "/work"}
	const n = 1000
	h := seam.Header{ID: "agent-long", Parent: root.Address(), Principal: "p", Depth: 1, DepthCap: 3, Mode: seam.ModeContinuable,
		Provider: "spawn", Label: "long", Cwd: "/work", CreatedAt: time.Now().UTC()}
	d := seam.Descriptor{Version: seam.DescriptorVersion, Mode: seam.ModeContinuable, Provider: "spawn", Label: "long"}
	events := make([]agent.Event, n)
	for i := range events {
		events[i] = agent.Event{Seq: int64(i), Kind: agent.EventMessage, Turn: 1, Message: &seam.Message{Role: seam.RoleAssistant, Content: fmt.Sprint(i)}}
	}
	if err := st.WriteChild(ctx, h.ID, seam.ChildWrite{Create: &seam.NewChild{Header: h, Descriptor: d}, Events: events}); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, manager.Options{Store: st}, instantProvider{})
	for _, c := range []struct {
		after   int64
		entries int
	}{{n - 2, 2}, {n, 0}, {n + 500, 0}, {0, n}} {
		tr, err := m.Transcript(ctx, root, h.ID, c.after)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Len != n || len(tr.Entries) != c.entries || (c.entries > 0 && tr.Entries[0].Seq != c.after) {
			t.Fatalf("Transcript after %d: len %d, %d entries; want len %d, %d entries from %d", c.after, tr.Len, len(tr.Entries), n, c.entries, c.after)
		}
	}
	if st.whole != 0 || !slices.Equal(st.from, []int64{n - 2, n, n + 500, 0}) {
		t.Fatalf("the journal was read whole %d times and from %v; want only from each After", st.whole, st.from)
	}
}
