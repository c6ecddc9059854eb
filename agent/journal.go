package agent

import (
	"fmt"
	"sync"
	"time"

	"github.com/mcp-subagent/mcp-subagent/llm"
)

// EventKind names what a journal Event records.
type EventKind string

const (
	EventTurnStart EventKind = "turn/start"
	EventMessage   EventKind = "message"
	EventTurnEnd   EventKind = "turn/end"
	// EventSession records an external agent's session handle (a Codex
	// thread id, a Claude Code session id, an ACP session id) as soon as it
	// is known, so a cold resume continues the same external session.
	EventSession EventKind = "session"
	// EventBudget records a budget grant (Event.Grant): the limits the
	// child's spending is held to from this event on, written just before
	// the turn/start of the turn it applies to. A resumed child rebuilds its
	// budget from its last grant and what the events after it spent (see
	// LastGrant), so a restart never hands out a fresh budget. Builds
	// before it fold the record to EventUnknown.
	EventBudget EventKind = "budget"
	// EventUnknown is the sentinel a stored record folds to when this build
	// cannot read it: a kind it does not know, or a later format version
	// (see DecodeEvent). It holds only its sequence number and time. It
	// keeps its place in the journal, so sequence numbers stay contiguous
	// and later events stay where they were, but it means nothing: Validate
	// accepts it anywhere, Messages leaves it out of the transcript a
	// resumed model sees, and no fold (usage, last outcome, session,
	// progress) reads it. A fork seed copies it as the sentinel.
	EventUnknown EventKind = "unknown"
)

// Source kinds of user-side messages. They keep the runtime's words apart
// from a child's words (DESIGN §1.4).
const (
	SourceUser    = "user"
	SourceReport  = "subagent-report"
	SourceSettled = "subagent-settled"
	// SourceQuestion is a child's question to the person, delivered as a
	// notice to its parent (who may answer it).
	SourceQuestion = "subagent-question"
)

// Event is one sequenced journal entry. Seq counts from 0 without gaps.
//
// Its JSON tags serve in-memory copies and test fixtures; the stored format
// is EncodeEvent's, which does not follow them.
type Event struct {
	Seq        int64        `json:"seq"`
	Kind       EventKind    `json:"kind"`
	Time       time.Time    `json:"time"`
	Turn       int          `json:"turn,omitempty"`
	Message    *llm.Message `json:"message,omitempty"`
	Source     string       `json:"source,omitempty"` // user messages only
	Usage      *llm.Usage   `json:"usage,omitempty"`  // assistant messages only
	StopReason StopReason   `json:"stop_reason,omitempty"`
	Diagnostic string       `json:"diagnostic,omitempty"`
	Session    string       `json:"session,omitempty"` // session events only
	Grant      *Grant       `json:"grant,omitempty"`   // budget events only
}

// Grant is a budget as the journal records it; a zero field is no limit
// of that kind (the manager's Budget, which the agent does not know).
type Grant struct {
	Tokens  int64   `json:"tokens,omitempty"`
	Steps   int     `json:"steps,omitempty"`
	Seconds float64 `json:"seconds,omitempty"`
	CostUSD float64 `json:"cost_usd,omitempty"`
}

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
	var turnUsage llm.Usage
	count := func(e Event) bool { return since.IsZero() || !e.Time.Before(since) }
	for _, e := range events {
		switch {
		case e.Kind == EventTurnStart:
			start, last, turnUsage = e.Time, e.Time, llm.Usage{}
			if !count(e) {
				start = time.Time{}
			}
			continue
		case e.Kind == EventMessage && e.Message != nil && e.Message.Role == llm.RoleAssistant:
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
		return e.Message.Role == llm.RoleTool && e.Message.Content == notRun
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

// Journal is an agent's append-only, sequenced record of its conversation.
// It is safe for concurrent use; listeners run synchronously on Append and
// must not block.
type Journal struct {
	// notifyMu is taken before mu is released in Append, so listeners see
	// events in sequence order even when Appends race.
	notifyMu  sync.Mutex
	mu        sync.Mutex
	events    []Event
	listeners map[int]func(Event)
	nextL     int
}

// NewJournal returns a journal holding seed, which must satisfy the journal
// invariants (see Validate).
func NewJournal(seed []Event) (*Journal, error) {
	if err := Validate(seed); err != nil {
		return nil, err
	}
	return &Journal{events: append([]Event(nil), seed...)}, nil
}

// Append assigns e the next sequence number and its time, records it and
// tells listeners.
func (j *Journal) Append(e Event) Event {
	j.mu.Lock()
	e.Seq = int64(len(j.events))
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	j.events = append(j.events, e)
	ls := make([]func(Event), 0, len(j.listeners))
	for _, l := range j.listeners {
		ls = append(ls, l)
	}
	j.notifyMu.Lock()
	j.mu.Unlock()
	defer j.notifyMu.Unlock()
	for _, l := range ls {
		l(e)
	}
	return e
}

// Subscribe registers fn for every later event; the returned func removes it.
func (j *Journal) Subscribe(fn func(Event)) (cancel func()) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.listeners == nil {
		j.listeners = map[int]func(Event){}
	}
	id := j.nextL
	j.nextL++
	j.listeners[id] = fn
	return func() {
		j.mu.Lock()
		delete(j.listeners, id)
		j.mu.Unlock()
	}
}

// Events returns a copy of every event.
func (j *Journal) Events() []Event {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]Event(nil), j.events...)
}

