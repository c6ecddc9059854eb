// Package spawn provides the in-process providers: spawn, a fresh agent loop
// over an OpenAI-compatible chat API, and fork, the same loop seeded with
// the parent's completed turns.
//
// Children get the workspace tools confined to their cwd, the delegation
// tools the deployment wires in (so nesting works, with depth enforced by
// the manager), with an output schema the structured_output tool, and the
// ask_user tool when the deployment lets them ask the person
// (Options.AskUser; askuser.go). The tool filter applies to all of them: a
// filtered tool is absent from what the model is shown and refuses to run. A persona shadows the deployment
// persona for that child only.
//
// A child runs on one of the deployment's models (Options.Models), chosen
// by name per request (StartRequest.Model; empty: the first, or for fork
// its parent's model), at the request's effort (empty: the model's). The
// descriptor records the name and the effort asked for, so follow-ups and
// cold resumes run on the same model: a child whose model is no longer
// configured is not rebuilt (NOT_RESUMABLE), never moved to another. A
// descriptor written before models had names recorded the model id; it is
// matched against the configured ids.
//
// A child started under a root session's settings (Descriptor.Settings)
// runs on that session's models instead (Options.ModelsFor: its model
// address, key and model, its config's models), on a fresh start, a
// follow-up and a cold resume alike.
//
// A provider contributes the seed (fork's: the caller's completed turns,
// read through ParentRef.CompletedTurns) and the agent loop as the driver;
// the manager runs every child, one-shot or continuable, from it.
package spawn

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/agent/workspace"
	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Model is one model children can run on.
type Model struct {
	Name   string     // what a request chooses it by (StartRequest.Model)
	Client llm.Client // required
	ID     string     // the model id sent to the API; zero: the client's default
	// MaxTokens bounds one answer; zero: Options.MaxTokens.
	MaxTokens int64
	Effort    llm.Effort // the default effort; zero: the backend's
}

// DefaultModel is the name of the model Client and Model make when
// Options.Models is empty.
const DefaultModel = "default"

// Options configures a provider. Zero values mean the defaults given.
type Options struct {
	Name string // zero: "spawn" (or "fork")
	// Models are the models children can run on, the default first; names
	// are unique and non-empty. Zero: one model named DefaultModel over
	// Client and Model.
	Models  []Model
	Client  llm.Client // required when Models is empty
	Model   string     // zero: the client's default
	Persona string     // the deployment persona; zero: none
	Shell   bool       // give children run_shell
	// Sandbox confines run_shell (workspace.Options.Sandbox): zero Mode is
	// workspace-write. CacheRoot, when set, holds each child's tool caches
	// in a directory named for the child (Sandbox.CacheDir); zero: each
	// command's temp dir holds them.
	Sandbox   sandbox.Policy
	CacheRoot string
	// MaxSteps bounds the model calls of one turn; zero: agent.DefaultMaxSteps.
	MaxSteps  int
	MaxTokens int64 // bounds one answer of a model that sets none; zero: the server's default
	// DelegationTools returns the delegation tools for a child, which calls
	// them as self. Nil: children cannot delegate.
	DelegationTools func(self seam.ParentRef) []agent.Tool
	// ModelsFor returns the models of the children started under a root
	// session's settings (seam.Settings: its model address, key and
	// model, its config's models), for principal; nil: Models for all.
	// It is asked only when a child has settings.
	ModelsFor func(principal string, s *seam.Settings) ([]Model, error)
	// AskUser gives children the ask_user tool (config spawn.permission
	// "ask"), when the person can be asked (seam.DriverRequest.Ask: a
	// store); QuestionTimeout bounds each question (zero:
	// seam.DefaultQuestionTimeout).
	AskUser         bool
	QuestionTimeout time.Duration
	Logger          *slog.Logger
}

// Provider runs in-process children.
type Provider struct {
	opts Options
	fork bool
}

var (
	_ seam.Provider    = (*Provider)(nil)
	_ seam.ToolNamer   = (*Provider)(nil)
	_ seam.Continuable = (*Provider)(nil)
	_ seam.ModelNamer  = (*Provider)(nil)
)

