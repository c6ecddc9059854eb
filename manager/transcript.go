package manager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// MaxTranscriptText bounds each text a transcript entry carries (a
// message, a tool call's arguments, a tool's result, a diagnostic): a
// transcript is for reading a child, not for copying its every byte.
const MaxTranscriptText = 4096

// Transcript is a child's journal as a reader sees it: who the child is,
// whether it is resident, and its entries from After on.
type Transcript struct {
	ID        string    `json:"id"`
	Parent    string    `json:"parent"`
	Label     string    `json:"label,omitempty"`
	Provider  string    `json:"provider,omitempty"`
	Model     string    `json:"model,omitempty"`
	Depth     int       `json:"depth"`
	CreatedAt time.Time `json:"created_at"`
	// Status is the listing's: running, queued, idle (resident) or ready
	// (stored, not resident: settled until it is sent more).
	Status string `json:"status"`
	// Len is the journal's length: pass it as the next read's After to get
	// only what came since.
	Len     int64             `json:"len"`
	Entries []TranscriptEntry `json:"entries"`
}

// TranscriptEntry is one journal event. Kind is the journal's own:
// turn/start, turn/end, message, session or budget. A message's Role says whose words it holds; a user
// message's Source says who wrote it: the parent (user), a child's report
// (subagent-report) or the runtime's settlement notice of a child
// (subagent-settled), so the runtime's words never pass for anyone's.
type TranscriptEntry struct {
	Seq        int64            `json:"seq"`
	Time       time.Time        `json:"time"`
	Turn       int              `json:"turn,omitempty"`
	Kind       string           `json:"kind"`
	Role       string           `json:"role,omitempty"`
	Source     string           `json:"source,omitempty"`
	Text       string           `json:"text,omitempty"`
	Refusal    string           `json:"refusal,omitempty"`
	ToolCalls  []TranscriptCall `json:"tool_calls,omitempty"`
	ToolCallID string           `json:"tool_call_id,omitempty"` // a tool result's call
	Usage      *llm.Usage       `json:"usage,omitempty"`
	StopReason agent.StopReason `json:"stop_reason,omitempty"` // turn/end
	Diagnostic string           `json:"diagnostic,omitempty"`  // turn/end
	// Budget is a budget entry's grant: the limits from its turn on (no
	// field set: unlimited).
	Budget *seam.Budget `json:"budget,omitempty"`
	// Truncated is set when a text of the entry was cut to
	// MaxTranscriptText.
	Truncated bool `json:"truncated,omitempty"`
}

// TranscriptCall is one tool call of an assistant message.
type TranscriptCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments,omitempty"`
}

// Transcript returns the child's journal from event After on (zero: all),
// each text bounded by MaxTranscriptText. A resident child's journal is
// read from memory (it is ahead of the store); a stored one from the store.
// Only the principal of the child's lineage may read it, as a root caller
// or as one of the child's ancestors; anyone else gets UNAUTHORIZED, and
// an id the store does not hold is INVALID_REQUEST.
func (m *Manager) Transcript(ctx context.Context, caller seam.ParentRef, childID string, after int64) (Transcript, error) {
	if m.store == nil {
		return Transcript{}, newErr(seam.CodeControlUnavailable, "transcripts need a session store; none is configured")
	}
	m.mu.Lock()
	a := m.live[childID]
	m.mu.Unlock()
	var (
		h      seam.Header
		model  string
		events []agent.Event
		status = StatusReady
	)
	if a != nil {
		h, model, status = a.hdr, a.desc.Model, a.status()
		events = a.driver.Journal().Events()
	} else {
		var err error
		if h, err = m.store.Header(ctx, childID); err != nil {
			return Transcript{}, transcriptErr(childID, err)
		}
		model = h.Model
	}
	if err := m.mayRead(ctx, caller, h, a); err != nil {
		return Transcript{}, err
	}
	if a == nil {
		var err error
		if events, err = m.store.Events(ctx, childID); err != nil {
			return Transcript{}, transcriptErr(childID, err)
		}
	}
	t := Transcript{ID: h.ID, Parent: h.Parent, Label: h.Label, Provider: h.Provider, Model: model, Depth: h.Depth,
		CreatedAt: h.CreatedAt, Status: status, Len: int64(len(events)), Entries: []TranscriptEntry{}}
	for _, e := range events[min(max(after, 0), int64(len(events))):] {
		t.Entries = append(t.Entries, transcriptEntry(e))
	}
	return t, nil
}

func transcriptErr(id string, err error) error {
	if errors.Is(err, seam.ErrNotFound) {
		return &seam.Error{Code: seam.CodeInvalidRequest, AgentID: id, Err: err,
			Message: fmt.Sprintf("no subagent %s: use an id list_agents shows", id)}
	}
	return &seam.Error{Code: seam.CodePersistenceUnavailable, AgentID: id, Err: err,
		Message: fmt.Sprintf("subagent %s cannot be read from the session store (%v)", id, err)}
}

