package claudecode

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/providers/internal/extturn"
	"github.com/mcp-subagent/mcp-subagent/providers/internal/proc"
	"github.com/mcp-subagent/mcp-subagent/schemas"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

const (
	// stopGrace is how long a stopped CLI gets between SIGTERM and SIGKILL:
	// short, so an interrupt ends the turn within a second.
	stopGrace = 500 * time.Millisecond
	// drainGrace bounds the wait for stdout to reach EOF once the group is
	// stopped: a process that left the group could hold the pipe open.
	drainGrace = time.Second
	// stderrInDiagnostic bounds the stderr tail quoted in a diagnostic.
	stderrInDiagnostic = 1500
)

// lingerGrace is how long the CLI may take to exit after its result line
// before its group is stopped (a variable so tests can shorten it).
var lingerGrace = 3 * time.Second

// mcpServerName is the name the callback server has in the child's MCP
// configuration, so its tools are mcp__subagent__<tool>.
const mcpServerName = "subagent"

// callbackTools are this server's tools a child reaches through the
// callback, by their plain names.
var callbackTools = []string{"subagent", "send_message", "interrupt_agent", "list_agents", "report"}

// alwaysDenied are the CLI's own ways to start agents: Task (called
// "Agent" on the wire in 2.x) and Workflow (scripts that fan out to
// subagents). Nesting goes through this server's subagent tool instead,
// where the manager enforces depth.
var alwaysDenied = []string{"Task", "Agent", "Workflow"}

// driver runs one child's turns, one claude process per turn.
type driver struct {
	p        *Provider
	path     string
	cfg      turnConfig
	resolved *schemas.Output // the output schema, to check what the CLI returns
	journal  *agent.Journal
	// ask is set under Options.Ask when the person can be asked: the CLI
	// then asks through the callback's permission prompt (prompt.go).
	ask     seam.AskFunc
	prompts prompts
}

func (d *driver) Journal() *agent.Journal { return d.journal }

// Close releases nothing: no process outlives a turn.
func (d *driver) Close() error { return nil }

// RunTurn runs `claude -p` once with the inputs as its prompt (on stdin)
// and records the stream in the journal. Cancelling ctx stops the whole
// process group and ends the turn aborted.
func (d *driver) RunTurn(ctx context.Context, inputs []agent.Input) agent.TurnResult {
	t := extturn.Begin(d.journal, inputs)
	session, resume := t.Session(), true
	if session == "" {
		session = d.cfg.session
	}
	if session == "" {
		resume = false
		if !d.cfg.ephemeral {
			session = newUUID()
		}
	}
	mcpConfig, err := d.writeMCPConfig()
	if err != nil {
		t.Diagnose("could not write the MCP configuration for the callback: " + err.Error())
		return t.End(agent.StopError, nil)
	}
	if mcpConfig != "" {
		defer os.Remove(mcpConfig)
	}
	args := d.args(session, resume, mcpConfig)

	turnCtx := ctx
	if d.p.opts.Timeout > 0 {
		var cancel context.CancelFunc
		turnCtx, cancel = context.WithTimeout(ctx, d.p.opts.Timeout)
		defer cancel()
	}
	if ctx.Err() != nil {
		t.Diagnose(stoppedText(ctx))
		return t.End(agent.StopAborted, nil)
	}
	endAsk := d.prompts.begin(turnCtx)
	defer endAsk()
	p, err := proc.Start(proc.Spec{Path: d.path, Args: args, Dir: d.cfg.cwd, Env: d.cfg.env, Grace: stopGrace, Confine: d.p.confinement(d.cfg.env)})
	if err != nil {
		t.Diagnose(fmt.Sprintf("could not start %s: %v", d.p.opts.Command, err))
		return t.End(agent.StopError, nil)
	}
	d.p.log.Debug("claude started", "pid", p.PID(), "cwd", d.cfg.cwd, "resume", resume, "session", session)
	var out io.ReadCloser = p.Stdout // proc's own pipe: readable to EOF after exit
	prompt := extturn.Prompt(inputs)
	go func() {
		// A CLI that exits without reading stdin makes this fail, which is fine.
		_, _ = io.WriteString(p.Stdin, prompt)
		_ = p.Stdin.Close()
	}()
	s := newStream(t, d.cfg.ephemeral)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		s.read(out)
	}()

	select {
	case <-p.Done():
	case <-turnCtx.Done():
	case <-s.resultCh:
		select {
		case <-p.Done():
		case <-turnCtx.Done():
		case <-time.After(lingerGrace):
			d.p.log.Debug("claude lingered after its result; stopping it", "pid", p.PID())
		}
	}
	// Whatever ended the wait, no member of the group outlives the turn.
	p.Stop()
	select {
	case <-readDone:
	case <-time.After(drainGrace):
		_ = out.Close() // unblocks the reader
		<-readDone
	}
	_ = out.Close()
	exitErr := p.Wait(context.Background())
	if s.malformed > 0 {
		d.p.log.Warn("claude wrote malformed stream-json lines", "count", s.malformed, "first", s.firstBad)
	}
	// Who answered each question, and a refused use in the result too.
	for _, a := range endAsk() {
		t.Note(a.note)
		if a.diagnostic != "" {
			t.Diagnose(a.diagnostic)
		}
	}
	return d.end(ctx, turnCtx, s, exitErr, p.Stderr())
}

