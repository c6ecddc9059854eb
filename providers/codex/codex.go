package codex

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/providers/internal/extturn"
	"github.com/mcp-subagent/mcp-subagent/providers/internal/proc"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// TokenEnv is the environment variable through which a child's Codex gets
// the bearer token for this server's MCP endpoint: Codex reads it through
// mcp_servers.subagent.bearer_token_env_var, so the token never appears on
// a command line.
const TokenEnv = "MCP_SUBAGENT_TOKEN"

// ServerName is the name under which a child's Codex knows this server as an
// MCP server (its tools reach the model as subagent.<tool>).
const ServerName = "subagent"

// DefaultSandbox is the sandbox a child's commands run in when
// Options.Sandbox is zero and Options.Confine does not confine.
const DefaultSandbox = "workspace-write"

// Options configures a provider. Zero values mean the defaults given.
type Options struct {
	Name    string   // zero: "codex"
	Command string   // the codex executable; zero: "codex" looked up on the server's PATH
	Args    []string // extra arguments placed right after "exec" (e.g. --ignore-rules)
	// Env is the child's whole environment: nothing of the server's own
	// environment leaks in. Codex needs HOME (or CODEX_HOME) and, for the npm
	// launcher, a PATH that finds node; list them here. TokenEnv is added
	// when the child gets a callback endpoint. The child's Codex loads none
	// of the user's config.toml; the provider reads its model settings from
	// $CODEX_HOME (else $HOME/.codex) as set here and passes them on (see
	// the package documentation, Isolation).
	Env []string
	// EnvFor, when set, is the environment of a child started under a root
	// session's settings (seam.Settings: its PATH, its keys), for
	// principal; it replaces Env for that child. Nil: Env for every child.
	EnvFor func(principal string, s *seam.Settings) []string
	Model  string // -m; zero: Codex's configured model
	// Sandbox is the -s sandbox for the child's commands (read-only,
	// workspace-write, danger-full-access); zero: DefaultSandbox, or
	// danger-full-access when Confine confines (Codex's sandbox cannot run
	// inside ours, which confines its commands instead).
	Sandbox string
	// Config holds extra -c key=value overrides (value in TOML), applied
	// after the provider's own, so an explicit setting here wins (for
	// example approval_policy). Settings of the user's config.toml other
	// than the model settings do not reach a child; what it needs of them
	// goes here.
	Config []string
	// Confine confines the agent's process and everything it starts
	// (sandbox.Agent): Mode sandbox.WorkspaceWrite writes only in the
	// child's cwd, a temp dir of its own and its state ($CODEX_HOME, else $HOME/.codex), reads
	// nothing else of the home directory, with the network on. Zero Mode
	// or sandbox.Unconfined: the agent runs with the server's authority.
	// The provider adds the state directories to StateDirs.
	Confine sandbox.Agent
	// Timeout bounds one turn; when it passes, the whole process group is
	// stopped and the turn ends with an error. Zero: no bound.
	Timeout time.Duration
	Logger  *slog.Logger // nil: silent
}

// Provider runs Codex CLI children.
type Provider struct {
	opts Options
	log  *slog.Logger
}

var (
	_ seam.Provider    = (*Provider)(nil)
	_ seam.Continuable = (*Provider)(nil)
	_ seam.Describer   = (*Provider)(nil)
)