// New returns the spawn provider.
func New(opts Options) *Provider {
	if opts.Name == "" {
		opts.Name = "spawn"
	}
	return &Provider{opts: withModels(opts)}
}

func withModels(opts Options) Options {
	if opts.AskUser && opts.QuestionTimeout <= 0 {
		opts.QuestionTimeout = seam.DefaultQuestionTimeout
	}
	if len(opts.Models) == 0 {
		opts.Models = []Model{{Name: DefaultModel, Client: opts.Client, ID: opts.Model}}
	}
	return opts
}

// NewFork returns the fork provider: children start from the parent's
// completed turns, so they need an in-process parent with a journal.
func NewFork(opts Options) *Provider {
	if opts.Name == "" {
		opts.Name = "fork"
	}
	return &Provider{opts: withModels(opts), fork: true}
}

func (p *Provider) Name() string { return p.opts.Name }

func (p *Provider) Capabilities() seam.Capabilities {
	return seam.Capabilities{OutputSchema: true, DepthLimit: true, ToolFilter: true, Persona: true}
}

func (p *Provider) InheritsParentContext() bool { return p.fork }

func (p *Provider) Description() string {
	if p.fork {
		return "an in-process agent starting from a copy of your completed turns"
	}
	return "a fresh in-process agent with workspace tools in its cwd"
}

// Models lists the model names a request may choose, the default first
// (the deployment's; a session's config may name others).
func (p *Provider) Models() []string { return names(p.opts.Models) }

// models are the models of children under settings s of principal: the
// session's (Options.ModelsFor) when s is set, else the deployment's.
func (p *Provider) models(principal string, s *seam.Settings) ([]Model, error) {
	if s == nil || p.opts.ModelsFor == nil {
		return p.opts.Models, nil
	}
	ms, err := p.opts.ModelsFor(principal, s)
	if err != nil {
		return nil, &seam.Error{Code: seam.CodeInvalidRequest, Provider: p.opts.Name, Message: err.Error()}
	}
	if len(ms) == 0 {
		return p.opts.Models, nil
	}
	return ms, nil
}

// model finds a configured model by name; a name that matches none is
// tried as a model id, which is what descriptors recorded before models
// had names.
func model(models []Model, name string) (Model, bool) {
	for _, m := range models {
		if m.Name == name {
			return m, true
		}
	}
	for _, m := range models {
		if m.ID != "" && m.ID == name {
			return m, true
		}
	}
	return Model{}, false
}

// choose resolves a new child's model: the one the request names, else
// (fork) its parent's, else the default.
func (p *Provider) choose(req seam.StartRequest) (Model, error) {
	models, err := p.models(req.Parent.Principal, req.Parent.Settings)
	if err != nil {
		return Model{}, err
	}
	if req.Model != "" {
		if m, ok := model(models, req.Model); ok && m.Name == req.Model {
			return m, nil
		}
		return Model{}, &seam.Error{Code: seam.CodeInvalidRequest, Provider: p.opts.Name,
			Message: fmt.Sprintf("field \"model\": no model named %q is configured; choose one of: %s", req.Model, strings.Join(names(models), ", "))}
	}
	if p.fork && req.Parent.Model != "" {
		if m, ok := model(models, req.Parent.Model); ok {
			return m, nil
		}
	}
	return models[0], nil
}

func names(models []Model) []string {
	out := make([]string, len(models))
	for i, m := range models {
		out[i] = m.Name
	}
	return out
}