// end maps how the process ended to the turn's stop reason and diagnostic.
func (d *driver) end(ctx, turnCtx context.Context, s *stream, exitErr error, stderr string) agent.TurnResult {
	t := s.t
	t.AddUsage(s.usage())
	for _, line := range s.denials() {
		t.Diagnose(line)
	}
	interrupted := ctx.Err() != nil
	timedOut := !interrupted && errors.Is(turnCtx.Err(), context.DeadlineExceeded)
	withStderr := func() {
		if tail := strings.TrimSpace(stderr); tail != "" {
			t.Diagnose("stderr: " + truncate.Tail(tail, stderrInDiagnostic))
		}
	}
	r := s.result
	if r == nil {
		switch {
		case interrupted:
			t.Diagnose(stoppedText(ctx))
			return t.End(agent.StopAborted, nil)
		case timedOut:
			t.Diagnose(fmt.Sprintf("timed out after %s", d.p.opts.Timeout))
			withStderr()
			return t.End(agent.StopError, nil)
		}
		t.Diagnose(fmt.Sprintf("claude exited without a result (%s)", exitText(exitErr)))
		withStderr()
		return t.End(agent.StopError, nil)
	}
	if !r.IsError && r.Subtype == "success" {
		if t.Output() == "" && strings.TrimSpace(r.Result) != "" {
			t.Message(r.Result)
		}
		if d.resolved == nil {
			return t.End(agent.StopCompleted, nil)
		}
		if len(r.StructuredOutput) == 0 || string(r.StructuredOutput) == "null" {
			t.Diagnose("claude finished without structured output for the output schema")
			return t.End(agent.StopError, nil)
		}
		if err := validate(d.resolved, r.StructuredOutput); err != nil {
			t.Diagnose("claude's structured output does not match the output schema: " + truncate.Head(err.Error(), 500))
			return t.End(agent.StopError, nil)
		}
		return t.End(agent.StopCompleted, r.StructuredOutput)
	}
	if interrupted && r.Subtype == "error_during_execution" {
		t.Diagnose(stoppedText(ctx))
		return t.End(agent.StopAborted, nil)
	}
	switch r.Subtype {
	case "success": // is_error: an API failure, its message in result
		t.Diagnose("claude reported an error: " + truncate.Head(orText(r.Result, "no message"), 1500))
	case "error_max_turns":
		t.Diagnose(fmt.Sprintf("claude hit its turn limit (%d turns)", r.NumTurns))
	case "error_during_execution":
		t.Diagnose("claude failed during execution" + colon(errorsText(r.Errors)))
	case "error_max_budget_usd":
		t.Diagnose(fmt.Sprintf("claude hit its budget limit (spent $%.4f)", r.TotalCostUSD))
	case "error_max_structured_output_retries":
		t.Diagnose("claude could not produce output matching the output schema" + colon(errorsText(r.Errors)))
	default:
		t.Diagnose(fmt.Sprintf("claude ended with result %q", r.Subtype) + colon(orText(errorsText(r.Errors), truncate.Head(r.Result, 500))))
	}
	withStderr()
	return t.End(agent.StopError, nil)
}

// args builds the command line; the prompt goes on stdin, so no argument
// is ever free text that the CLI could mistake for a flag or a command.
func (d *driver) args(session string, resume bool, mcpConfig string) []string {
	a := append([]string(nil), d.p.opts.Args...)
	a = append(a, "-p", "--output-format", "stream-json", "--verbose")
	if d.cfg.model != "" {
		a = append(a, "--model="+d.cfg.model)
	}
	if d.cfg.effort != "" {
		a = append(a, "--effort="+string(d.cfg.effort))
	}
	a = append(a, "--permission-mode="+d.p.opts.PermissionMode)
	if d.ask != nil {
		a = append(a, "--permission-prompt-tool", mcpName(seam.PromptTool))
	}
	switch {
	case resume:
		a = append(a, "--resume="+session)
	case d.cfg.ephemeral:
		a = append(a, "--no-session-persistence")
	default:
		a = append(a, "--session-id="+session)
	}
	if len(d.cfg.schema) > 0 {
		a = append(a, "--json-schema="+string(d.cfg.schema))
	}
	if d.cfg.persona != "" {
		a = append(a, "--append-system-prompt="+d.cfg.persona)
	}
	tf := toolFlags(d.cfg.filter, d.cfg.callback.URL != "")
	if tf.restrict {
		if len(tf.tools) == 0 {
			a = append(a, "--tools", "")
		} else {
			a = append(a, "--tools")
			a = append(a, tf.tools...)
		}
	}
	if len(tf.allowed) > 0 {
		a = append(a, "--allowedTools")
		a = append(a, tf.allowed...)
	}
	a = append(a, "--disallowedTools")
	a = append(a, tf.disallowed...)
	if d.ask != nil {
		// The CLI's permission check, not a tool for the model.
		a = append(a, mcpName(seam.PromptTool))
	}
	// Only the callback server, never the MCP servers of the user's own
	// Claude configuration: a child inherits no tools it was not given.
	a = append(a, "--strict-mcp-config")
	if mcpConfig != "" {
		a = append(a, "--mcp-config", mcpConfig)
	}
	return a
}

