package codex

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/providers/internal/extturn"
	"github.com/mcp-subagent/mcp-subagent/providers/internal/proc"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

const (
	// stopGrace is how long a stopped group gets after SIGTERM before
	// SIGKILL: short, so an interrupt ends the turn well within a second.
	stopGrace = 400 * time.Millisecond
	// afterTerminal bounds the wait for Codex to exit once it reported the
	// turn's end; a process still there then is stopped.
	afterTerminal = 5 * time.Second
	// afterExit bounds the wait for the end of stdout once Codex exited
	// (a leftover member of its group may hold the pipe); then the group
	// is stopped.
	afterExit = 2 * time.Second
	// afterStop bounds, without the subreaper supervisor, the reading of
	// what a stopped group left in the pipe (something outside the group
	// might still hold it open).
	afterStop = 300 * time.Millisecond
	// maxLine bounds one JSONL line; longer lines are skipped, not fatal.
	maxLine = 8 << 20
	// maxNotes bounds the diagnostic lines collected during a turn.
	maxNotes = 8
	// stderrTail bounds the stderr quoted in a diagnostic.
	stderrTail = 1024
)

// driver runs a child's turns, one `codex exec` process per turn. Nothing
// stays resident between turns: the thread lives in Codex's own session
// files, and the journal keeps its id.
type driver struct {
	p         *Provider
	cwd       string
	journal   *agent.Journal
	callback  seam.Callback
	ephemeral bool // one-shot: the thread is not kept
	model     string
	effort    llm.Effort // -c model_reasoning_effort; empty: Codex's own setting
	persona   string
	schema    json.RawMessage
	session   string   // the descriptor's session, if the journal has none
	base      []string // the child's environment (Options.Env, or EnvFor's)

	mu sync.Mutex // one turn at a time
}

func (d *driver) Journal() *agent.Journal { return d.journal }

// Close releases nothing: no process outlives a turn.
func (d *driver) Close() error { return nil }

// RunTurn runs one turn as one `codex exec` (or `codex exec resume`)
// process and records it in the journal.
func (d *driver) RunTurn(ctx context.Context, inputs []agent.Input) agent.TurnResult {
	d.mu.Lock()
	defer d.mu.Unlock()
	events := d.journal.Events()
	t := extturn.Begin(d.journal, inputs)
	session := t.Session()
	if session == "" {
		session = d.session
	}
	tr := &turn{d: d, t: t, resumed: session}
	if session == "" && hasTurns(events) {
		tr.note("no Codex thread was recorded for the earlier turns; this turn starts a new thread")
	}
	tr.prior = priorUsage(events, session)
	return tr.run(ctx, extturn.Prompt(inputs), session)
}

func hasTurns(events []agent.Event) bool {
	for _, e := range events {
		if e.Kind == agent.EventTurnEnd {
			return true
		}
	}
	return false
}

// priorUsage is what the journal already counted for the thread: Codex
// reports a resumed thread's running total, and the turn's share is the
// difference.
func priorUsage(events []agent.Event, session string) usage {
	var u usage
	if session == "" {
		return u
	}
	seen := false
	for _, e := range events {
		if e.Kind == agent.EventSession && e.Session == session {
			seen = true
		}
		if seen && e.Kind == agent.EventTurnEnd && e.Usage != nil {
			u.InputTokens += e.Usage.InputTokens
			u.OutputTokens += e.Usage.OutputTokens
		}
	}
	return u
}

// turn is one turn in progress; its methods run on RunTurn's goroutine.
type turn struct {
	d       *driver
	t       *extturn.Turn
	resumed string // the thread id resumed, or ""
	prior   usage

	notes      []string
	dropped    int
	completed  bool
	failed     string // turn.failed's message
	total      *usage
	last       string // the last agent message
	structured json.RawMessage
}

// note adds a diagnostic line, bounded.
func (tr *turn) note(s string) {
	if s == "" || slices.Contains(tr.notes, s) {
		return
	}
	if len(tr.notes) >= maxNotes {
		tr.dropped++
		return
	}
	tr.notes = append(tr.notes, s)
}

// line is one decoded line of stdout, or why it was skipped.
type line struct {
	e    event
	skip string
}

