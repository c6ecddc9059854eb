package manager_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Servers whose children's turns can be held mid-turn: several managers on
// one store, as several instances are (the takeover and cluster tests).

// holdProvider runs continuable children whose turns answer at once
// ("<owner> done: <input>"), except a turn whose input starts with "hold":
// it records its start, says so on holding, and answers only once release
// is closed, as a model call that outlives its server's lease does.
type holdProvider struct {
	owner   string
	holding chan string // buffered: the input of each turn that holds
	release chan struct{}
}

func newHoldProvider(owner string) *holdProvider {
	return &holdProvider{owner: owner, holding: make(chan string, 4), release: make(chan struct{})}
}

func (p *holdProvider) Name() string                    { return "hold" }
func (p *holdProvider) Capabilities() seam.Capabilities { return seam.Capabilities{} }
func (p *holdProvider) InheritsParentContext() bool     { return false }
func (p *holdProvider) Continuable()                    {}
func (p *holdProvider) Prepare(context.Context, seam.StartRequest) (seam.CreationInputs, error) {
	return seam.CreationInputs{}, nil
}
func (p *holdProvider) NewDriver(_ context.Context, r seam.DriverRequest) (seam.Driver, error) {
	return &holdDriver{p: p, j: r.Journal}, nil
}

type holdDriver struct {
	p *holdProvider
	j *agent.Journal
}

func (d *holdDriver) Journal() *agent.Journal { return d.j }
func (d *holdDriver) Close() error            { return nil }

func (d *holdDriver) RunTurn(ctx context.Context, inputs []agent.Input) agent.TurnResult {
	turn := d.j.NextTurn()
	d.j.Append(agent.Event{Kind: agent.EventTurnStart, Turn: turn})
	for _, in := range inputs {
		d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: turn, Source: in.Source, Message: &seam.Message{Role: seam.RoleUser, Content: in.Text}})
	}
	text := inputs[len(inputs)-1].Text
	if strings.HasPrefix(text, "hold") {
		d.p.holding <- text
		select {
		case <-d.p.release:
		case <-ctx.Done():
			d.j.Append(agent.Event{Kind: agent.EventTurnEnd, Turn: turn, StopReason: agent.StopAborted})
			return agent.TurnResult{StopReason: agent.StopAborted}
		}
	}
	out := d.p.owner + " done: " + text
	d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: turn, Message: &seam.Message{Role: seam.RoleAssistant, Content: out}})
	d.j.Append(agent.Event{Kind: agent.EventTurnEnd, Turn: turn, StopReason: agent.StopCompleted})
	return agent.TurnResult{Output: out, StopReason: agent.StopCompleted}
}

// server starts a manager on st running holdProvider children, closed
// when the test ends; what its turns answer names label.
func server(t *testing.T, opts manager.Options, label string) (*manager.Manager, *holdProvider) {
	t.Helper()
	m := manager.New(opts)
	p := newHoldProvider(label)
	if err := m.Register(p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m, p
}

// startHeld starts a child at m whose first turn holds mid-turn, with its
// caller waiting, and returns once it holds.
func startHeld(t *testing.T, m *manager.Manager, p *holdProvider, root seam.ParentRef) *manager.Started {
	t.Helper()
	s, err := m.StartContinuable(context.Background(), "hold", seam.StartRequest{Label: "l", Prompt: "hold: first", Parent: root}, true)
	if err != nil {
		t.Fatal(err)
	}
	<-p.holding
	return s
}

// waitFor waits up to 30 s for a turn's outcome.
func waitFor(t *testing.T, turn interface {
	Wait(context.Context) (seam.Result, bool)
}, what string) seam.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, ok := turn.Wait(ctx)
	if !ok {
		t.Fatalf("%s: no outcome within 30s", what)
	}
	return res
}

// waitSettled waits until the child holds no claim and nothing is queued
// for it (its settlement wakes its watchers).
func waitSettled(ctx context.Context, st seam.Store, id string) error {
	ch, stop, err := st.(seam.Waker).Watch(ctx, id)
	if err != nil {
		return err
	}
	defer stop()
	deadline := time.After(30 * time.Second)
	for {
		_, claimed, err := st.ClaimOf(ctx, id)
		if err != nil {
			return err
		}
		q, err := st.Queued(ctx, id)
		if err != nil {
			return err
		}
		if !claimed && len(q) == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-deadline:
			return fmt.Errorf("child %s did not settle within 30s (claimed %v, queued %d)", id, claimed, len(q))
		}
	}
}
