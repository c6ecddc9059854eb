package acp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Permission policies for the agent's session/request_permission calls.
const (
	PermissionDeny  = "deny"  // the default: every request is rejected and recorded in the diagnostic
	PermissionAllow = "allow" // every request is allowed once; explicit configuration only
	// PermissionAsk holds each request open and asks the person (through
	// the manager, seam.DriverRequest.Ask); nobody answering within
	// QuestionTimeout is the deny policy's answer, recorded as timed out.
	PermissionAsk = "ask"
)

// Options configures a provider. Zero values mean the defaults given.
type Options struct {
	// Name is the provider's name in the registry; zero: "acp".
	Name string
	// Command is the agent's executable (a path, or a name looked up on the
	// server's PATH when New runs). Required.
	Command string
	// Args are the agent's arguments, without the executable.
	Args []string
	// Env is the agent's whole environment ("KEY=value"): nothing of the
	// server's own environment leaks into the child. Zero: an empty
	// environment (real agents usually need at least HOME and PATH).
	Env []string
	// EnvFor, when set, is the environment of a child started under a root
	// session's settings (seam.Settings: its PATH, its keys), for
	// principal; it replaces Env for that child (the preset's variables
	// are added to it as to Env). Nil: Env for every child. The command
	// itself is resolved once, on the server's PATH.
	EnvFor func(principal string, s *seam.Settings) []string
	// Permission is the policy for the agent's permission requests:
	// PermissionDeny (zero), PermissionAllow or PermissionAsk.
	Permission string
	// QuestionTimeout is how long a question to the person waits under
	// PermissionAsk before the deny policy answers; zero:
	// DefaultQuestionTimeout.
	QuestionTimeout time.Duration
	// Confine confines the agent's process and everything it starts
	// (sandbox.Agent): Mode sandbox.WorkspaceWrite writes only in the
	// child's cwd, a temp dir of its own and its state (for a known agent
	// its directories under HOME, see the package doc), reads
	// nothing else of the home directory, with the network on. Zero Mode
	// or sandbox.Unconfined: the agent runs with the server's authority.
	// The provider adds the state directories to StateDirs.
	Confine sandbox.Agent
	// Timeout bounds one turn, starting the agent included; a turn that
	// runs longer is cancelled and ends with StopError. Zero: no bound
	// (interrupt and shutdown still end it).
	Timeout time.Duration
	// NoPreset turns off what a known agent (qwen, gemini, opencode,
	// copilot, claude-code-acp, claude-agent-acp, by executable name) gets
	// added to Args and Env when missing (see the package doc).
	NoPreset bool
	// Logger receives the provider's logs; nil: discarded.
	Logger *slog.Logger
}

// DefaultQuestionTimeout is Options.QuestionTimeout's default.
const DefaultQuestionTimeout = 10 * time.Minute

// Provider runs children as Agent Client Protocol agents over stdio.
type Provider struct {
	opts   Options
	path   string // the resolved Command
	preset *preset
	// awaitTools, transcriptUsage: the preset's.
	awaitTools, transcriptUsage bool
	log                         *slog.Logger
}

var (
	_ seam.Provider    = (*Provider)(nil)
	_ seam.Continuable = (*Provider)(nil)
	_ seam.Describer   = (*Provider)(nil)
)