// ToolNames lists every tool a child of this provider can have.
func (p *Provider) ToolNames() []string {
	names := workspace.Names(p.opts.Shell)
	if p.opts.AskUser {
		names = append(names, AskUserTool)
	}
	if p.opts.DelegationTools != nil {
		for _, t := range p.opts.DelegationTools(seam.ParentRef{}) {
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
func (p *Provider) build(d seam.Descriptor, cwd string, journal *agent.Journal, self seam.ParentRef, budget func(bool) error, ask seam.AskFunc) (*agent.Agent, error) {
	models, err := p.models(self.Principal, d.Settings)
	if err != nil {
		return nil, err
	}
	m, ok := model(models, d.Model)
	if d.Model == "" {
		m, ok = models[0], true // a descriptor from before models were recorded
	}
	if !ok {
		return nil, &seam.Error{Code: seam.CodeInvalidRequest, Provider: p.opts.Name,
			Message: fmt.Sprintf("its model %q is no longer configured (configured: %s); it is not moved to another model: start a new child", d.Model, strings.Join(names(models), ", "))}
	}
	filter, persona := d.ToolFilter, d.Persona
	pol := p.opts.Sandbox
	if p.opts.CacheRoot != "" && safeName(self.AgentID) {
		pol.CacheDir = filepath.Join(p.opts.CacheRoot, self.AgentID)
	}
	ws, err := workspace.Tools(workspace.Options{Root: cwd, Shell: p.opts.Shell, Sandbox: pol})
	if err != nil {
		return nil, &seam.Error{Code: seam.CodeInvalidRequest, Provider: p.opts.Name, Message: "cwd: " + err.Error()}
	}
	tools := ws
	if p.opts.AskUser && ask != nil {
		tools = append(tools, askUser{ask: ask, timeout: p.opts.QuestionTimeout})
	}
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
	maxTokens, effort := m.MaxTokens, d.Effort
	if maxTokens == 0 {
		maxTokens = p.opts.MaxTokens
	}
	if effort == "" {
		effort = seam.Effort(m.Effort)
	}
	a, err := agent.New(agent.Config{Client: m.Client, Model: m.ID, System: system, Tools: tools,
		MaxSteps: p.opts.MaxSteps, MaxTokens: maxTokens, Effort: llm.Effort(effort), OutputSchema: d.OutputSchema, Journal: journal, Budget: budget})
	if err != nil {
		return nil, &seam.Error{Code: seam.CodeInvalidRequest, Provider: p.opts.Name, Message: err.Error()}
	}
	return a, nil
}

// seed returns the journal a new child starts from: empty for spawn, the
// parent's completed turns for fork.
func (p *Provider) seed(parent seam.ParentRef) ([]agent.Event, error) {
	if !p.fork {
		return nil, nil
	}
	if parent.CompletedTurns == nil {
		return nil, &seam.Error{Code: seam.CodeInvalidRequest, Provider: p.opts.Name,
			Message: "fork needs an in-process parent with a conversation to copy; a root MCP client has none, so use spawn instead"}
	}
	return parent.CompletedTurns(), nil
}

// Prepare supplies a new child's seed, model name and effort.
func (p *Provider) Prepare(ctx context.Context, req seam.StartRequest) (seam.CreationInputs, error) {
	m, err := p.choose(req)
	if err != nil {
		return seam.CreationInputs{}, err
	}
	seed, err := p.seed(req.Parent)
	if err != nil {
		return seam.CreationInputs{}, err
	}
	return seam.CreationInputs{Seed: seed, Model: m.Name, Effort: req.Effort}, nil
}

// Continuable marks spawn and fork children as continuable: the agent
// loop rebuilds from its journal.
func (p *Provider) Continuable() {}

// NewDriver builds a child's agent from its descriptor and journal: for a
// one-shot run, a new child and a cold resume alike.
func (p *Provider) NewDriver(ctx context.Context, req seam.DriverRequest) (seam.Driver, error) {
	d := req.Descriptor
	a, err := p.build(d, req.Header.Cwd, req.Journal, req.Self, req.Budget, req.Ask)
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

// GatesSideEffects: the agent asks the budget hook before each tool round,
// so a new child's model call may overlap the commit of its record.
func (driver) GatesSideEffects() {}
func (driver) Close() error      { return nil }

// safeName reports whether id can name a directory: not empty, no
// separator, not a dot name.
func safeName(id string) bool {
	if id == "" || id == "." || id == ".." {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}
