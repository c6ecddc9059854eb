package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
)

// DefaultBaseURL is the endpoint used when Config.BaseURL is empty.
const DefaultBaseURL = "https://api.openai.com/v1"

// Client is an llm.Client for OpenAI-compatible chat completions APIs. It is safe
// for concurrent use.
//
// The SDK carries each request (base URL, headers, auth, the exchange
// bookkeeping in its middleware) and splits the event stream; the request
// body and the stream's chunks are encoded and decoded here, with
// encoding/json on small structs of their own: the SDK's reflective
// encoders were over a third of a delegation's CPU, for the same bytes.
type Client struct {
	transport.Retrier
	limits         transport.StreamLimits
	api            openai.Client
	model          string
	completionsKey bool // send max_completion_tokens rather than max_tokens
	tools          transport.ToolCache
}

var _ llm.Client = (*Client)(nil)

// New returns a Client for the chat completions API at cfg.BaseURL.
func New(cfg transport.Config) *Client {
	base, hc := cfg.Endpoint(DefaultBaseURL)
	opts := []option.RequestOption{
		option.WithBaseURL(base),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0), // we retry ourselves, see Complete
	}
	if cfg.APIKey != "" {
		// The generic Post applies no API key of its own: the header is
		// the SDK's explicit override.
		opts = append(opts, option.WithHeader("Authorization", "Bearer "+cfg.APIKey))
	}
	c := &Client{
		Retrier: transport.NewRetrier(cfg),
		limits:  transport.NewStreamLimits(cfg),
		// A bare client, not openai.NewClient: NewClient folds in
		// environment variables (OPENAI_BASE_URL, OPENAI_ORG_ID,
		// OPENAI_CUSTOM_HEADERS...), and the caller's Config must be the
		// whole truth.
		api:   openai.Client{Options: opts},
		model: cfg.Model,
		tools: transport.ToolCache{Encode: encodeTool},
	}
	if u, err := url.Parse(base); err == nil && u.Hostname() == "api.openai.com" {
		c.completionsKey = true
	}
	return c
}

// Complete sends req and returns the model's answer, retrying transient
// failures. See the package doc for what is retried and how the answer is
// assembled.
func (c *Client) Complete(ctx context.Context, req llm.Request, onDelta func(text string)) (llm.Response, error) {
	body, err := c.body(req)
	if err != nil {
		return llm.Response{}, c.ParamsError(err)
	}
	return c.Run(ctx, func() (llm.Response, *transport.Failure) { return c.attempt(ctx, body, onDelta) })
}

// attempt makes one streaming request. It returns the answer, or why there
// is none.
func (c *Client) attempt(ctx context.Context, body []byte, onDelta func(string)) (llm.Response, *transport.Failure) {
	x := &transport.Exchange{}
	w := c.limits.Watch(ctx)
	defer w.Stop()
	var raw *http.Response
	err := c.api.Post(w.Ctx, "chat/completions", body, &raw, option.WithMiddleware(x.Middleware))
	acc := accumulator{bound: transport.OutputBound{Limit: c.limits.MaxOutput}}
	sawDone := false
	if err == nil {
		sawDone, err = readStream(raw, &acc, onDelta, w.Tick)
	}

	if ctx.Err() == nil && w.Stalled() {
		return llm.Response{}, w.Failure()
	}
	if f := x.HTTPFailure(ctx, err); f != nil {
		return llm.Response{}, f
	}
	switch {
	case acc.bound.Cut:
		return acc.bound.CutResponse(acc.response()), nil
	case err != nil:
		return llm.Response{}, &transport.Failure{Message: "stream broken: " + streamMessage(err), Retryable: true, Cause: err}
	case !acc.sawChoice:
		return llm.Response{}, transport.NotAStream(x)
	case acc.finish == "" && !sawDone:
		return llm.Response{}, &transport.Failure{Message: "stream ended before the answer was complete", Retryable: true}
	}
	return acc.response(), nil
}

