package acp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/providers/internal/extturn"
	"github.com/mcp-subagent/mcp-subagent/providers/internal/proc"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

const (
	// cancelWait is how long a cancelled turn waits for the agent to answer
	// session/cancel with the prompt's "cancelled" before its process
	// group is stopped.
	cancelWait = time.Second
	// exitWait is how long Close lets the agent exit on its own once its
	// stdin is closed, before the process group is stopped.
	exitWait = 500 * time.Millisecond
	// stopGrace is the SIGTERM → SIGKILL grace of a stop.
	stopGrace = time.Second
	// stderrInDiagnostic bounds the agent's stderr quoted in a diagnostic.
	stderrInDiagnostic = 1024
	// callbackServer is the name of this server in the agent's MCP servers.
	callbackServer = "subagent"
)

var errTurnTimeout = errors.New("turn timed out")

// driver runs one child's turns through one agent process and one ACP
// connection, kept for the activation. Its methods are called from one
// goroutine at a time (the manager's activation or one-shot run).
type driver struct {
	p           *Provider
	env         []string // the agent's environment (Options.Env, or EnvFor's)
	id          string
	cwd         string // absolute
	descSession string // the descriptor's session handle, if any
	journal     *agent.Journal
	callback    seam.Callback
	ask         seam.AskFunc // nil: nobody can be asked; PermissionAsk falls back to deny
	log         *slog.Logger

	// The live agent, nil between processes.
	proc    *proc.Process
	watch   *listWatch // between the agent and the callback server (awaitTools)
	conn    *acpsdk.ClientSideConnection
	client  *client
	caps    acpsdk.AgentCapabilities
	session acpsdk.SessionId
	// costSeen is the session's cumulative cost as last reported, so a
	// usage_update adds only what the turn cost.
	costSeen float64
}

var _ seam.Driver = (*driver)(nil)

func (d *driver) Journal() *agent.Journal { return d.journal }

// RunTurn sends the turn's inputs as one session/prompt and records what
// the agent streams back. Cancelling ctx sends session/cancel; an agent
// that does not answer within cancelWait has its process group stopped.
func (d *driver) RunTurn(ctx context.Context, inputs []agent.Input) agent.TurnResult {
	t := extturn.Begin(d.journal, inputs)
	if d.p.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, d.p.opts.Timeout, errTurnTimeout)
		defer cancel()
	}
	return t.End(d.turn(ctx, t, extturn.Prompt(inputs)), nil)
}

