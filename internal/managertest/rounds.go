package managertest

import (
	"context"
	"strings"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Rounds is a provider ("rounds") of continuable children whose turns
// answer at once, except a turn whose last input starts with "rounds": it
// journals one step (an assistant message) for each text sent on Steps,
// each committed alone, and ends when Steps is closed (aborted when the
// turn is cancelled), as a model turn's rounds come one by one.
type Rounds struct{ Steps chan string }

func (p *Rounds) Name() string                    { return "rounds" }
func (p *Rounds) Capabilities() seam.Capabilities { return seam.Capabilities{} }
func (p *Rounds) InheritsParentContext() bool     { return false }
func (p *Rounds) Continuable()                    {}
func (p *Rounds) Prepare(context.Context, seam.StartRequest) (seam.CreationInputs, error) {
	return seam.CreationInputs{}, nil
}
func (p *Rounds) NewDriver(_ context.Context, r seam.DriverRequest) (seam.Driver, error) {
	return &roundsDriver{p: p, j: r.Journal}, nil
}

type roundsDriver struct {
	p *Rounds
	j *agent.Journal
}

func (d *roundsDriver) Journal() *agent.Journal { return d.j }
func (d *roundsDriver) Close() error            { return nil }

func (d *roundsDriver) RunTurn(ctx context.Context, inputs []agent.Input) agent.TurnResult {
	turn := d.j.NextTurn()
	d.j.Append(agent.Event{Kind: agent.EventTurnStart, Turn: turn})
	for _, in := range inputs {
		d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: turn, Source: in.Source, Message: &seam.Message{Role: seam.RoleUser, Content: in.Text}})
	}
	stop := agent.StopCompleted
steps:
	for strings.HasPrefix(inputs[len(inputs)-1].Text, "rounds") {
		select {
		case text, ok := <-d.p.Steps:
			if !ok {
				break steps
			}
			d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: turn, Message: &seam.Message{Role: seam.RoleAssistant, Content: text}})
		case <-ctx.Done():
			stop = agent.StopAborted
			break steps
		}
	}
	d.j.Append(agent.Event{Kind: agent.EventTurnEnd, Turn: turn, StopReason: stop})
	return agent.TurnResult{StopReason: stop}
}
