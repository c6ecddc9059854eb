package listing

import (
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
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
	Usage      *seam.Usage      `json:"usage,omitempty"`
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

// Entry is journal event e as a transcript shows it, each text bounded by
// MaxTranscriptText.
func Entry(e agent.Event) TranscriptEntry {
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
		if msg.Role == seam.RoleUser {
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