func (d *driver) turn(ctx context.Context, t *extturn.Turn, text string) agent.StopReason {
	if ctx.Err() != nil {
		return d.ended(ctx, t)
	}
	if d.conn != nil {
		select {
		case <-d.conn.Done():
			d.log.Warn("the ACP agent exited between turns; starting it again", "stderr", d.stop())
		default:
		}
	}
	if d.conn == nil {
		if err := d.connect(ctx, t); err != nil {
			stderr := d.stop()
			if ctx.Err() != nil {
				return d.ended(ctx, t)
			}
			t.Diagnose(withStderr("starting the ACP agent failed: "+errText(err), stderr))
			return agent.StopError
		}
	}
	cl, conn, session := d.client, d.conn, d.session
	cl.beginTurn()
	var tr *transcript
	if d.p.transcriptUsage {
		tr = &transcript{dir: transcriptDir(d.p.opts.Env), session: string(session)}
		tr.begin()
	}

	type answer struct {
		resp acpsdk.PromptResponse
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		// Not under ctx: cancelling the SDK's Prompt ctx returns at once and
		// drops the agent's "cancelled" answer, so the cancel is ours.
		resp, err := conn.Prompt(context.Background(), acpsdk.PromptRequest{SessionId: session,
			Prompt: []acpsdk.ContentBlock{acpsdk.TextBlock(text)}})
		answered <- answer{resp, err}
	}()

	rec := recorder{d: d, t: t, session: session, titles: map[acpsdk.ToolCallId]string{}}
	done := ctx.Done()
	stopTimer := func() bool { return false }
	defer func() { stopTimer() }()
	var (
		grace      <-chan time.Time
		cancelled  bool
		killed     bool
		cancelSent chan struct{}
	)
	for {
		select {
		case <-cl.signal:
			rec.apply(cl.take())
		case <-done:
			done, cancelled = nil, true
			cl.cancel()
			cancelSent = make(chan struct{})
			go func() {
				defer close(cancelSent)
				// A notification; it cannot block past the process's end.
				_ = conn.Cancel(context.Background(), acpsdk.CancelNotification{SessionId: session})
			}()
			timer := time.NewTimer(cancelWait)
			stopTimer = timer.Stop
			grace = timer.C
		case <-grace:
			grace, killed = nil, true
			d.log.Warn("the ACP agent did not answer session/cancel; stopping its process group", "wait", cancelWait)
			d.stop() // the connection ends, so Prompt returns
		case a := <-answered:
			// The SDK processes every notification sent before the answer
			// before it hands the answer over: the queue is complete.
			rec.apply(cl.take())
			rec.flush()
			if cancelSent != nil {
				<-cancelSent
			}
			// One source of tokens per turn, the first that has them:
			// the answer's (standard, or gemini's _meta.quota), else the
			// sum of qwen's per-call chunk usage, else Claude Code's
			// transcript (claude-code-acp).
			if u, ok := promptUsage(a.resp); ok {
				t.AddUsage(u)
			} else if rec.chunkUsage != (seam.Usage{}) {
				t.AddUsage(rec.chunkUsage)
			} else if tr != nil {
				final := t.Output()
				if cancelled || a.err != nil {
					final = "" // no last message to wait for
				}
				if u, ok := tr.usage(final); ok {
					t.AddUsage(u)
				}
			}
			switch {
			case killed:
				t.Diagnose(fmt.Sprintf("the agent did not answer session/cancel within %v; its process group was stopped", cancelWait))
				return d.ended(ctx, t)
			case cancelled:
				return d.ended(ctx, t)
			case a.err != nil:
				// The connection ends with the agent's stdout, which can be
				// before its last stderr lines are copied: the tail is read
				// once the process is stopped and reaped.
				t.Diagnose(withStderr("the ACP agent failed: "+errText(a.err), d.stop()))
				return agent.StopError
			}
			stop, diag := stopReason(a.resp.StopReason)
			t.Diagnose(diag)
			return stop
		}
	}
}

// ended is how a turn whose ctx ended stops: a timeout is an error, an
// interrupt or shutdown is aborted.
func (d *driver) ended(ctx context.Context, t *extturn.Turn) agent.StopReason {
	if errors.Is(context.Cause(ctx), errTurnTimeout) {
		t.Diagnose(fmt.Sprintf("the turn timed out after %v", d.p.opts.Timeout))
		return agent.StopError
	}
	t.Diagnose("the turn was cancelled")
	return agent.StopAborted
}

// stopReason maps an ACP stop reason to ours, with the diagnostic of a
// non-completed one.
func stopReason(r acpsdk.StopReason) (agent.StopReason, string) {
	switch r {
	case acpsdk.StopReasonEndTurn:
		return agent.StopCompleted, ""
	case acpsdk.StopReasonMaxTokens:
		return agent.StopMaxTokens, "the agent hit its token limit (max_tokens)"
	case acpsdk.StopReasonCancelled:
		return agent.StopAborted, "the agent cancelled the turn"
	case acpsdk.StopReasonRefusal:
		return agent.StopRefusal, "the agent declined the task (refusal)"
	case acpsdk.StopReasonMaxTurnRequests:
		return agent.StopError, "the agent hit its limit of model requests for one turn (max_turn_requests)"
	default:
		return agent.StopError, fmt.Sprintf("the agent reported unknown stop reason %q", r)
	}
}