func transcriptEntry(e agent.Event) TranscriptEntry {
	te := TranscriptEntry{Seq: e.Seq, Time: e.Time, Turn: e.Turn, Kind: string(e.Kind), StopReason: e.StopReason}
	bound := func(s string) string {
		if len(s) > MaxTranscriptText {
			te.Truncated = true
		}
		return truncate.Bound(s, MaxTranscriptText)
	}
	te.Diagnostic = bound(e.Diagnostic)
	if e.Usage != nil {
		u := *e.Usage
		te.Usage = &u
	}
	if g := e.Grant; g != nil {
		te.Budget = &seam.Budget{Tokens: g.Tokens, Steps: g.Steps, Seconds: g.Seconds, CostUSD: g.CostUSD}
	}
	if msg := e.Message; msg != nil {
		te.Role, te.Text, te.Refusal, te.ToolCallID = string(msg.Role), bound(msg.Content), bound(msg.Refusal), msg.ToolCallID
		if msg.Role == llm.RoleUser {
			te.Source = e.Source
			if te.Source == "" {
				te.Source = agent.SourceUser
			}
		}
		for _, tc := range msg.ToolCalls {
			te.ToolCalls = append(te.ToolCalls, TranscriptCall{ID: tc.ID, Name: tc.Name, Arguments: bound(tc.Arguments)})
		}
	}
	return te
}

// Watch signals a reader that a child's transcript changed: on every
// journal event of its activations while it is resident (a later wake or
// resume included), and once when an epoch settles. Signals coalesce: C
// holds at most one, and a reader re-reads the transcript from the length
// it last saw. The watch is its creator's: Stop ends it.
type Watch struct {
	// C receives a value after each change (coalesced).
	C <-chan struct{}
	// Settled receives a value when an epoch of the child settles
	// (coalesced), after its final journal events are readable.
	Settled <-chan struct{}

	c, settled chan struct{}
	id         string
	stopLife   func() // ends the lifecycle subscription
	done       atomic.Bool

	mu      sync.Mutex
	stopped bool
	journal *activation // the activation whose journal it follows
	unsub   func()      // ...and that subscription
}

// Watch starts watching childID for caller, who must be allowed to read it
// (see Transcript). Stop it when done.
func (m *Manager) Watch(ctx context.Context, caller seam.ParentRef, childID string) (*Watch, error) {
	if m.store == nil {
		return nil, newErr(seam.CodeControlUnavailable, "transcripts need a session store; none is configured")
	}
	m.mu.Lock()
	a := m.live[childID]
	m.mu.Unlock()
	h, err := seam.Header{}, error(nil)
	if a != nil {
		h = a.hdr
	} else if h, err = m.store.Header(ctx, childID); err != nil {
		return nil, transcriptErr(childID, err)
	}
	if err := m.mayRead(ctx, caller, h, a); err != nil {
		return nil, err
	}
	w := &Watch{c: make(chan struct{}, 1), settled: make(chan struct{}, 1), id: childID}
	w.C, w.Settled = w.c, w.settled
	// Lifecycle first, then the live check: an activation that starts in
	// between is seen by one of the two (follow ignores a repeat).
	w.stopLife = m.Subscribe(func(e Event) {
		if e.RunID != childID {
			return
		}
		switch e.Type {
		case EventStart:
			m.mu.Lock()
			a := m.live[childID]
			m.mu.Unlock()
			w.follow(a, true)
		case EventEnd:
			w.follow(nil, false)
			w.poke(w.c)
			w.poke(w.settled)
		}
	})
	m.mu.Lock()
	a = m.live[childID]
	m.mu.Unlock()
	w.follow(a, false) // the reader reads after this returns: nothing to catch up on
	return w, nil
}

// follow moves w's journal subscription to a's (nil: none); catchUp
// signals once for events a journaled before the subscription (a wake
// seen late).
func (w *Watch) follow(a *activation, catchUp bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || a == w.journal {
		return
	}
	if w.unsub != nil {
		w.unsub()
		w.unsub = nil
	}
	w.journal = a
	if a != nil {
		// Runs under the journal's lock: it must not block, nor take w.mu
		// (follow holds it while it subscribes).
		w.unsub = a.driver.Journal().Subscribe(func(agent.Event) { w.poke(w.c) })
		if catchUp {
			w.poke(w.c)
		}
	}
}

// Stop ends the watch: no signal is sent once it has returned, except
// one a listener had already begun (a reader stops reading C anyway).
func (w *Watch) Stop() {
	w.done.Store(true)
	w.stopLife()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.unsub != nil {
		w.unsub()
		w.unsub = nil
	}
	w.journal = nil
}

func (w *Watch) poke(c chan struct{}) {
	if w.done.Load() {
		return
	}
	select {
	case c <- struct{}{}:
	default:
	}
}