// New returns an ACP provider. It fails, naming the field, when Command is
// missing or not found, Permission is unknown or Timeout is negative.
func New(opts Options) (*Provider, error) {
	if opts.Name == "" {
		opts.Name = "acp"
	}
	if opts.Command == "" {
		return nil, errors.New("acp: Options.Command is required: the ACP agent's executable")
	}
	path, err := exec.LookPath(opts.Command)
	if err != nil {
		return nil, fmt.Errorf("acp: Options.Command %q: %w", opts.Command, err)
	}
	if path, err = filepath.Abs(path); err != nil {
		return nil, fmt.Errorf("acp: Options.Command %q: %w", opts.Command, err)
	}
	switch opts.Permission {
	case "":
		opts.Permission = PermissionDeny
	case PermissionDeny, PermissionAllow, PermissionAsk:
	default:
		return nil, fmt.Errorf("acp: Options.Permission %q: want %q, %q or %q", opts.Permission, PermissionDeny, PermissionAllow, PermissionAsk)
	}
	switch {
	case opts.QuestionTimeout < 0:
		return nil, fmt.Errorf("acp: Options.QuestionTimeout %v must not be negative", opts.QuestionTimeout)
	case opts.QuestionTimeout == 0:
		opts.QuestionTimeout = DefaultQuestionTimeout
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("acp: Options.Timeout %v must not be negative", opts.Timeout)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts.Args = append([]string(nil), opts.Args...)
	opts.Env = append([]string(nil), opts.Env...)
	p := &Provider{opts: opts, path: path, log: log.With("provider", opts.Name)}
	if pr, ok := presetFor(opts.Command, path); ok && !opts.NoPreset {
		p.opts.Args, p.opts.Env = pr.apply(opts.Args, opts.Env, runningAsRoot)
		p.preset = &pr
		p.awaitTools, p.transcriptUsage = pr.awaitTools, pr.transcriptUsage
	}
	return p, nil
}

// Name returns the provider's registry name.
func (p *Provider) Name() string { return p.opts.Name }

// Capabilities are all false: ACP has no standard way to ask an agent for
// an output schema, a tool filter or a persona, and an agent may nest
// agents of its own that no depth cap of ours can see (see the package doc).
func (p *Provider) Capabilities() seam.Capabilities { return seam.Capabilities{} }

// InheritsParentContext is false: the child starts from its prompt only.
func (p *Provider) InheritsParentContext() bool { return false }

// Description describes the provider for the tool's description.
func (p *Provider) Description() string {
	return fmt.Sprintf("an external Agent Client Protocol agent (%s) working in its cwd; it has its own tools, and its permission requests are %s",
		filepath.Base(p.path), map[string]string{PermissionDeny: "denied", PermissionAllow: "allowed", PermissionAsk: "asked of you"}[p.opts.Permission])
}

// Prepare supplies a new child's creation inputs. The ACP session id is
// not known yet: the first turn opens the session and records its id in
// the journal.
func (p *Provider) Prepare(ctx context.Context, req seam.StartRequest) (seam.CreationInputs, error) {
	for _, f := range []struct{ name, value string }{{"model", req.Model}, {"effort", string(req.Effort)}} {
		if f.value != "" {
			return seam.CreationInputs{}, &seam.Error{Code: seam.CodeUnsupportedCapability, Provider: p.opts.Name,
				Message: fmt.Sprintf("field %q: provider %q (ACP) cannot choose a model or effort; remove it, or set the agent's model in its command line in the config", f.name, p.opts.Name)}
		}
	}
	if _, err := absCwd(req.Cwd); err != nil {
		return seam.CreationInputs{}, &seam.Error{Code: seam.CodeInvalidRequest, Provider: p.opts.Name, Message: "cwd: " + err.Error()}
	}
	return seam.CreationInputs{}, nil
}

// Continuable marks ACP children as continuable: a later activation
// loads the journal's session where the agent offers loadSession, else
// continues in a new one (see the package doc).
func (p *Provider) Continuable() {}

// NewDriver builds the driver of a one-shot run, a new child or a resumed
// one. It starts nothing: the agent process is started by the first turn
// that needs it, and Close (when the run is disposed, or the activation
// settles) stops it.
func (p *Provider) NewDriver(ctx context.Context, req seam.DriverRequest) (seam.Driver, error) {
	d, err := p.newDriver(req.Header.ID, req.Header.Cwd, req.Descriptor.Session, req.Journal, req.Callback)
	if err != nil {
		return nil, err
	}
	d.ask = req.Ask
	if req.Descriptor.Settings != nil && p.opts.EnvFor != nil {
		d.env = p.opts.EnvFor(req.Header.Principal, req.Descriptor.Settings)
		if p.preset != nil {
			_, d.env = p.preset.apply(nil, d.env, runningAsRoot)
		}
	}
	return d, nil
}

func (p *Provider) newDriver(id, cwd, session string, journal *agent.Journal, cb seam.Callback) (*driver, error) {
	abs, err := absCwd(cwd)
	if err != nil {
		return nil, &seam.Error{Code: seam.CodeInvalidRequest, Provider: p.opts.Name, Message: "cwd: " + err.Error()}
	}
	return &driver{p: p, id: id, cwd: abs, descSession: session, journal: journal, callback: cb,
		env: p.opts.Env, log: p.log.With("agent_id", id)}, nil
}

// absCwd makes a child's working directory absolute, as session/new
// requires; empty means the server's.
func absCwd(cwd string) (string, error) {
	return filepath.Abs(cwd)
}