func (tr *turn) run(ctx context.Context, prompt, session string) agent.TurnResult {
	d := tr.d
	if err := ctx.Err(); err != nil {
		return tr.end(agent.StopAborted, "interrupted before Codex started", "")
	}
	path, err := d.p.command(d.base)
	if err != nil {
		return tr.end(agent.StopError, err.Error(), "")
	}
	schemaFile := ""
	if len(d.schema) > 0 {
		f, err := os.CreateTemp("", "mcp-subagent-codex-schema-*.json")
		if err != nil {
			return tr.end(agent.StopError, "writing the output schema for Codex failed: "+err.Error(), "")
		}
		schemaFile = f.Name()
		defer os.Remove(schemaFile)
		_, werr := f.Write(d.schema)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return tr.end(agent.StopError, "writing the output schema for Codex failed: "+werr.Error(), "")
		}
	}
	carried, err := d.carried()
	if err != nil {
		return tr.end(agent.StopError, err.Error(), "")
	}
	args := d.args(session, schemaFile, carried)
	env := d.env()
	p, err := proc.Start(proc.Spec{Path: path, Args: args, Dir: d.cwd, Env: env, Grace: stopGrace, Confine: d.p.confinement(env)})
	if err != nil {
		return tr.end(agent.StopError, "starting Codex failed: "+err.Error(), "")
	}
	d.p.log.Debug("codex started", "pid", p.PID(), "resume", session, "cwd", d.cwd)
	out := p.Stdout // proc's own pipe: readable to EOF after exit

	// The prompt goes in on stdin, then stdin is closed. The writer never
	// outlives the process: its exit closes the pipe.
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		_, _ = io.WriteString(p.Stdin, prompt)
		_ = p.Stdin.Close()
	}()

	// The reader always drains stdout to its end, so Codex never blocks on
	// a full pipe; after quit it stops handing lines over.
	lines := make(chan line)
	quit := make(chan struct{})
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer close(lines)
		readLines(out, func(l line) {
			select {
			case lines <- l:
			case <-quit:
			}
		})
	}()

	var deadline <-chan time.Time
	if to := d.p.opts.Timeout; to > 0 {
		timer := time.NewTimer(to)
		defer timer.Stop()
		deadline = timer.C
	}
	exited := p.Done()
	var linger <-chan time.Time
	var stopped string // "aborted" or "timeout"
loop:
	for lines != nil || exited != nil {
		select {
		case l, ok := <-lines:
			if !ok {
				lines = nil
				if linger == nil {
					linger = time.After(afterTerminal)
				}
				continue
			}
			if tr.handle(l) && linger == nil {
				linger = time.After(afterTerminal)
			}
		case <-exited:
			exited = nil
			if tr.completed || tr.failed != "" || linger == nil {
				linger = time.After(afterExit)
			}
		case <-linger:
			break loop
		case <-ctx.Done():
			stopped = "aborted"
			break loop
		case <-deadline:
			stopped = "timeout"
			break loop
		}
	}
	// Stop the whole group (and reap it; quick when Codex already exited),
	// then take what it wrote before it ended (the thread id of a turn
	// interrupted early is among it): with the group gone, stdout ends.
	p.Stop()
	// Supervised, nothing that could hold stdout is left once Stop
	// returns: read it to its end, however slow the reader is today.
	// Otherwise something that left the group may hold it: bound the wait.
	var drained <-chan time.Time
	if !p.Supervised() {
		drain := time.NewTimer(afterStop)
		defer drain.Stop()
		drained = drain.C
	}
	for lines != nil {
		select {
		case l, ok := <-lines:
			if !ok {
				lines = nil
				continue
			}
			tr.handle(l)
		case <-drained:
			lines = nil
		}
	}
	close(quit)
	_ = out.Close()
	<-read
	<-wrote
	exitErr := p.Wait(context.Background())
	d.p.log.Debug("codex exited", "pid", p.PID(), "err", exitErr)

	switch {
	case tr.completed:
		return tr.complete()
	case tr.failed != "":
		return tr.end(agent.StopError, "Codex reported the turn failed: "+tr.failed, "")
	case stopped == "aborted":
		return tr.end(agent.StopAborted, "interrupted: the Codex process group was stopped", "")
	case stopped == "timeout":
		return tr.end(agent.StopError, fmt.Sprintf("Codex did not finish the turn within %s; its process group was stopped", d.p.opts.Timeout),
			tailOf(p.Stderr()))
	}
	how := "exited"
	if exitErr != nil {
		how = "exited (" + exitErr.Error() + ")"
	}
	return tr.end(agent.StopError, "Codex "+how+" without finishing the turn", tailOf(p.Stderr()))
}