// flags are the tool-related flags of a turn.
type flags struct {
	restrict   bool     // pass --tools (an allow filter)
	tools      []string // built-in tools the model is shown
	allowed    []string // pre-approved rules
	disallowed []string // removed rules
}

// toolFlags maps a tool filter onto the CLI's flags. An allow filter
// restricts the built-in tool set (--tools, which is what the model is
// shown) and pre-approves exactly its names (--allowedTools); a deny filter
// removes its names (--disallowedTools). The callback tools may be named
// plainly ("report") or as Claude sees them ("mcp__subagent__report"); a
// kept one is pre-approved, a filtered one removed. alwaysDenied are
// always removed.
func toolFlags(f *seam.ToolFilter, callback bool) flags {
	var fl flags
	denied := map[string]bool{}
	for _, n := range alwaysDenied {
		denied[n] = true
	}
	fl.disallowed = append(fl.disallowed, alwaysDenied...)
	isCallback := map[string]bool{}
	for _, n := range callbackTools {
		isCallback[n], isCallback[mcpName(n)] = true, true
	}
	if callback {
		for _, n := range callbackTools {
			if keeps(f, n, mcpName(n)) {
				fl.allowed = append(fl.allowed, mcpName(n))
			} else {
				fl.disallowed = append(fl.disallowed, mcpName(n))
			}
		}
	}
	if f == nil {
		return fl
	}
	if f.Allow != nil {
		fl.restrict = true
		seen := map[string]bool{}
		for _, n := range f.Allow {
			if isCallback[n] || denied[baseName(n)] || n == "" {
				continue
			}
			fl.allowed = append(fl.allowed, n)
			if b := baseName(n); !strings.HasPrefix(b, "mcp__") && !seen[b] {
				seen[b] = true
				fl.tools = append(fl.tools, b)
			}
		}
		return fl
	}
	for _, n := range f.Deny {
		if isCallback[n] || denied[n] || n == "" {
			continue
		}
		fl.disallowed = append(fl.disallowed, n)
	}
	return fl
}

func mcpName(tool string) string { return "mcp__" + mcpServerName + "__" + tool }

// keeps reports whether f keeps a callback tool known by either name.
func keeps(f *seam.ToolFilter, plain, full string) bool {
	if f == nil {
		return true
	}
	if f.Allow != nil {
		return contains(f.Allow, plain) || contains(f.Allow, full)
	}
	return !contains(f.Deny, plain) && !contains(f.Deny, full)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// baseName strips a permission rule's specifier: "Bash(git *)" → "Bash".
func baseName(rule string) string {
	if i := strings.IndexByte(rule, '('); i > 0 {
		return strings.TrimSpace(rule[:i])
	}
	return strings.TrimSpace(rule)
}

// writeMCPConfig writes the callback server's MCP configuration to a
// private temporary file (the bearer token stays out of the command line,
// which other local users can read) and returns its path; "" when the
// deployment offers no callback.
func (d *driver) writeMCPConfig() (string, error) {
	cb := d.cfg.callback
	if cb.URL == "" {
		return "", nil
	}
	server := map[string]any{"type": "http", "url": cb.URL}
	if cb.Token != "" {
		server["headers"] = map[string]string{"Authorization": "Bearer " + cb.Token}
	}
	b, err := json.Marshal(map[string]any{"mcpServers": map[string]any{mcpServerName: server}})
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp("", "mcp-subagent-claude-*.json") // mode 0600
	if err != nil {
		return "", err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// newUUID returns a random (version 4) UUID, the form --session-id needs.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func stoppedText(ctx context.Context) string {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return "stopped: " + cause.Error()
	}
	return "stopped before it finished"
}

func exitText(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ProcessState.String()
	}
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func orText(s, alt string) string {
	if strings.TrimSpace(s) == "" {
		return alt
	}
	return s
}

func colon(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}
