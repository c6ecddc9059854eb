package seam

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"
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
	// agent.LastGrant), so a restart never hands out a fresh budget. Builds
	// before it fold the record to EventUnknown.
	EventBudget EventKind = "budget"
	// EventUnknown is the sentinel a stored record folds to when this build
	// cannot read it: a kind it does not know, or a later format version
	// (see agent.DecodeEvent). It holds only its sequence number and time. It
	// keeps its place in the journal, so sequence numbers stay contiguous
	// and later events stay where they were, but it means nothing: Validate
	// accepts it anywhere, agent.Messages leaves it out of the transcript a
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
// is agent.EncodeEvent's, which does not follow them.
type Event struct {
	Seq        int64      `json:"seq"`
	Kind       EventKind  `json:"kind"`
	Time       time.Time  `json:"time"`
	Turn       int        `json:"turn,omitempty"`
	Message    *Message   `json:"message,omitempty"`
	Source     string     `json:"source,omitempty"` // user messages only
	Usage      *Usage     `json:"usage,omitempty"`  // assistant messages only
	StopReason StopReason `json:"stop_reason,omitempty"`
	Diagnostic string     `json:"diagnostic,omitempty"`
	Session    string     `json:"session,omitempty"` // session events only
	Grant      *Grant     `json:"grant,omitempty"`   // budget events only
}

// Grant is a budget as the journal records it; a zero field is no limit
// of that kind (the manager's Budget, which the agent does not know).
type Grant struct {
	Tokens  int64   `json:"tokens,omitempty"`
	Steps   int     `json:"steps,omitempty"`
	Seconds float64 `json:"seconds,omitempty"`
	CostUSD float64 `json:"cost_usd,omitempty"`
}

// Role is the author of a recorded Message: llm.Role's values.
type Role string

const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one chat message as the journal records it: llm.Message's
// fields and JSON, field for field (package agent converts between the
// two where the model is called).
type Message struct {
	Role       Role       `json:"role"`
	Content    string     `json:"content,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`   // assistant messages only
	ToolCallID string     `json:"tool_call_id,omitempty"` // tool messages only
	Refusal    string     `json:"refusal,omitempty"`      // assistant messages only
}

// ToolCall is one function call the model asked for: llm.ToolCall's
// fields and JSON, converting with a plain conversion.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // raw JSON text as the model wrote it
}

// StopReason says how a turn ended. Only StopCompleted is success.
type StopReason string

const (
	StopCompleted StopReason = "completed"
	StopAborted   StopReason = "aborted"
	StopError     StopReason = "error"
	StopMaxTokens StopReason = "max-tokens"
	StopRefusal   StopReason = "refusal"
	// StopBudget: the child ran out of its budget (tokens, steps, seconds
	// or cost, its own or an ancestor's); an error result.
	StopBudget StopReason = "budget"
)

// Input is one user-side message of a turn and its source kind.
type Input struct {
	Text   string
	Source string // SourceUser (default), SourceReport, SourceSettled
}

// TurnResult is how one turn ended.
type TurnResult struct {
	Output     string          // the last non-empty assistant message of the turn
	Structured json.RawMessage // the captured object; only when a schema was met
	StopReason StopReason
	Diagnostic string // why a non-completed turn ended; secret-free
	Usage      Usage
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
			if e.Message.Role == RoleTool {
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
