package llm

import (
	"context"
	"encoding/json"
)

// Role is the author of a Message.
type Role string

const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one chat message as the model sees it.
type Message struct {
	Role       Role       `json:"role"`
	Content    string     `json:"content,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`   // assistant messages only
	ToolCallID string     `json:"tool_call_id,omitempty"` // tool messages only
	Refusal    string     `json:"refusal,omitempty"`      // assistant messages only
}

// ToolCall is one function call the model asked for.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // raw JSON text as the model wrote it
}

// ToolDef describes a function the model may call.
type ToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"` // a JSON Schema object
}

// Usage counts tokens for one or more model calls.
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// CostUSD is what the calls cost, where the agent reports it (external
	// CLIs do; the chat API does not).
	CostUSD float64 `json:"cost_usd,omitempty"`
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{InputTokens: u.InputTokens + v.InputTokens, OutputTokens: u.OutputTokens + v.OutputTokens, CostUSD: u.CostUSD + v.CostUSD}
}

// FinishReason says why the model stopped producing a message.
type FinishReason string

const (
	FinishStop          FinishReason = "stop"
	FinishToolCalls     FinishReason = "tool_calls"
	FinishLength        FinishReason = "length"
	FinishContentFilter FinishReason = "content_filter"
	// FinishRefusal is reported when the message carries a refusal, whatever
	// the wire finish_reason said.
	FinishRefusal FinishReason = "refusal"
)

// Effort is how hard a model should think before it answers; each backend
// maps it to its own knob (OpenAI's reasoning_effort, Anthropic's
// output_config.effort, a CLI flag). Empty: the backend's default.
type Effort string

const (
	EffortLow    Effort = "low"
	EffortMedium Effort = "medium"
	EffortHigh   Effort = "high"
)

// Valid reports whether e is empty or one of the three levels.
func (e Effort) Valid() bool {
	switch e {
	case "", EffortLow, EffortMedium, EffortHigh:
		return true
	}
	return false
}

// Price is what a model's tokens cost, in USD per million tokens.
type Price struct {
	InputPerMTok  float64 `json:"input_per_mtok"`
	OutputPerMTok float64 `json:"output_per_mtok"`
}

// Cost is what usage u costs at p.
func (p Price) Cost(u Usage) float64 {
	return (float64(u.InputTokens)*p.InputPerMTok + float64(u.OutputTokens)*p.OutputPerMTok) / 1e6
}

// Request is one chat completion call.
type Request struct {
	Model     string
	Messages  []Message
	Tools     []ToolDef
	MaxTokens int64  // zero: the server's default (Anthropic: anthropic.DefaultMaxTokens)
	Effort    Effort // empty: the backend's default
}

// Response is the model's complete answer to a Request.
type Response struct {
	Message      Message // Role is always RoleAssistant
	FinishReason FinishReason
	Usage        Usage
	// OutputLimit is non-zero when the answer was cut because it reached
	// this many bytes (Config.MaxOutputBytes): FinishReason is then
	// FinishLength, and the rest of the stream was not read.
	OutputLimit int
}

// Client is a chat model. Implementations must be safe for concurrent use.
//
// Complete returns an error only when no answer could be had (transport
// failure after retries, cancellation); a refusal or a truncated answer is a
// Response with the matching FinishReason. onDelta, when non-nil, receives
// assistant text as it streams; it must not block.
type Client interface {
	Complete(ctx context.Context, req Request, onDelta func(text string)) (Response, error)
}