// readStream reads the event stream of res into acc until its [DONE]
// terminator (sawDone: only that, not a clean end of the body, means the
// server finished), an error event, a chunk that is not JSON, or the
// answer's output bound; tick is called at each event. It closes the
// body. This is the SDK's ssestream.Stream, with the chunk decoded
// once: a chunk field of an unexpected type is left zero rather than
// breaking the stream (compatible servers differ in small ways).
func readStream(res *http.Response, acc *accumulator, onDelta func(string), tick func()) (sawDone bool, err error) {
	dec := ssestream.NewDecoder(res)
	if dec == nil {
		return false, nil
	}
	for dec.Next() {
		tick()
		ev := dec.Event()
		if bytes.HasPrefix(ev.Data, []byte("[DONE]")) {
			finish(res.Body)
			return true, nil
		}
		var ch chunk
		err := json.Unmarshal(ev.Data, &ch)
		var te *json.UnmarshalTypeError
		if err != nil && !errors.As(err, &te) {
			dec.Close()
			return false, err
		}
		if ch.Error != nil { // any "error" key, null too, as the SDK tells an error event
			dec.Close()
			return false, &ssestream.StreamError{Message: "received error while streaming: " + string(ch.Error), Event: ev}
		}
		acc.add(ch, onDelta)
		if acc.bound.Cut {
			// The rest is not read: closing the body loses the
			// connection, which a runaway answer is not worth keeping.
			dec.Close()
			return false, nil
		}
	}
	dec.Close()
	return false, dec.Err()
}

// finish reads what is left of a body after its [DONE] (a server ends the
// body just after it: HTTP/1.1's last chunk, HTTP/2's end of stream) and
// closes it. A body closed before its end takes its HTTP/1.1 connection
// with it, and the next call dialled anew: 20 connections for 20 calls
// to a server that flushes [DONE] before it ends the body. A server that
// never ends it is cut after transport.FinishWait.
func finish(body io.ReadCloser) {
	t := time.AfterFunc(transport.FinishWait, func() { body.Close() })
	_, _ = io.CopyN(io.Discard, body, finishLimit)
	t.Stop()
	body.Close()
}

// finishLimit is more than a terminator: the body is not worth keeping.
const finishLimit = 64 << 10

// streamMessage describes a failure while reading the stream, preferring the
// server's message for an error event.
func streamMessage(err error) string {
	var se *ssestream.StreamError
	if errors.As(err, &se) {
		if m := transport.ErrorMessage(se.Event.Data); m != "" {
			return "server error event: " + m
		}
		return "server error event"
	}
	return transport.TransportMessage(err)
}

// accumulator assembles one assistant message from stream chunks.
type accumulator struct {
	content   strings.Builder
	refusal   strings.Builder
	calls     []llm.ToolCall
	args      [][]byte      // calls' arguments: += on a string copied it whole at every delta
	byIndex   map[int64]int // wire tool-call index -> position in calls
	finish    string
	usage     llm.Usage
	sawChoice bool
	bound     transport.OutputBound // the text, refusal and calls added so far
}

// legacyIndex keys the deprecated function_call delta among tool calls.
const legacyIndex = -1

func (a *accumulator) add(ch chunk, onDelta func(string)) {
	if ch.Usage != nil {
		a.usage = llm.Usage{InputTokens: ch.Usage.PromptTokens, OutputTokens: ch.Usage.CompletionTokens}
	}
	for _, choice := range ch.Choices {
		if choice.Index != 0 {
			continue
		}
		a.sawChoice = true
		d := choice.Delta
		if text := a.bound.Take(d.Content); text != "" {
			a.content.WriteString(text)
			if onDelta != nil {
				onDelta(text)
			}
		}
		a.refusal.WriteString(a.bound.Take(d.Refusal))
		for _, tc := range d.ToolCalls {
			a.addCall(tc.Index, tc.ID, a.bound.Take(tc.Function.Name), a.bound.Take(tc.Function.Arguments))
		}
		// Servers that speak the legacy function_call still exist.
		if fc := d.FunctionCall; fc.Name != "" || fc.Arguments != "" {
			a.addCall(legacyIndex, "", a.bound.Take(fc.Name), a.bound.Take(fc.Arguments))
		}
		if choice.FinishReason != "" {
			a.finish = choice.FinishReason
		}
	}
}

