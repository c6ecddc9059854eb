package agent

import (
	"time"

	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// The journal's record types are the store and provider contract, so they
// live in seam, which imports nothing of this module; these aliases keep
// their agent names.
type (
	EventKind  = seam.EventKind
	Event      = seam.Event
	Grant      = seam.Grant
	StopReason = seam.StopReason
	Input      = seam.Input
	TurnResult = seam.TurnResult
	Journal    = seam.Journal
)

const (
	EventTurnStart = seam.EventTurnStart
	EventMessage   = seam.EventMessage
	EventTurnEnd   = seam.EventTurnEnd
	EventSession   = seam.EventSession
	EventBudget    = seam.EventBudget
	EventUnknown   = seam.EventUnknown

	SourceUser     = seam.SourceUser
	SourceReport   = seam.SourceReport
	SourceSettled  = seam.SourceSettled
	SourceQuestion = seam.SourceQuestion

	StopCompleted = seam.StopCompleted
	StopAborted   = seam.StopAborted
	StopError     = seam.StopError
	StopMaxTokens = seam.StopMaxTokens
	StopRefusal   = seam.StopRefusal
	StopBudget    = seam.StopBudget
)

// NewJournal returns a journal holding seed, which must satisfy the journal
// invariants (see Validate).
func NewJournal(seed []Event) (*Journal, error) { return seam.NewJournal(seed) }

// Validate checks the journal invariants (seam.Validate).
func Validate(events []Event) error { return seam.Validate(events) }

// Spending is what a stretch of journal records as spent: input plus
// output tokens, steps (assistant messages: one per model call, or per
// answer of an external agent), cost, and the wall time of its turns.
type Spending struct {
	Tokens  int64
	Steps   int
	CostUSD float64
	Elapsed time.Duration
}

// LastGrant returns the last budget event in events[from:] (from skips a
// fork seed, whose grants were the parent's) and what the events after it
// spent; ok is false when there is none (a journal from before grants
// were recorded).
func LastGrant(events []Event, from int) (grant Event, spent Spending, ok bool) {
	for i := len(events) - 1; i >= max(from, 0); i-- {
		if e := events[i]; e.Kind == EventBudget && e.Grant != nil {
			return e, Spent(events[i+1:], time.Time{}), true
		}
	}
	return Event{}, Spending{}, false
}

// Spent folds what events record as spent, charging as a live budget
// does: each assistant message is one step with its usage, and a turn's
// end adds what its messages did not report (an external CLI's turn
// usage). Only events at or after since count (zero: all), and Elapsed
// only for turns that start then. A turn's time runs from its turn/start
// to its turn/end; for a turn a crash cut short (closed by CloseOpenTurn,
// perhaps much later) it ends at its last event before the crash, and a
// turn still open ends at its last event.
func Spent(events []Event, since time.Time) Spending {
	var s Spending
	var start, last time.Time // of the open turn; zero: none
	var turnUsage seam.Usage
	count := func(e Event) bool { return since.IsZero() || !e.Time.Before(since) }
	for _, e := range events {
		switch {
		case e.Kind == EventTurnStart:
			start, last, turnUsage = e.Time, e.Time, seam.Usage{}
			if !count(e) {
				start = time.Time{}
			}
			continue
		case e.Kind == EventMessage && e.Message != nil && e.Message.Role == seam.RoleAssistant:
			if e.Usage != nil {
				turnUsage = turnUsage.Add(*e.Usage)
			}
			if count(e) {
				s.Steps++
				if e.Usage != nil {
					s.Tokens += e.Usage.InputTokens + e.Usage.OutputTokens
					s.CostUSD += e.Usage.CostUSD
				}
			}
		case e.Kind == EventTurnEnd:
			if e.Usage != nil && count(e) {
				s.Tokens += max(0, e.Usage.InputTokens-turnUsage.InputTokens) + max(0, e.Usage.OutputTokens-turnUsage.OutputTokens)
				s.CostUSD += max(0, e.Usage.CostUSD-turnUsage.CostUSD)
			}
			end := e.Time
			if crashClosed(e) {
				end = last
			}
			if !start.IsZero() && end.After(start) {
				s.Elapsed += end.Sub(start)
			}
			start, last = time.Time{}, time.Time{}
			continue
		}
		if !start.IsZero() && !crashClosed(e) && e.Time.After(last) {
			last = e.Time
		}
	}
	if !start.IsZero() && last.After(start) {
		s.Elapsed += last.Sub(start)
	}
	return s
}

// crashClosed reports whether e is one of the events CloseOpenTurn wrote:
// stamped when the turn was closed, not when it ran.
func crashClosed(e Event) bool {
	switch {
	case e.Kind == EventTurnEnd:
		return e.StopReason == StopAborted && e.Diagnostic == crashed
	case e.Kind == EventMessage && e.Message != nil:
		return e.Message.Role == seam.RoleTool && e.Message.Content == notRun
	}
	return false
}

// LastSession returns the latest external session handle recorded in
// events, or "".
func LastSession(events []Event) string {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Kind == EventSession {
			return events[i].Session
		}
	}
	return ""
}