// handle records one line; it reports whether the line ended the turn.
func (tr *turn) handle(l line) bool {
	if l.skip != "" {
		tr.note(l.skip)
		return false
	}
	e := l.e
	switch e.Type {
	case "thread.started":
		if e.ThreadID != tr.resumed {
			tr.prior = usage{} // a new thread counts from zero
		}
		tr.t.SetSession(e.ThreadID)
	case "item.completed":
		if e.Item == nil {
			return false
		}
		switch e.Item.Type {
		case "agent_message":
			tr.t.Message(e.Item.Text)
			if strings.TrimSpace(e.Item.Text) != "" {
				tr.last = e.Item.Text
			}
		case "reasoning", "todo_list":
		default:
			note, diag := e.Item.describe()
			tr.t.Note(note)
			tr.note(diag)
		}
	case "error":
		// Not terminal: Codex reports retries and warnings this way.
		tr.note(truncate.Head(e.Message, 500))
	case "turn.completed":
		tr.completed = true
		if e.Usage != nil {
			u := *e.Usage
			tr.total = &u
		}
		return true
	case "turn.failed":
		tr.failed = "unknown error"
		if e.Error != nil && e.Error.Message != "" {
			tr.failed = truncate.Head(e.Error.Message, 1000)
		}
		return true
	}
	return false
}

// complete ends a turn Codex reported completed: usage, and with an output
// schema, the final message as the structured result once it validates.
func (tr *turn) complete() agent.TurnResult {
	if tr.total != nil {
		tr.t.AddUsage(delta(*tr.total, tr.prior))
	}
	if len(tr.d.schema) == 0 {
		return tr.end(agent.StopCompleted, "", "")
	}
	obj, err := structured(tr.d.schema, tr.last)
	if err != nil {
		return tr.end(agent.StopError, "Codex's final message does not meet the output schema: "+err.Error(), "")
	}
	tr.structured = obj
	return tr.end(agent.StopCompleted, "", "")
}

// delta is the turn's share of a thread's running total.
func delta(total, prior usage) seam.Usage {
	in, out := total.InputTokens, total.OutputTokens
	if in >= prior.InputTokens && out >= prior.OutputTokens {
		in -= prior.InputTokens
		out -= prior.OutputTokens
	}
	return seam.Usage{InputTokens: in, OutputTokens: out}
}

// structured validates text as an object meeting schema and returns it
// compacted.
func structured(schema json.RawMessage, text string) (json.RawMessage, error) {
	rs, err := agent.ResolveObjectSchema(schema)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal([]byte(strings.TrimSpace(text)), &v); err != nil {
		return nil, fmt.Errorf("it is not JSON (%v)", err)
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, fmt.Errorf("it is not a JSON object")
	}
	if err := rs.Validate(v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// end records the turn's end: the cause first, then what was noticed, then
// the stderr tail.
func (tr *turn) end(stop agent.StopReason, cause, stderr string) agent.TurnResult {
	tr.t.Diagnose(cause)
	for _, n := range tr.notes {
		if n != tr.failed { // Codex repeats a failure as an error event
			tr.t.Diagnose(n)
		}
	}
	if tr.dropped > 0 {
		tr.t.Diagnose(fmt.Sprintf("and %d more", tr.dropped))
	}
	if stderr != "" {
		tr.t.Diagnose("stderr: " + stderr)
	}
	return tr.t.End(stop, tr.structured)
}

// tailOf returns the end of a stderr capture, bounded.
func tailOf(s string) string { return truncate.Tail(strings.TrimSpace(s), stderrTail) }

// readLines calls fn with each decoded line of r until r ends. Lines
// longer than maxLine are skipped; reading goes on.
func readLines(r io.Reader, fn func(line)) {
	br := bufio.NewReaderSize(r, 64<<10)
	var buf []byte
	long := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !long && len(buf)+len(chunk) <= maxLine {
			buf = append(buf, chunk...)
		} else {
			long, buf = true, buf[:0]
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		switch {
		case long:
			fn(line{skip: "skipped an output line of Codex longer than 8 MiB"})
		case len(buf) > 0:
			if e, ok, derr := decode(buf); derr != nil {
				fn(line{skip: "skipped an output line of Codex that is not JSON: " + truncate.Head(strings.TrimSpace(string(buf)), 200)})
			} else if ok {
				fn(line{e: e})
			}
		}
		buf, long = buf[:0], false
		if err != nil {
			return
		}
	}
}
