package manager_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/managertest"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// noteDriver's turn records what an external driver records (a bracketed
// activity note, then the answer) and ends with usage and a cost.
type noteDriver struct{ j *agent.Journal }

func (d noteDriver) RunTurn(_ context.Context, in []agent.Input) agent.TurnResult {
	u := seam.Usage{InputTokens: 10, OutputTokens: 20, CostUSD: 0.25}
	d.j.Append(agent.Event{Kind: agent.EventTurnStart, Turn: 1})
	d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: 1, Source: in[0].Source, Message: &seam.Message{Role: seam.RoleUser, Content: in[0].Text}})
	d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: 1, Message: &seam.Message{Role: seam.RoleAssistant, Content: "[ran: ls (exit 0)]"}})
	d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: 1, Message: &seam.Message{Role: seam.RoleAssistant, Content: "done"}})
	d.j.Append(agent.Event{Kind: agent.EventTurnEnd, Turn: 1, StopReason: agent.StopCompleted, Usage: &u})
	return agent.TurnResult{Output: "done", StopReason: agent.StopCompleted, Usage: u}
}
func (d noteDriver) Journal() *agent.Journal { return d.j }
func (noteDriver) Close() error              { return nil }

// A one-shot run is its driver's one turn: the driver is told the run is
// one-shot and gets the child's record; the one progress listener reads
// the journal until the turn ends; the one conversion keeps the turn's
// usage, cost included.
func TestAOneShotRunIsItsDriversOneTurn(t *testing.T) {
	var got seam.DriverRequest
	p := &fakeProvider{name: "ext", caps: allCaps, driver: func(_ context.Context, req seam.DriverRequest) (seam.Driver, error) {
		got = req
		return noteDriver{req.Journal}, nil
	}}
	m := newManager(t, manager.Options{}, p)
	rec, _ := record(m)
	var mu sync.Mutex
	var notes []string
	req := prompt("list it")
	req.Persona = "terse"
	req.Progress = func(n string) { mu.Lock(); notes = append(notes, n); mu.Unlock() }
	id, res, err := managertest.RunOnce(context.Background(), m, "ext", req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != agent.StopCompleted || res.Output != "done" || res.Usage != (seam.Usage{InputTokens: 10, OutputTokens: 20, CostUSD: 0.25}) {
		t.Errorf("result = %+v, want completed with the turn's usage and cost", res)
	}
	if !got.OneShot() || got.Header.Mode != seam.ModeOneShot || got.Descriptor.Mode != seam.ModeOneShot {
		t.Errorf("driver request %+v does not say the run is one-shot", got.Header)
	}
	if got.Header.ID != id || got.Header.Depth != 1 || got.Header.Cwd != "/work" || got.Descriptor.Persona != "terse" {
		t.Errorf("driver request header %+v, descriptor %+v: not the child's record", got.Header, got.Descriptor)
	}
	if got.Self.AgentID != id || got.Self.Depth != 1 {
		t.Errorf("driver's Self = %+v, want the child %s at depth 1", got.Self, id)
	}
	if done := got.Self.CompletedTurns(); len(done) != 5 || done[4].Kind != agent.EventTurnEnd {
		t.Errorf("the child's CompletedTurns view = %d events, want its one completed turn (5)", len(done))
	}
	// The turn is over: later events send no note.
	got.Journal.Append(agent.Event{Kind: agent.EventMessage, Turn: 1, Message: &seam.Message{Role: seam.RoleAssistant, Content: "late"}})
	mu.Lock()
	if want := []string{"ran: ls (exit 0)", "answered"}; !slices.Equal(notes, want) {
		t.Errorf("progress notes = %q, want %q", notes, want)
	}
	mu.Unlock()
	for _, e := range rec.all() {
		if !e.Local || e.RunID != id {
			t.Errorf("event %+v: want local, for %s", e, id)
		}
	}
}

// continuableFake is a fakeProvider with the continuable ability.
type continuableFake struct{ *fakeProvider }

func (continuableFake) Continuable() {}

// A continuable child's driver is told it is not one-shot; a provider
// without the ability runs one-shot children only.
func TestOnlyContinuableProvidersStartContinuableChildren(t *testing.T) {
	c := continuableFake{&fakeProvider{name: "cont"}}
	plain := &fakeProvider{name: "plain"}
	m := newManager(t, manager.Options{Store: memstore.New()}, c, plain)
	if _, err := m.StartContinuable(context.Background(), "cont", prompt("go"), false); err != nil {
		t.Fatal(err)
	}
	if r := c.dreqs[0]; r.OneShot() || r.Header.Mode != seam.ModeContinuable {
		t.Errorf("a continuable child's driver request says one-shot: %+v", r.Header)
	}
	_, err := m.StartContinuable(context.Background(), "plain", prompt("go"), false)
	wantCode(t, err, seam.ErrInvalidRequest)
	if len(plain.calls()) != 0 {
		t.Error("a provider without the ability was asked to prepare a continuable child")
	}
	infos := m.Providers()
	if !infos[0].Continuable || infos[1].Continuable {
		t.Errorf("Providers() = %+v, want only cont continuable", infos)
	}
}