// Messages rebuilds the conversation the model sees from the events.
func Messages(events []Event) []llm.Message {
	var out []llm.Message
	for _, e := range events {
		if e.Kind == EventMessage && e.Message != nil {
			out = append(out, chat(*e.Message))
		}
	}
	return out
}

// record is the model's message m as the journal keeps it.
func record(m llm.Message) *seam.Message {
	r := &seam.Message{Role: seam.Role(m.Role), Content: m.Content, ToolCallID: m.ToolCallID, Refusal: m.Refusal}
	for _, c := range m.ToolCalls {
		r.ToolCalls = append(r.ToolCalls, seam.ToolCall(c))
	}
	return r
}

// chat is the recorded message m as the model sees it.
func chat(m seam.Message) llm.Message {
	r := llm.Message{Role: llm.Role(m.Role), Content: m.Content, ToolCallID: m.ToolCallID, Refusal: m.Refusal}
	for _, c := range m.ToolCalls {
		r.ToolCalls = append(r.ToolCalls, llm.ToolCall(c))
	}
	return r
}

// ToolResult returns the tool message that answers the tool call callID
// with text.
func ToolResult(callID, text string) *seam.Message {
	return &seam.Message{Role: seam.RoleTool, ToolCallID: callID, Content: text}
}

// crashed is the reason CloseOpenTurn gives for the turn it ends and the
// tool calls it answers.
const crashed = "the server stopped while this turn ran"

// notRun is the content of the tool message CloseOpenTurn answers an
// unanswered call with.
const notRun = "not run: " + crashed

// CloseOpenTurn ends the turn a crash left open, if any, so the journal is
// replayable again: every tool call of that turn still unanswered gets a
// tool message saying it was not run, then the turn ends aborted. It
// returns events with the closing events appended (sharing events' array
// where it has room) and the closing events alone, numbered on from
// events; closing is nil when no turn was open.
func CloseOpenTurn(events []Event) (all, closing []Event) {
	open := -1
	for i, e := range events {
		switch e.Kind {
		case EventTurnStart:
			open = i
		case EventTurnEnd:
			open = -1
		}
	}
	if open < 0 {
		return events, nil
	}
	turn := events[open].Turn
	pending := []string{}
	answered := map[string]bool{}
	for _, e := range events[open:] {
		if e.Message == nil {
			continue
		}
		for _, tc := range e.Message.ToolCalls {
			pending = append(pending, tc.ID)
		}
		if e.Message.ToolCallID != "" {
			answered[e.Message.ToolCallID] = true
		}
	}
	seq := int64(len(events))
	now := time.Now().UTC()
	for _, id := range pending {
		if answered[id] {
			continue
		}
		closing = append(closing, Event{Seq: seq, Kind: EventMessage, Time: now, Turn: turn,
			Message: ToolResult(id, notRun)})
		seq++
	}
	closing = append(closing, Event{Seq: seq, Kind: EventTurnEnd, Time: now, Turn: turn,
		StopReason: StopAborted, Diagnostic: crashed})
	return append(events, closing...), closing
}

// LastOutcome reads how the journal's last turn ended: the stop reason and
// diagnostic of the last turn/end, and the last non-empty assistant message
// since the last turn/start (empty if that turn has none). StopReason is
// empty when no turn ended; Structured and Usage are never set.
func LastOutcome(events []Event) TurnResult {
	var r TurnResult
	for _, e := range events {
		switch {
		case e.Kind == EventTurnStart:
			r.Output = ""
		case e.Kind == EventMessage && e.Message != nil && e.Message.Role == seam.RoleAssistant && e.Message.Content != "":
			r.Output = e.Message.Content
		case e.Kind == EventTurnEnd:
			r.StopReason, r.Diagnostic = e.StopReason, e.Diagnostic
		}
	}
	return r
}