// NextTurn returns the number the next turn gets: one more than the turns
// started so far.
func (j *Journal) NextTurn() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := 1
	for _, e := range j.events {
		if e.Kind == EventTurnStart {
			n++
		}
	}
	return n
}

// Len returns the number of events.
func (j *Journal) Len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.events)
}

// CompletedPrefix returns the events from sequence 0 up to and including the
// last turn/end: the balanced prefix of completed turns a fork is seeded with.
// A turn in flight is excluded.
func (j *Journal) CompletedPrefix() []Event {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := len(j.events) - 1; i >= 0; i-- {
		if j.events[i].Kind == EventTurnEnd {
			return append([]Event(nil), j.events[:i+1]...)
		}
	}
	return nil
}

// Messages rebuilds the conversation the model sees from the events.
func Messages(events []Event) []llm.Message {
	var out []llm.Message
	for _, e := range events {
		if e.Kind == EventMessage && e.Message != nil {
			out = append(out, *e.Message)
		}
	}
	return out
}

// Validate checks the journal invariants: sequence numbers from 0 without
// gaps, turns strictly alternating start/end (at most the last one open),
// messages only inside turns, and every assistant tool call answered by a
// tool message before the turn ends. Kinds other than those defined here
// are refused; the sentinel EventUnknown is accepted anywhere.
func Validate(events []Event) error {
	open := false
	pending := map[string]bool{}
	for i, e := range events {
		if e.Seq != int64(i) {
			return fmt.Errorf("journal event %d has sequence %d", i, e.Seq)
		}
		switch e.Kind {
		case EventTurnStart:
			if open {
				return fmt.Errorf("journal event %d starts a turn inside a turn", i)
			}
			open = true
		case EventTurnEnd:
			if !open {
				return fmt.Errorf("journal event %d ends a turn that was not started", i)
			}
			if len(pending) > 0 {
				return fmt.Errorf("journal event %d ends a turn with unanswered tool calls", i)
			}
			open = false
		case EventMessage:
			if !open {
				return fmt.Errorf("journal event %d is a message outside a turn", i)
			}
			if e.Message == nil {
				return fmt.Errorf("journal event %d is a message without content", i)
			}
			for _, tc := range e.Message.ToolCalls {
				pending[tc.ID] = true
			}
			if e.Message.Role == llm.RoleTool {
				if !pending[e.Message.ToolCallID] {
					return fmt.Errorf("journal event %d answers unknown tool call %q", i, e.Message.ToolCallID)
				}
				delete(pending, e.Message.ToolCallID)
			}
		case EventSession:
			if e.Session == "" {
				return fmt.Errorf("journal event %d records an empty session", i)
			}
		case EventBudget:
			if e.Grant == nil {
				return fmt.Errorf("journal event %d is a budget grant without limits", i)
			}
		case EventUnknown:
			// A record this build cannot read: it neither opens nor closes
			// a turn nor answers a call, so it is valid wherever it stands.
		default:
			return fmt.Errorf("journal event %d has unknown kind %q", i, e.Kind)
		}
	}
	return nil
}

// ToolResult returns the tool message that answers the tool call callID
// with text.
func ToolResult(callID, text string) *llm.Message {
	return &llm.Message{Role: llm.RoleTool, ToolCallID: callID, Content: text}
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
		case e.Kind == EventMessage && e.Message != nil && e.Message.Role == llm.RoleAssistant && e.Message.Content != "":
			r.Output = e.Message.Content
		case e.Kind == EventTurnEnd:
			r.StopReason, r.Diagnostic = e.StopReason, e.Diagnostic
		}
	}
	return r
}
