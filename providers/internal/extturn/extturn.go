// Package extturn records an external agent's turn in the child's journal
// the same way for every external provider (Codex, Claude Code, ACP): the
// turn's user-side messages, the agent's messages as assistant messages
// (its tool activity as short assistant notes, never as tool calls, so the
// journal stays balanced and replayable), its session handle, and the
// turn's end with its stop reason, diagnostic and usage.
package extturn

import (
	"strings"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Turn is one external turn being recorded. Its methods must be called
// from one goroutine.
type Turn struct {
	j       *agent.Journal
	n       int
	output  string
	usage   seam.Usage
	diag    []string
	session string
}

// Begin records the start of a turn and its inputs. session is the
// external session handle already known (from the journal), if any.
func Begin(j *agent.Journal, inputs []agent.Input) *Turn {
	n := j.NextTurn()
	t := &Turn{j: j, n: n, session: agent.LastSession(j.Events())}
	j.Append(agent.Event{Kind: agent.EventTurnStart, Turn: n})
	for _, in := range inputs {
		src := in.Source
		if src == "" {
			src = agent.SourceUser
		}
		j.Append(agent.Event{Kind: agent.EventMessage, Turn: n, Source: src,
			Message: &seam.Message{Role: seam.RoleUser, Content: in.Text}})
	}
	return t
}

// Prompt joins a turn's inputs into the one prompt an external CLI takes,
// each under its source kind when it is not the user's own.
func Prompt(inputs []agent.Input) string {
	var parts []string
	for _, in := range inputs {
		if in.Source != "" && in.Source != agent.SourceUser {
			parts = append(parts, "["+in.Source+"]\n"+in.Text)
			continue
		}
		parts = append(parts, in.Text)
	}
	return strings.Join(parts, "\n\n")
}

// Session returns the external session handle known so far.
func (t *Turn) Session() string { return t.session }

// SetSession records the external session handle once it is known (or
// when it changes).
func (t *Turn) SetSession(id string) {
	if id == "" || id == t.session {
		return
	}
	t.session = id
	t.j.Append(agent.Event{Kind: agent.EventSession, Turn: t.n, Session: id})
}

// Message records an assistant message; non-empty text becomes the turn's
// output so far.
func (t *Turn) Message(text string) {
	if strings.TrimSpace(text) == "" {
		return
	}
	t.output = text
	t.j.Append(agent.Event{Kind: agent.EventMessage, Turn: t.n, Message: &seam.Message{Role: seam.RoleAssistant, Content: text}})
}

// Note records the agent's tool activity ("ran: ls -la") as an assistant
// note; it does not change the output.
func (t *Turn) Note(text string) {
	if text == "" {
		return
	}
	t.j.Append(agent.Event{Kind: agent.EventMessage, Turn: t.n, Message: &seam.Message{Role: seam.RoleAssistant, Content: "[" + text + "]"}})
}

// AddUsage adds to the turn's usage.
func (t *Turn) AddUsage(u seam.Usage) { t.usage = t.usage.Add(u) }

// Diagnose adds a line to the turn's diagnostic (denied approvals, stderr).
func (t *Turn) Diagnose(line string) {
	if line != "" {
		t.diag = append(t.diag, line)
	}
}

// Output returns the last non-empty assistant message so far.
func (t *Turn) Output() string { return t.output }

// End records the turn's end and returns its result. structured is the
// captured object, only when a schema was asked for and met.
func (t *Turn) End(stop agent.StopReason, structured []byte) agent.TurnResult {
	diag := strings.Join(t.diag, "; ")
	if t.usage != (seam.Usage{}) {
		u := t.usage
		t.j.Append(agent.Event{Kind: agent.EventTurnEnd, Turn: t.n, StopReason: stop, Diagnostic: diag, Usage: &u})
	} else {
		t.j.Append(agent.Event{Kind: agent.EventTurnEnd, Turn: t.n, StopReason: stop, Diagnostic: diag})
	}
	res := agent.TurnResult{Output: t.output, StopReason: stop, Diagnostic: diag, Usage: t.usage}
	if stop == agent.StopCompleted && len(structured) > 0 {
		res.Structured = structured
	}
	return res
}