// addCall merges one tool-call delta. Deltas are matched by index; a new id
// at an index that already has a different one starts a new call, for
// servers that number every call 0.
func (a *accumulator) addCall(index int64, id, name, args string) {
	pos, ok := a.byIndex[index]
	if !ok || (id != "" && a.calls[pos].ID != "" && a.calls[pos].ID != id) {
		if a.byIndex == nil {
			a.byIndex = make(map[int64]int)
		}
		a.calls = append(a.calls, llm.ToolCall{})
		a.args = append(a.args, nil)
		pos = len(a.calls) - 1
		a.byIndex[index] = pos
	}
	call := &a.calls[pos]
	if id != "" {
		call.ID = id
	}
	call.Name += name
	a.args[pos] = append(a.args[pos], args...)
}

func (a *accumulator) response() llm.Response {
	msg := llm.Message{
		Role:    llm.RoleAssistant,
		Content: a.content.String(),
		Refusal: a.refusal.String(),
	}
	for i, call := range a.calls {
		call.Arguments = string(a.args[i])
		if call.ID == "" {
			call.ID = "call_" + strconv.Itoa(i)
		}
		msg.ToolCalls = append(msg.ToolCalls, call)
	}
	return llm.Response{Message: msg, FinishReason: finishReason(a.finish, msg), Usage: a.usage}
}

// finishReason maps the wire finish_reason; see the package doc.
func finishReason(wire string, msg llm.Message) llm.FinishReason {
	if msg.Refusal != "" {
		return llm.FinishRefusal
	}
	switch wire {
	case "length":
		return llm.FinishLength
	case "content_filter":
		return llm.FinishContentFilter
	case "tool_calls", "function_call":
		return llm.FinishToolCalls
	}
	if len(msg.ToolCalls) > 0 {
		return llm.FinishToolCalls
	}
	return llm.FinishStop
}

// body encodes a Request as a streaming chat completions request.
func (c *Client) body(req llm.Request) ([]byte, error) {
	w := wireRequest{Model: req.Model, Stream: true}
	if w.Model == "" {
		w.Model = c.model
	}
	if w.Model == "" {
		return nil, errors.New("no model: Request.Model and Config.Model are both empty")
	}
	w.StreamOptions.IncludeUsage = true
	if req.MaxTokens > 0 {
		if c.completionsKey {
			w.MaxCompletionTokens = req.MaxTokens
		} else {
			w.MaxTokens = req.MaxTokens
		}
	}
	if !req.Effort.Valid() {
		return nil, fmt.Errorf("effort %q: want low, medium or high", req.Effort)
	}
	// reasoning_effort takes the same words; empty sends nothing, so servers
	// and models without reasoning see no new field.
	w.ReasoningEffort = string(req.Effort)
	w.Messages = make([]wireMessage, len(req.Messages))
	for i, m := range req.Messages {
		if err := w.Messages[i].set(m); err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
	}
	// The tools are spliced in as cached bytes: a child sends the same
	// tools on every model call, and re-encoding their schemas was a tenth
	// of the CPU of a delegation. The buffer is sized once for the whole
	// body.
	tools := make([][]byte, len(req.Tools))
	size := 256
	for i, t := range req.Tools {
		raw, err := c.tools.Encoded(t, false)
		if err != nil {
			return nil, fmt.Errorf("tools[%d] (%s): %w", i, t.Name, err)
		}
		tools[i] = raw
		size += len(raw) + 1
	}
	for _, m := range req.Messages {
		size += len(m.Content) + len(m.Refusal) + 64
		for _, tc := range m.ToolCalls {
			size += len(tc.Arguments) + len(tc.Name) + len(tc.ID) + 64
		}
	}
	buf := bytes.NewBuffer(make([]byte, 0, size+size/8))
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(w); err != nil {
		return nil, err
	}
	out := bytes.TrimRight(buf.Bytes(), "\n")
	if len(tools) == 0 {
		return out, nil
	}
	out = append(out[:len(out)-1], `,"tools":[`...)
	for i, raw := range tools {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, raw...)
	}
	return append(out, "]}"...), nil
}