// connect starts the agent, initializes the connection and opens the
// child's session: session/load of the recorded one when the agent offers
// it, else session/new.
func (d *driver) connect(ctx context.Context, t *extturn.Turn) error {
	pr, err := proc.Start(proc.Spec{Path: d.p.path, Args: d.p.opts.Args, Dir: d.cwd, Env: d.env, Grace: stopGrace, Confine: d.p.confinement(d.env)})
	if err != nil {
		return err
	}
	cl := newClient(d.p.opts.Permission)
	if d.p.opts.Permission == PermissionAsk && d.ask != nil {
		cl.ask, cl.askTimeout = d.ask, d.p.opts.QuestionTimeout
	}
	cl.flow = newFlow(pr.Stdout)
	conn := acpsdk.NewClientSideConnection(cl, pr.Stdin, cl.flow)
	conn.SetLogger(d.log) // the SDK logs to slog.Default otherwise
	d.proc, d.conn, d.client = pr, conn, cl
	d.log.Debug("ACP agent started", "pid", pr.PID())

	ir, err := conn.Initialize(ctx, acpsdk.InitializeRequest{
		ProtocolVersion: acpsdk.ProtocolVersionNumber,
		// No file system, no terminal: the agent uses its own tools in cwd.
		ClientCapabilities: acpsdk.ClientCapabilities{},
		ClientInfo:         &acpsdk.Implementation{Name: "mcp-subagent", Version: "1"},
	})
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	if ir.ProtocolVersion != acpsdk.ProtocolVersionNumber {
		return fmt.Errorf("the agent speaks ACP protocol version %d; this server speaks %d", ir.ProtocolVersion, acpsdk.ProtocolVersionNumber)
	}
	d.caps = ir.AgentCapabilities
	if d.p.awaitTools && d.callback.URL != "" && d.caps.McpCapabilities.Http {
		if d.watch, err = watchListing(d.callback.URL); err != nil {
			return fmt.Errorf("watching the agent list the callback tools: %w", err)
		}
	}
	servers := d.mcpServers()
	cl.offerCallbacks(len(servers) > 0)
	known := t.Session()
	if known == "" {
		known = d.descSession
	}
	if known != "" {
		if d.caps.LoadSession {
			_, err := conn.LoadSession(ctx, acpsdk.LoadSessionRequest{SessionId: acpsdk.SessionId(known), Cwd: d.cwd, McpServers: servers})
			if err == nil {
				// The history it replayed is already in the journal.
				cl.take()
				d.session = acpsdk.SessionId(known)
				d.costSeen = costSince(d.journal.Events(), known)
				if d.watch != nil && !d.toolsListed(ctx) {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					d.log.Warn("the ACP agent did not list the callback tools after session/load; the child may not be able to report", "wait", toolsWait)
				}
				return nil
			}
			if ctx.Err() != nil {
				return err
			}
			t.Note(fmt.Sprintf("the agent could not load session %s (%s); continuing in a new session without the earlier conversation", known, errText(err)))
		} else {
			t.Note(fmt.Sprintf("the agent cannot load sessions; continuing in a new session without the earlier conversation of session %s", known))
		}
	}
	var ns acpsdk.NewSessionResponse
	for attempt := 1; ; attempt++ {
		ns, err = conn.NewSession(ctx, acpsdk.NewSessionRequest{Cwd: d.cwd, McpServers: servers})
		if err != nil {
			if len(ir.AuthMethods) > 0 {
				return fmt.Errorf("session/new: %w (the agent offers authentication, which a headless child cannot do: configure its credentials in Env)", err)
			}
			return fmt.Errorf("session/new: %w", err)
		}
		if ns.SessionId == "" {
			return errors.New("session/new returned no session id")
		}
		if d.watch == nil || d.toolsListed(ctx) {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if attempt == toolsAttempts {
			d.log.Warn("the ACP agent never listed the callback tools; the child cannot report", "sessions", attempt, "wait", toolsWait)
			break
		}
		// The agent gave up on our server (qwen's 5 s bound); a session
		// opened in the now warm process connects it again, quickly.
		d.log.Warn("the ACP agent did not list the callback tools; opening another session", "session", ns.SessionId, "wait", toolsWait)
	}
	cl.take()
	d.session, d.costSeen = ns.SessionId, 0
	t.SetSession(string(ns.SessionId))
	return nil
}

// toolsWait bounds the wait for the agent to list the callback tools after
// session/new or session/load (qwen gives up on a server after 5 s), and
// toolsAttempts the sessions opened for it.
const (
	toolsWait     = 10 * time.Second
	toolsAttempts = 3
)

// toolsListed waits until the agent has listed the callback tools, up to
// toolsWait or the end of ctx.
func (d *driver) toolsListed(ctx context.Context) bool {
	timer := time.NewTimer(toolsWait)
	defer timer.Stop()
	select {
	case <-d.watch.listed:
		return true
	case <-ctx.Done():
	case <-timer.C:
	}
	return false
}

// mcpServers is this server as an HTTP MCP server for the agent to call
// back, when the deployment offers a callback and the agent accepts HTTP
// MCP servers; else none.
func (d *driver) mcpServers() []acpsdk.McpServer {
	servers := []acpsdk.McpServer{}
	if d.callback.URL == "" {
		return servers
	}
	if !d.caps.McpCapabilities.Http {
		d.log.Warn("the ACP agent does not accept HTTP MCP servers, so it cannot call this server back (report, list_agents, subagent)")
		return servers
	}
	url := d.callback.URL
	if d.watch != nil {
		url = d.watch.url
	}
	return append(servers, acpsdk.McpServer{Http: &acpsdk.McpServerHttpInline{
		Type: "http", Name: callbackServer, Url: url,
		Headers: []acpsdk.HttpHeader{{Name: "Authorization", Value: "Bearer " + d.callback.Token}},
	}})
}

// costSince sums the recorded cost of the turns since session was first
// recorded: the cumulative cost the agent reports for it so far.
func costSince(events []agent.Event, session string) float64 {
	sum, in := 0.0, false
	for _, e := range events {
		if e.Kind == agent.EventSession && e.Session == session {
			in = true
		}
		if in && e.Kind == agent.EventTurnEnd && e.Usage != nil {
			sum += e.Usage.CostUSD
		}
	}
	return sum
}

// stop ends the agent's process group and forgets the connection; the
// next turn starts a new process. It returns the tail of the agent's
// stderr, complete now that the process is reaped.
func (d *driver) stop() string {
	if d.proc == nil {
		return ""
	}
	d.proc.Stop()
	stderr := d.stderrTail()
	select {
	case <-d.conn.Done():
	case <-time.After(time.Second):
	}
	if d.watch != nil {
		d.watch.close()
	}
	d.proc, d.conn, d.client, d.session, d.watch = nil, nil, nil, "", nil
	return stderr
}

// Close lets the agent exit on end of input, then stops its whole process
// group, so no orphan and no zombie is left.
func (d *driver) Close() error {
	if d.proc == nil {
		return nil
	}
	_ = d.proc.Stdin.Close()
	select {
	case <-d.proc.Done():
	case <-time.After(exitWait):
	}
	d.stop()
	return nil
}

// withStderr appends the tail of the agent's stderr to a diagnostic.
func withStderr(msg, stderr string) string {
	if stderr != "" {
		return msg + "; agent stderr: " + stderr
	}
	return msg
}

// stderrTail is the last stderrInDiagnostic bytes of the agent's stderr.
func (d *driver) stderrTail() string {
	if d.proc == nil {
		return ""
	}
	return truncate.Tail(strings.TrimSpace(d.proc.Stderr()), stderrInDiagnostic)
}

// errText is an SDK error as one line.
func errText(err error) string {
	var re *acpsdk.RequestError
	if errors.As(err, &re) {
		if m, ok := re.Data.(map[string]any); ok {
			if e, ok := m["error"].(string); ok && e != "" {
				return re.Message + ": " + e
			}
		}
		return re.Message
	}
	return err.Error()
}

// recorder writes the agent's updates into the turn: message chunks
// accumulate into one assistant message, flushed before each note and at
// the end; tool calls, their final status and permission outcomes become
// notes; plans, thoughts and the rest are not recorded.
type recorder struct {
	d       *driver
	t       *extturn.Turn
	session acpsdk.SessionId // updates of other sessions are ignored
	msg     strings.Builder
	titles  map[acpsdk.ToolCallId]string
	// chunkUsage sums the token usage attached to message chunks (qwen).
	chunkUsage seam.Usage
}

func (r *recorder) flush() {
	r.t.Message(r.msg.String())
	r.msg.Reset()
}

func (r *recorder) note(s string) {
	r.flush()
	r.t.Note(s)
}

func (r *recorder) apply(items []item) {
	for _, it := range items {
		if it.session != r.session {
			continue
		}
		if p := it.perm; p != nil {
			r.d.log.Debug("ACP permission request answered", "title", p.title, "names", p.names, "outcome", p.outcome, "callback_tool", p.callback)
			switch {
			case p.by == seam.ByPerson && p.outcome == "denied":
				r.t.Diagnose("declined by the person: " + p.title)
				r.note("permission declined by the person (" + p.answer + "): " + p.title)
			case p.by == seam.ByPerson && p.outcome == "allowed":
				r.note("permission allowed by the person (" + p.answer + "): " + p.title)
			case p.by == seam.ByDeadline:
				r.t.Diagnose(fmt.Sprintf("denied, timed out (nobody answered question %s within %v): %s", p.question, r.d.p.opts.QuestionTimeout, p.title))
				r.note(fmt.Sprintf("permission denied by the policy: timed out, nobody answered question %s within %v: %s", p.question, r.d.p.opts.QuestionTimeout, p.title))
			case p.outcome == "denied":
				r.t.Diagnose("denied: " + p.title)
				r.note("permission denied: " + p.title)
			case p.outcome == "allowed":
				if p.callback {
					r.note("permission allowed (callback tool): " + p.title)
				} else {
					r.note("permission allowed: " + p.title)
				}
			case p.question != "":
				r.note("permission request cancelled (question " + p.question + " withdrawn): " + p.title)
			default:
				r.note("permission request cancelled: " + p.title)
			}
			continue
		}
		u := it.update
		switch {
		case u.AgentMessageChunk != nil:
			if c := u.AgentMessageChunk.Content.Text; c != nil {
				r.msg.WriteString(c.Text)
			}
			if cu, ok := chunkUsage(u.AgentMessageChunk.Meta); ok {
				r.chunkUsage = r.chunkUsage.Add(cu)
			}
		case u.ToolCall != nil:
			tc := u.ToolCall
			title := tc.Title
			if title == "" {
				title = string(tc.ToolCallId)
			}
			r.titles[tc.ToolCallId] = title
			s := "tool: " + title
			if tc.Status != "" {
				s += " (" + string(tc.Status) + ")"
			}
			r.note(s)
		case u.ToolCallUpdate != nil:
			tu := u.ToolCallUpdate
			if tu.Title != nil && *tu.Title != "" {
				r.titles[tu.ToolCallId] = *tu.Title
			}
			if tu.Status == nil || (*tu.Status != acpsdk.ToolCallStatusCompleted && *tu.Status != acpsdk.ToolCallStatusFailed) {
				continue // progress of a running tool: not worth a note
			}
			title := r.titles[tu.ToolCallId]
			if title == "" {
				title = string(tu.ToolCallId)
			}
			r.note("tool " + string(*tu.Status) + ": " + title)
		case u.UsageUpdate != nil:
			if c := u.UsageUpdate.Cost; c != nil && strings.EqualFold(c.Currency, "USD") {
				if delta := c.Amount - r.d.costSeen; delta > 0 {
					r.t.AddUsage(seam.Usage{CostUSD: delta})
				}
				r.d.costSeen = c.Amount
			}
		}
	}
}
