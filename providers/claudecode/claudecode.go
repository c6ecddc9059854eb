package claudecode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/providers/internal/extturn"
	"github.com/mcp-subagent/mcp-subagent/providers/internal/proc"
	"github.com/mcp-subagent/mcp-subagent/schemas"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// DefaultName is the provider's name when Options.Name is empty.
const DefaultName = "claude-code"

// Options configures a Provider. Zero values mean the defaults given.
type Options struct {
	Name string // zero: DefaultName
	// Command is the CLI; zero: "claude". A name without a slash is looked
	// up on the server's PATH when a child starts (or resumes).
	Command string
	// Args are extra arguments, placed before the provider's own flags.
	Args []string
	// Env is the child's whole environment: nothing of the server's own
	// environment reaches the CLI unless it is listed here, and the provider
	// adds nothing. The CLI needs at least HOME (or CLAUDE_CONFIG_DIR, where
	// it keeps sessions) and its credentials (ANTHROPIC_API_KEY, …).
	Env []string
	// EnvFor, when set, is the environment of a child started under a root
	// session's settings (seam.Settings: its PATH, its keys), for
	// principal; it replaces Env for that child. Nil: Env for every child.
	EnvFor func(principal string, s *seam.Settings) []string
	Model  string // zero: the CLI's default; passed as --model
	// PermissionMode is passed as --permission-mode; zero: "dontAsk", which
	// denies every tool use not pre-approved, so no approval is ever left
	// pending. Others: acceptEdits, bypassPermissions, default, plan, auto.
	PermissionMode string
	// Confine confines the agent's process and everything it starts
	// (sandbox.Agent): Mode sandbox.WorkspaceWrite writes only in the
	// child's cwd, a temp dir of its own and its state ($CLAUDE_CONFIG_DIR, else ~/.claude and
	// ~/.claude.json), reads
	// nothing else of the home directory, with the network on. Zero Mode
	// or sandbox.Unconfined: the agent runs with the server's authority.
	// The provider adds the state directories to StateDirs.
	Confine sandbox.Agent
	// Ask holds each tool use the permission mode does not allow open
	// and asks the person (through the manager, seam.DriverRequest.Ask):
	// the CLI runs with --permission-prompt-tool naming the callback
	// server's seam.PromptTool, and permission mode "default" unless
	// PermissionMode says otherwise. Nobody answering within
	// QuestionTimeout denies it, recorded as timed out. Without a store
	// or a callback nobody can be asked: the permission mode decides.
	Ask bool
	// QuestionTimeout is how long a question waits under Ask; zero:
	// seam.DefaultQuestionTimeout.
	QuestionTimeout time.Duration
	// Timeout bounds one turn; zero: none. A turn that runs out is stopped
	// (its whole process group) and ends with StopError.
	Timeout time.Duration
	Logger  *slog.Logger // nil: discarded
}

// Provider runs Claude Code CLI children. It is safe for concurrent use.
type Provider struct {
	opts Options
	log  *slog.Logger
}

var (
	_ seam.Provider    = (*Provider)(nil)
	_ seam.Continuable = (*Provider)(nil)
	_ seam.Describer   = (*Provider)(nil)
)