// wireRequest is the chat completions request body, but its tools.
type wireRequest struct {
	Model               string        `json:"model"`
	Messages            []wireMessage `json:"messages"`
	MaxTokens           int64         `json:"max_tokens,omitempty"`
	MaxCompletionTokens int64         `json:"max_completion_tokens,omitempty"`
	ReasoningEffort     string        `json:"reasoning_effort,omitempty"`
	Stream              bool          `json:"stream"`
	StreamOptions       struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type wireMessage struct {
	Role       string         `json:"role"`
	Content    *string        `json:"content,omitempty"`
	Refusal    string         `json:"refusal,omitempty"`
	ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type wireToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func (w *wireMessage) set(m llm.Message) error {
	switch m.Role {
	case llm.RoleSystem, llm.RoleUser:
	case llm.RoleTool:
		if m.ToolCallID == "" {
			return errors.New("tool message without tool_call_id")
		}
		w.ToolCallID = m.ToolCallID
	case llm.RoleAssistant:
		w.Refusal = m.Refusal
		if len(m.ToolCalls) > 0 {
			w.ToolCalls = make([]wireToolCall, len(m.ToolCalls))
		}
		for i, tc := range m.ToolCalls {
			args := tc.Arguments
			if strings.TrimSpace(args) == "" {
				args = "{}" // servers that parse arguments reject ""
			}
			wc := &w.ToolCalls[i]
			wc.ID, wc.Type = tc.ID, "function"
			wc.Function.Name, wc.Function.Arguments = tc.Name, args
		}
		// Content may be omitted only when the message calls tools; some
		// servers reject an assistant message with neither.
		if m.Content == "" && len(m.ToolCalls) > 0 {
			w.Role = string(m.Role)
			return nil
		}
	default:
		return fmt.Errorf("unknown role %q", m.Role)
	}
	w.Role = string(m.Role)
	content := m.Content
	w.Content = &content
	return nil
}

// chunk is one streamed chat completion chunk, as far as it is read.
type chunk struct {
	Choices []chunkChoice   `json:"choices"`
	Usage   *chunkUsage     `json:"usage"`
	Error   json.RawMessage `json:"error"` // an error event
}

type chunkChoice struct {
	Index        int64      `json:"index"`
	Delta        chunkDelta `json:"delta"`
	FinishReason string     `json:"finish_reason"`
}

type chunkDelta struct {
	Content      string          `json:"content"`
	Refusal      string          `json:"refusal"`
	ToolCalls    []chunkToolCall `json:"tool_calls"`
	FunctionCall chunkFunction   `json:"function_call"` // the legacy form
}

type chunkToolCall struct {
	Index    int64         `json:"index"`
	ID       string        `json:"id"`
	Function chunkFunction `json:"function"`
}

type chunkFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type chunkUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

// encodeTool encodes a tool as the chat API takes it: a function with its
// name, description if any, and the parameters schema. Chat completions
// have no cache mark.
func encodeTool(t llm.ToolDef, _ bool) ([]byte, error) {
	params, err := transport.ToolSchema(t)
	if err != nil {
		return nil, err
	}
	type function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters"`
	}
	return json.Marshal(struct {
		Type     string   `json:"type"`
		Function function `json:"function"`
	}{"function", function{t.Name, t.Description, params}})
}
