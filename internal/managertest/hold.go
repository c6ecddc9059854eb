package managertest

import (
	"context"
	"strings"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Hold is a provider ("hold") of continuable children whose turns answer
// at once ("<Label> done: <input>"), except a turn whose last input starts
// with "hold": it sends that input on Holding and answers only once
// Release is closed (aborted when cancelled first), as a model call that
// outlives its server's lease does. Several managers on one store, each
// with its own Hold, are several instances.
type Hold struct {
	Label   string
	Holding chan string // buffered: the input of each turn that holds
	Release chan struct{}
}

// NewHold is a Hold whose answers name label.
func NewHold(label string) *Hold {
	return &Hold{Label: label, Holding: make(chan string, 4), Release: make(chan struct{})}
}

func (p *Hold) Name() string                    { return "hold" }
func (p *Hold) Capabilities() seam.Capabilities { return seam.Capabilities{} }
func (p *Hold) InheritsParentContext() bool     { return false }
func (p *Hold) Continuable()                    {}
func (p *Hold) Prepare(context.Context, seam.StartRequest) (seam.CreationInputs, error) {
	return seam.CreationInputs{}, nil
}
func (p *Hold) NewDriver(_ context.Context, r seam.DriverRequest) (seam.Driver, error) {
	return &holdDriver{p: p, j: r.Journal}, nil
}

type holdDriver struct {
	p *Hold
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
		d.p.Holding <- text
		select {
		case <-d.p.Release:
		case <-ctx.Done():
			d.j.Append(agent.Event{Kind: agent.EventTurnEnd, Turn: turn, StopReason: agent.StopAborted})
			return agent.TurnResult{StopReason: agent.StopAborted}
		}
	}
	out := d.p.Label + " done: " + text
	d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: turn, Message: &seam.Message{Role: seam.RoleAssistant, Content: out}})
	d.j.Append(agent.Event{Kind: agent.EventTurnEnd, Turn: turn, StopReason: agent.StopCompleted})
	return agent.TurnResult{Output: out, StopReason: agent.StopCompleted}
}