// New returns a claude-code provider.
func New(opts Options) *Provider {
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	if opts.Command == "" {
		opts.Command = "claude"
	}
	if opts.PermissionMode == "" {
		opts.PermissionMode = "dontAsk"
		if opts.Ask {
			// dontAsk denies without consulting the prompt tool.
			opts.PermissionMode = "default"
		}
	}
	if opts.Ask && opts.QuestionTimeout <= 0 {
		opts.QuestionTimeout = seam.DefaultQuestionTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Provider{opts: opts, log: log}
}

// Name returns the provider's registered name.
func (p *Provider) Name() string { return p.opts.Name }

// Capabilities are true only where the tests show the CLI honours them;
// see the package documentation for the table.
func (p *Provider) Capabilities() seam.Capabilities {
	return seam.Capabilities{OutputSchema: true, DepthLimit: true, ToolFilter: true, Persona: true}
}

// InheritsParentContext is false: a child starts a fresh Claude session.
func (p *Provider) InheritsParentContext() bool { return false }

// Description describes the provider for the subagent tool.
func (p *Provider) Description() string {
	if p.opts.Ask {
		return "a Claude Code CLI agent (claude -p) in its cwd with Claude's own tools; tools that need approval are asked of you (answer with send_message answer_to)"
	}
	return "a Claude Code CLI agent (claude -p) in its cwd with Claude's own tools; it runs headless: tools that need approval are denied unless allowed"
}

// Prepare supplies a new child's creation inputs: the model (the
// request's Claude model id, else Options.Model) and the effort. The
// Claude session id is chosen by the first turn and recorded in the
// journal as a session event once the CLI confirms it.
func (p *Provider) Prepare(ctx context.Context, req seam.StartRequest) (seam.CreationInputs, error) {
	if err := ctx.Err(); err != nil {
		return seam.CreationInputs{}, err
	}
	model := req.Model
	if model == "" {
		model = p.opts.Model
	}
	return seam.CreationInputs{Model: model, Effort: req.Effort}, nil
}

// Continuable marks Claude Code children as continuable: a later turn
// resumes (--resume) the session the journal recorded.
func (p *Provider) Continuable() {}

// NewDriver builds a child's driver from its descriptor and journal, for a
// one-shot run, a new child and a cold resume alike: the session comes
// from the journal's last session event, the cwd from the header. A
// one-shot run's session is not persisted by the CLI either
// (--no-session-persistence).
func (p *Provider) NewDriver(ctx context.Context, req seam.DriverRequest) (seam.Driver, error) {
	d := req.Descriptor
	model := d.Model
	if model == "" {
		model = p.opts.Model
	}
	drv, err := p.newDriver(turnConfig{cwd: req.Header.Cwd, model: model, effort: llm.Effort(d.Effort), persona: d.Persona, filter: d.ToolFilter,
		schema: d.OutputSchema, callback: req.Callback, session: d.Session, ephemeral: req.OneShot(),
		env: p.envFor(req.Header.Principal, d.Settings)}, req.Journal)
	if err != nil {
		return nil, err
	}
	if p.opts.Ask && req.Ask != nil && req.Callback.URL != "" && req.Callback.ServePrompts != nil {
		drv.ask = req.Ask
		req.Callback.ServePrompts(drv.prompt)
	}
	return drv, nil
}

// envFor is the environment of a child under settings s.
func (p *Provider) envFor(principal string, s *seam.Settings) []string {
	if s == nil || p.opts.EnvFor == nil {
		return p.opts.Env
	}
	return p.opts.EnvFor(principal, s)
}

// turnConfig is what every turn of one child is run with.
type turnConfig struct {
	cwd       string
	model     string
	effort    llm.Effort // --effort; empty: the CLI's default
	persona   string
	filter    *seam.ToolFilter
	schema    json.RawMessage
	callback  seam.Callback
	session   string   // the descriptor's session, used when the journal has none
	ephemeral bool     // one-shot: no session kept
	env       []string // the child's environment (Options.Env, or EnvFor's)
}

func (p *Provider) newDriver(cfg turnConfig, journal *agent.Journal) (*driver, error) {
	path, err := extturn.LookPath(p.opts.Command, cfg.env)
	if err == nil {
		// The process runs in the child's cwd, where a relative path would
		// name another file.
		path, err = filepath.Abs(path)
	}
	if err != nil {
		return nil, &seam.Error{Code: seam.CodeInvalidRequest, Provider: p.opts.Name,
			Message: fmt.Sprintf("the Claude Code CLI %q was not found: %v", p.opts.Command, err), Err: err}
	}
	d := &driver{p: p, path: path, cfg: cfg, journal: journal}
	if len(cfg.schema) > 0 {
		compact, err := compactJSON(cfg.schema)
		if err != nil {
			return nil, &seam.Error{Code: seam.CodeInvalidRequest, Provider: p.opts.Name, Message: "output_schema: " + err.Error()}
		}
		d.cfg.schema = compact
		rs, err := agent.ResolveObjectSchema(compact)
		if err != nil {
			return nil, &seam.Error{Code: seam.CodeInvalidRequest, Provider: p.opts.Name, Message: "output_schema: " + err.Error()}
		}
		d.resolved = rs
	}
	return d, nil
}

// compactJSON puts a schema on one line for the command line, keeping its
// bytes otherwise (no number is rounded through float64).
func compactJSON(raw json.RawMessage) (json.RawMessage, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// validate checks a structured output against the child's schema, with
// the depth and work bounds of schemas.Output.
func validate(o *schemas.Output, raw json.RawMessage) error {
	_, err := o.ValidateJSON(raw)
	return err
}

// confinement is Options.Confine with Claude Code's state writable:
// $CLAUDE_CONFIG_DIR (which then also holds its .claude.json), else
// ~/.claude and ~/.claude.json, created holding {} when missing (sessions,
// which a resume reads, settings, sign-in), read from env, the child's
// environment (a session's, under its settings).
func (p *Provider) confinement(env []string) sandbox.Agent {
	c := p.opts.Confine
	if !c.Confined() {
		return c
	}
	if dir := proc.Getenv(env, "CLAUDE_CONFIG_DIR"); dir != "" {
		c.StateDirs = append([]string{dir}, c.StateDirs...)
		return c
	}
	home := proc.HomeDir(env)
	// An empty configuration where there is none: Claude Code would create
	// it by a rename in the home directory, which it cannot write.
	proc.CreateIfMissing(filepath.Join(home, ".claude.json"), "{}\n")
	c.StateDirs = append([]string{filepath.Join(home, ".claude")}, c.StateDirs...)
	c.StateFiles = append([]string{filepath.Join(home, ".claude.json")}, c.StateFiles...)
	return c
}
