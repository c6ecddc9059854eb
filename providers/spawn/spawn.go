// Package spawn provides the in-process providers: spawn, a fresh agent loop
// over an OpenAI-compatible chat API, and fork, the same loop seeded with
// the parent's completed turns.
//
// Children get the workspace tools confined to their cwd, the delegation
// tools the deployment wires in (so nesting works, with depth enforced by
// the manager), and, with an output schema, the structured_output tool. The
// tool filter applies to all of them: a filtered tool is absent from what
// the model is shown and refuses to run. A persona shadows the deployment
// persona for that child only.
//
// A provider contributes the seed (fork's: the caller's completed turns,
// read through ParentRef.CompletedTurns) and the agent loop as the driver;
// the manager runs every child, one-shot or continuable, from it.
package spawn

import (
	"context"
	"log/slog"
	"sort"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/agent/workspace"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/manager"
)

// Options configures a provider. Zero values mean the defaults given.
type Options struct {
	Name    string     // zero: "spawn" (or "fork")
	Client  llm.Client // required
	Model   string     // zero: the client's default
	Persona string     // the deployment persona; zero: none
	Shell   bool       // give children run_shell
	// MaxSteps bounds the model calls of one turn; zero: agent.DefaultMaxSteps.
	MaxSteps  int
	MaxTokens int64
	// DelegationTools returns the delegation tools for a child, which calls
	// them as self. Nil: children cannot delegate.
	DelegationTools func(self manager.ParentRef) []agent.Tool
	Logger          *slog.Logger
}

// Provider runs in-process children.
type Provider struct {
	opts Options
	fork bool
}

var (
	_ manager.Provider    = (*Provider)(nil)
	_ manager.ToolNamer   = (*Provider)(nil)
	_ manager.Continuable = (*Provider)(nil)
)

// New returns the spawn provider.
func New(opts Options) *Provider {
	if opts.Name == "" {
		opts.Name = "spawn"
	}
	return &Provider{opts: opts}
}

// NewFork returns the fork provider: children start from the parent's
// completed turns, so they need an in-process parent with a journal.
func NewFork(opts Options) *Provider {
	if opts.Name == "" {
		opts.Name = "fork"
	}
	return &Provider{opts: opts, fork: true}
}

func (p *Provider) Name() string { return p.opts.Name }

func (p *Provider) Capabilities() manager.Capabilities {
	return manager.Capabilities{OutputSchema: true, DepthLimit: true, ToolFilter: true, Persona: true}
}

func (p *Provider) InheritsParentContext() bool { return p.fork }

func (p *Provider) Description() string {
	if p.fork {
		return "an in-process agent starting from a copy of your completed turns"
	}
	return "a fresh in-process agent with workspace tools in its cwd"
}

// ToolNames lists every tool a child of this provider can have.
func (p *Provider) ToolNames() []string {
	names := workspace.Names(p.opts.Shell)
	if p.opts.DelegationTools != nil {
		for _, t := range p.opts.DelegationTools(manager.ParentRef{}) {
			names = append(names, t.Def().Name)
		}
	}
	sort.Strings(names)
	return names
}

// basePrompt is given to every child, before the persona.
const basePrompt = "You are a delegated subagent. Your parent gave you a task; do it with the tools you have, then answer with your result as your final message. Your permission scope was fixed when you were started: you cannot widen it."

// build assembles a child agent: workspace tools in cwd, delegation tools
// for self, the filter over all of them, the persona over the deployment's.
func (p *Provider) build(cwd string, filter *manager.ToolFilter, persona string, schema []byte, journal *agent.Journal, self manager.ParentRef, budget func(bool) error) (*agent.Agent, error) {
	ws, err := workspace.Tools(workspace.Options{Root: cwd, Shell: p.opts.Shell})
	if err != nil {
		return nil, &manager.Error{Code: manager.CodeInvalidRequest, Provider: p.opts.Name, Message: "cwd: " + err.Error()}
	}
	tools := ws
	if p.opts.DelegationTools != nil {
		tools = append(tools, p.opts.DelegationTools(self)...)
	}
	if filter != nil {
		kept := tools[:0:0]
		for _, t := range tools {
			if filter.Keeps(t.Def().Name) {
				kept = append(kept, t)
			}
		}
		tools = kept
	}
	if persona == "" {
		persona = p.opts.Persona
	}
	system := basePrompt
	if persona != "" {
		system += "\n\n" + persona
	}
	a, err := agent.New(agent.Config{Client: p.opts.Client, Model: p.opts.Model, System: system, Tools: tools,
		MaxSteps: p.opts.MaxSteps, MaxTokens: p.opts.MaxTokens, OutputSchema: schema, Journal: journal, Budget: budget})
	if err != nil {
		return nil, &manager.Error{Code: manager.CodeInvalidRequest, Provider: p.opts.Name, Message: err.Error()}
	}
	return a, nil
}

// seed returns the journal a new child starts from: empty for spawn, the
// parent's completed turns for fork.
func (p *Provider) seed(parent manager.ParentRef) ([]agent.Event, error) {
	if !p.fork {
		return nil, nil
	}
	if parent.CompletedTurns == nil {
		return nil, &manager.Error{Code: manager.CodeInvalidRequest, Provider: p.opts.Name,
			Message: "fork needs an in-process parent with a conversation to copy; a root MCP client has none, so use spawn instead"}
	}
	return parent.CompletedTurns(), nil
}

// Prepare supplies a new child's seed and model.
func (p *Provider) Prepare(ctx context.Context, req manager.StartRequest) (manager.CreationInputs, error) {
	seed, err := p.seed(req.Parent)
	if err != nil {
		return manager.CreationInputs{}, err
	}
	return manager.CreationInputs{Seed: seed, Model: p.opts.Model}, nil
}

// Continuable marks spawn and fork children as continuable: the agent
// loop rebuilds from its journal.
func (p *Provider) Continuable() {}

// NewDriver builds a child's agent from its descriptor and journal: for a
// one-shot run, a new child and a cold resume alike.
func (p *Provider) NewDriver(ctx context.Context, req manager.DriverRequest) (manager.Driver, error) {
	d := req.Descriptor
	a, err := p.build(req.Header.Cwd, d.ToolFilter, d.Persona, d.OutputSchema, req.Journal, req.Self, req.Budget)
	if err != nil {
		return nil, err
	}
	return driver{a}, nil
}

type driver struct{ a *agent.Agent }

func (d driver) RunTurn(ctx context.Context, inputs []agent.Input) agent.TurnResult {
	return d.a.RunTurnWith(ctx, inputs)
}
func (d driver) Journal() *agent.Journal { return d.a.Journal() }
func (driver) Close() error              { return nil }