// New returns a codex provider.
func New(opts Options) *Provider {
	if opts.Name == "" {
		opts.Name = "codex"
	}
	if opts.Command == "" {
		opts.Command = "codex"
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	switch {
	case opts.Confine.Confined() && opts.Sandbox == "":
		// Confined, ours is the sandbox: Codex's own cannot run inside it
		// (it runs bubblewrap, which needs the user namespaces our seccomp
		// filter refuses; its legacy Landlock variant refuses to restrict
		// the file system without bubblewrap), and every command Codex runs
		// is confined with it anyway.
		opts.Sandbox = "danger-full-access"
	case opts.Confine.Confined() && opts.Sandbox != "danger-full-access":
		log.Warn("codex's own sandbox cannot run inside the confinement: its commands will fail; leave sandbox unset or set it to danger-full-access",
			"sandbox", opts.Sandbox)
	case opts.Sandbox == "":
		opts.Sandbox = DefaultSandbox
	}
	return &Provider{opts: opts, log: log}
}

// Name returns the provider's registered name.
func (p *Provider) Name() string { return p.opts.Name }

// Capabilities reports what a test shows Codex honours: output schemas
// (--output-schema), a persona (developer_instructions), and depth (its own
// sub-agents are switched off, so nesting goes only through this server).
// There is no tool filter: Codex's built-in tools cannot be listed and
// removed per child.
func (p *Provider) Capabilities() seam.Capabilities {
	return seam.Capabilities{OutputSchema: true, DepthLimit: true, Persona: true}
}

// InheritsParentContext is false: a Codex child starts from its prompt only.
func (p *Provider) InheritsParentContext() bool { return false }

// Description describes the provider for the subagent tool.
func (p *Provider) Description() string {
	where := "Codex's sandbox (" + p.opts.Sandbox + ")"
	if p.opts.Confine.Confined() {
		where = "this server's sandbox (writes only in its cwd, network on)"
	}
	return "the Codex CLI as a child agent in its cwd: it reads, edits and runs commands in " + where +
		", never waits for approval, and keeps its Codex thread across follow-ups"
}

// envFor is the environment of a child under settings s.
func (p *Provider) envFor(principal string, s *seam.Settings) []string {
	if s == nil || p.opts.EnvFor == nil {
		return p.opts.Env
	}
	return p.opts.EnvFor(principal, s)
}

// command resolves the executable on the PATH of env, the child's.
func (p *Provider) command(env []string) (string, error) {
	path, err := extturn.LookPath(p.opts.Command, env)
	if err != nil {
		return "", &seam.Error{Code: seam.CodeInvalidRequest, Provider: p.opts.Name,
			Message: fmt.Sprintf("the codex command %q was not found; install @openai/codex or configure its path", p.opts.Command), Err: err}
	}
	return path, nil
}

// Prepare supplies a new child's creation inputs: the model (the
// request's Codex model id, else Options.Model) and the effort. The Codex
// thread id is not known until the first turn starts; the driver records
// it in the journal as a session event.
func (p *Provider) Prepare(ctx context.Context, req seam.StartRequest) (seam.CreationInputs, error) {
	if _, err := p.command(p.envFor(req.Parent.Principal, req.Parent.Settings)); err != nil {
		return seam.CreationInputs{}, err
	}
	model := req.Model
	if model == "" {
		model = p.opts.Model
	}
	return seam.CreationInputs{Model: model, Effort: req.Effort}, nil
}

// Continuable marks Codex children as continuable: a later turn resumes
// the Codex thread the journal recorded.
func (p *Provider) Continuable() {}

// NewDriver builds a child's driver from its header, descriptor and
// journal, for a one-shot run, a new child and a cold resume alike: the
// thread to continue is the last session the journal recorded. A one-shot
// run's thread is --ephemeral: Codex keeps nothing of it.
func (p *Provider) NewDriver(ctx context.Context, req seam.DriverRequest) (seam.Driver, error) {
	if req.Journal == nil {
		return nil, errors.New("codex: no journal")
	}
	model := req.Descriptor.Model
	if model == "" {
		model = p.opts.Model
	}
	return &driver{p: p, cwd: req.Header.Cwd, journal: req.Journal, callback: req.Callback, ephemeral: req.OneShot(),
		model: model, effort: llm.Effort(req.Descriptor.Effort), persona: req.Descriptor.Persona, schema: req.Descriptor.OutputSchema,
		session: req.Descriptor.Session, base: p.envFor(req.Header.Principal, req.Descriptor.Settings)}, nil
}

// args builds the command line of one turn. The exec-level options come
// before the resume subcommand, which takes the thread id; the prompt is
// "-": Codex reads it from stdin. Codex loads none of the user's
// config.toml (--ignore-user-config); carried are the -c overrides that
// bring over what the child needs of it (carriedSettings), placed first so
// that the provider's own settings and then Options.Config win.
func (d *driver) args(session, schemaFile string, carried []string) []string {
	o := d.p.opts
	args := []string{"exec"}
	args = append(args, o.Args...)
	args = append(args, "--json", "--skip-git-repo-check")
	if !d.p.ignoresUserConfig() {
		args = append(args, ignoreUserConfig)
	}
	args = append(args, "-s", o.Sandbox)
	if d.cwd != "" {
		args = append(args, "-C", d.cwd)
	}
	if d.model != "" {
		args = append(args, "-m", d.model)
	}
	if d.ephemeral {
		args = append(args, "--ephemeral")
	}
	cfg := append([]string(nil), carried...)
	cfg = append(cfg,
		// Headless: nothing may wait for an approval nobody can give; what
		// the sandbox refuses comes back to the model as a failed command.
		`approval_policy="never"`,
		// Codex's own sub-agents would nest beyond the manager's depth cap.
		"features.multi_agent=false",
		"features.multi_agent_v2=false",
	)
	if d.persona != "" {
		cfg = append(cfg, "developer_instructions="+tomlString(d.persona))
	}
	if d.callback.URL != "" {
		cfg = append(cfg, "mcp_servers."+ServerName+".url="+tomlString(d.callback.URL))
		if d.callback.Token != "" {
			cfg = append(cfg, "mcp_servers."+ServerName+".bearer_token_env_var="+tomlString(TokenEnv))
		}
		// Under approval_policy="never" Codex refuses every MCP tool call
		// that would need an approval; this server's own tools are
		// pre-approved, since it authorises each call itself (the token is
		// bound to this child; depth and ownership are the manager's).
		cfg = append(cfg, "mcp_servers."+ServerName+`.default_tools_approval_mode="approve"`)
	}
	cfg = append(cfg, o.Config...)
	if d.effort != "" {
		cfg = append(cfg, "model_reasoning_effort="+tomlString(string(d.effort)))
	}
	for _, kv := range cfg {
		args = append(args, "-c", kv)
	}
	if schemaFile != "" {
		args = append(args, "--output-schema", schemaFile)
	}
	if session != "" {
		args = append(args, "resume", session)
	}
	return append(args, "-")
}

// ignoresUserConfig reports whether Options.Args already keep Codex off
// the user's config.toml: then nothing of it is carried either.
func (p *Provider) ignoresUserConfig() bool {
	for _, a := range p.opts.Args {
		if a == ignoreUserConfig {
			return true
		}
	}
	return false
}

// carried reads the -c overrides that bring the user's model settings to
// this turn (see carriedSettings); none when Options.Args pass
// --ignore-user-config themselves.
func (d *driver) carried() ([]string, error) {
	if d.p.ignoresUserConfig() {
		return nil, nil
	}
	path := userConfigPath(d.base, d.cwd)
	kv, err := carriedSettings(path)
	if err != nil {
		return nil, fmt.Errorf("reading the user's Codex config %s failed: %w", path, err)
	}
	return kv, nil
}

// env is the child's whole environment: the configured one, plus the
// callback token when there is an endpoint.
func (d *driver) env() []string {
	env := make([]string, 0, len(d.base)+1)
	for _, kv := range d.base {
		if strings.HasPrefix(kv, TokenEnv+"=") {
			continue
		}
		env = append(env, kv)
	}
	if d.callback.URL != "" && d.callback.Token != "" {
		env = append(env, TokenEnv+"="+d.callback.Token)
	}
	return env
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// confinement is Options.Confine with Codex's state directory writable:
// $CODEX_HOME, else $HOME/.codex (its sessions, which a resume reads,
// logs and sign-in), read from env, the child's environment.
func (p *Provider) confinement(env []string) sandbox.Agent {
	c := p.opts.Confine
	if !c.Confined() {
		return c
	}
	dir := proc.Getenv(env, "CODEX_HOME")
	if dir == "" {
		dir = filepath.Join(proc.HomeDir(env), ".codex")
	}
	c.StateDirs = append([]string{dir}, c.StateDirs...)
	return c
}
