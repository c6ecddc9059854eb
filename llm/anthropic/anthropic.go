package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
)

// DefaultBaseURL is the Anthropic API root used when Config.BaseURL
// is empty. Like the SDK, it has no /v1: requests go to {root}/v1/messages.
const DefaultBaseURL = "https://api.anthropic.com"

// DefaultMaxTokens is the max_tokens sent when Request.MaxTokens is
// zero: the Messages API requires one, and this fits within every current
// Claude model's output limit.
const DefaultMaxTokens = 16384

// Client is an llm.Client for the Anthropic Messages API. It is safe for
// concurrent use.
type Client struct {
	transport.Retrier
	limits transport.StreamLimits
	msgs   anthropic.MessageService
	model  string
	tools  transport.ToolCache
}

var _ llm.Client = (*Client)(nil)

// New returns a Client for the Anthropic Messages API at
// cfg.BaseURL, the API root without /v1 (empty: https://api.anthropic.com).
func New(cfg transport.Config) *Client {
	base, hc := cfg.Endpoint(DefaultBaseURL)
	opts := []option.RequestOption{
		option.WithBaseURL(base),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0), // we retry ourselves, see Complete
	}
	if cfg.APIKey != "" {
		// x-api-key is how the API takes keys; the SDK's WithAPIKey sends
		// the key as a bearer token, which only some gateways accept.
		opts = append(opts, option.WithHeader("x-api-key", cfg.APIKey))
	}
	return &Client{
		Retrier: transport.NewRetrier(cfg),
		limits:  transport.NewStreamLimits(cfg),
		// The service, not anthropic.NewClient: NewClient folds in
		// ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, ANTHROPIC_CUSTOM_HEADERS and
		// credential profiles on disk, and the Config must be the whole truth.
		msgs:  anthropic.NewMessageService(opts...),
		model: cfg.Model,
		tools: transport.ToolCache{Encode: encodeAnthropicTool},
	}
}

// Complete sends req and returns the model's answer, retrying transient
// failures. See the package doc for what is mapped, retried and cached.
func (c *Client) Complete(ctx context.Context, req llm.Request, onDelta func(text string)) (llm.Response, error) {
	params, err := c.params(req)
	if err != nil {
		return llm.Response{}, c.ParamsError(err)
	}
	return c.Run(ctx, func() (llm.Response, *transport.Failure) { return c.attempt(ctx, params, onDelta) })
}

// attempt makes one streaming request. It returns the answer, or why there
// is none.
func (c *Client) attempt(ctx context.Context, params anthropic.MessageNewParams, onDelta func(string)) (llm.Response, *transport.Failure) {
	x := &transport.Exchange{}
	w := c.limits.Watch(ctx)
	defer w.Stop()
	stream := c.msgs.NewStreaming(w.Ctx, params, option.WithMiddleware(x.Middleware))
	defer stream.Close()

	acc := messageAccumulator{bound: transport.OutputBound{Limit: c.limits.MaxOutput}}
	for stream.Next() {
		w.Tick()
		acc.add(stream.Current(), onDelta)
		if acc.bound.Cut {
			break // the rest is not read; Close drops the connection
		}
		if acc.stopped {
			// The answer is whole; the server should end the body now
			// (read to its end, the connection is kept for the next
			// call), but one that holds it open is not waited for.
			w.Shorten(transport.FinishWait)
		}
	}
	err := stream.Err()
	if ctx.Err() == nil && w.Stalled() {
		if !acc.stopped {
			return llm.Response{}, w.Failure()
		}
		err = nil
	}

	if f := x.HTTPFailure(ctx, err); f != nil {
		return llm.Response{}, f
	}
	switch {
	case acc.bound.Cut:
		return acc.bound.CutResponse(acc.response()), nil
	case err != nil:
		return llm.Response{}, eventFailure(err)
	case !acc.started:
		return llm.Response{}, transport.NotAStream(x)
	case !acc.stopped:
		return llm.Response{}, &transport.Failure{Message: "stream ended before message_stop", Retryable: true}
	}
	return acc.response(), nil
}

// permanentErrorTypes are the API's error types that another attempt cannot
// fix. Any other error event in a stream (overloaded_error, api_error,
// rate_limit_error, timeout_error, an unknown type) is retried.
var permanentErrorTypes = map[string]bool{
	"invalid_request_error": true,
	"authentication_error":  true,
	"permission_error":      true,
	"not_found_error":       true,
	"request_too_large":     true,
	"billing_error":         true,
}

// eventFailure describes a stream that broke after a 200: an error event
// (the SDK decodes it into an *anthropic.Error, whose own message carries
// the URL) or a read or decoding error.
func eventFailure(err error) *transport.Failure {
	var ae *anthropic.Error
	if errors.As(err, &ae) {
		typ := string(ae.Type())
		msg := "server error event"
		if typ != "" {
			msg += ": " + typ
		}
		if m := transport.ErrorMessage([]byte(ae.RawJSON())); m != "" && m != typ {
			msg += ": " + m
		}
		return &transport.Failure{Message: msg, Retryable: !permanentErrorTypes[typ], Cause: err}
	}
	return &transport.Failure{Message: "stream broken: " + transport.TransportMessage(err), Retryable: true, Cause: err}
}

// messageAccumulator assembles one assistant message from stream events.
type messageAccumulator struct {
	text    strings.Builder
	inText  bool // the last block opened was text
	calls   []llm.ToolCall
	args    [][]byte      // calls' arguments: += on a string copied it whole at every delta
	callAt  map[int64]int // content block index -> position in calls
	stop    anthropic.StopReason
	refusal anthropic.RefusalStopDetails
	// The usage counts are cumulative: message_start has the input, and
	// message_delta the output so far (and, on newer servers, the input
	// again); the largest value seen is the count.
	input, cacheWrite, cacheRead, output int64
	started, stopped                     bool
	bound                                transport.OutputBound // the text and calls added so far
}

func (a *messageAccumulator) add(ev anthropic.MessageStreamEventUnion, onDelta func(string)) {
	switch ev.Type {
	case "message_start":
		a.started = true
		u := ev.Message.Usage
		a.usage(u.InputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens, u.OutputTokens)
	case "content_block_start":
		switch cb := ev.ContentBlock; cb.Type {
		case "text":
			// Text blocks split by a tool call read as paragraphs.
			if a.text.Len() > 0 && !a.inText {
				a.emit("\n\n", onDelta)
			}
			a.inText = true
			a.emit(cb.Text, onDelta)
		case "tool_use":
			a.inText = false
			if a.callAt == nil {
				a.callAt = map[int64]int{}
			}
			a.callAt[ev.Index] = len(a.calls)
			a.calls = append(a.calls, llm.ToolCall{ID: cb.ID, Name: a.bound.Take(cb.Name)})
			a.args = append(a.args, nil)
		default: // thinking and other blocks are not part of the answer
			a.inText = false
		}
	case "content_block_delta":
		switch d := ev.Delta; d.Type {
		case "text_delta":
			a.emit(d.Text, onDelta)
		case "input_json_delta":
			if pos, ok := a.callAt[ev.Index]; ok {
				a.args[pos] = append(a.args[pos], a.bound.Take(d.PartialJSON)...)
			}
		}
	case "message_delta":
		if ev.Delta.StopReason != "" {
			a.stop = ev.Delta.StopReason
		}
		if ev.Delta.JSON.StopDetails.Valid() {
			a.refusal = ev.Delta.StopDetails
		}
		u := ev.Usage
		a.usage(u.InputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens, u.OutputTokens)
	case "message_stop":
		a.stopped = true
	}
}

func (a *messageAccumulator) emit(s string, onDelta func(string)) {
	s = a.bound.Take(s)
	if s == "" {
		return
	}
	a.text.WriteString(s)
	if onDelta != nil {
		onDelta(s)
	}
}

func (a *messageAccumulator) usage(input, cacheWrite, cacheRead, output int64) {
	a.input = max(a.input, input)
	a.cacheWrite = max(a.cacheWrite, cacheWrite)
	a.cacheRead = max(a.cacheRead, cacheRead)
	a.output = max(a.output, output)
}

func (a *messageAccumulator) response() llm.Response {
	msg := llm.Message{Role: llm.RoleAssistant, Content: a.text.String()}
	for i, call := range a.calls {
		call.Arguments = string(a.args[i])
		if strings.TrimSpace(call.Arguments) == "" {
			call.Arguments = "{}" // a tool_use with no input deltas has input {}
		}
		msg.ToolCalls = append(msg.ToolCalls, call)
	}
	finish := llm.FinishStop
	switch a.stop {
	case anthropic.StopReasonToolUse:
		finish = llm.FinishToolCalls
	case anthropic.StopReasonMaxTokens, anthropic.StopReasonModelContextWindowExceeded:
		finish = llm.FinishLength
	case anthropic.StopReasonRefusal:
		finish = llm.FinishRefusal
		msg.Refusal = refusalText(a.refusal)
	default: // end_turn, stop_sequence, pause_turn (server tools only), unknown
		if len(msg.ToolCalls) > 0 {
			finish = llm.FinishToolCalls
		}
	}
	return llm.Response{Message: msg, FinishReason: finish, Usage: llm.Usage{
		InputTokens:  a.input + a.cacheWrite + a.cacheRead,
		OutputTokens: a.output,
	}}
}

// refusalText is what the agent reports for a refusal: the API's
// explanation when it gives one, else its category.
func refusalText(d anthropic.RefusalStopDetails) string {
	s := "the API stopped the answer (stop_reason refusal"
	if d.Category != "" {
		s += ", category " + string(d.Category)
	}
	s += ")"
	if e := strings.TrimSpace(d.Explanation); e != "" {
		s = transport.OneLine(e)
	}
	return s
}

// params maps a Request to the SDK's parameters.
func (c *Client) params(req llm.Request) (anthropic.MessageNewParams, error) {
	var p anthropic.MessageNewParams
	p.Model = anthropic.Model(req.Model)
	if p.Model == "" {
		p.Model = anthropic.Model(c.model)
	}
	if p.Model == "" {
		return p, errors.New("no model: Request.Model and Config.Model are both empty")
	}
	p.MaxTokens = req.MaxTokens
	if p.MaxTokens <= 0 {
		p.MaxTokens = DefaultMaxTokens
	}
	if !req.Effort.Valid() {
		return p, fmt.Errorf("effort %q: want low, medium or high", req.Effort)
	}
	// output_config.effort takes the same words; empty sends nothing.
	p.OutputConfig.Effort = anthropic.OutputConfigEffort(req.Effort)

	var b turns
	for i, m := range req.Messages {
		if m.Role == llm.RoleSystem {
			if strings.TrimSpace(m.Content) != "" {
				p.System = append(p.System, anthropic.TextBlockParam{Text: m.Content})
			}
			continue
		}
		if err := b.add(m); err != nil {
			return p, fmt.Errorf("messages[%d]: %w", i, err)
		}
	}
	if len(b.msgs) == 0 {
		return p, errors.New("no messages: the Messages API needs at least one user or assistant message")
	}
	p.Messages = b.msgs

	// Cache breakpoints. The prefix order is tools, system, messages: a mark
	// on the system prompt (or, without one, the last tool) caches the fixed
	// part, and a mark on the newest message's last block caches the whole
	// history, which the next call, two messages longer, reads back.
	if n := len(p.System); n > 0 {
		p.System[n-1].CacheControl = anthropic.NewCacheControlEphemeralParam()
	}
	for i, t := range req.Tools {
		mark := len(p.System) == 0 && i == len(req.Tools)-1
		raw, err := c.tools.Encoded(t, mark)
		if err != nil {
			return p, fmt.Errorf("tools[%d] (%s): %w", i, t.Name, err)
		}
		var tp anthropic.ToolParam
		param.SetJSON(raw, &tp)
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: &tp})
	}
	last := b.msgs[len(b.msgs)-1]
	var content []anthropic.ContentBlockParamUnion
	if last.OfUser != nil {
		content = last.OfUser.Content
	} else {
		content = last.OfAssistant.Content
	}
	if cc := content[len(content)-1].GetCacheControl(); cc != nil {
		*cc = anthropic.NewCacheControlEphemeralParam()
	}
	return p, nil
}

// turns builds the messages list: consecutive messages of one side merge
// into one message (the API wants every tool result of a round in the one
// user message after the tool calls), and messages with nothing to send are
// left out (the API rejects empty content).
type turns struct {
	msgs []anthropic.MessageParam
	user bool // the last message is a user message
}

func (b *turns) add(m llm.Message) error {
	var blocks []anthropic.ContentBlockParamUnion
	user := true
	switch m.Role {
	case llm.RoleUser:
		if m.Content != "" {
			blocks = append(blocks, anthropic.NewTextBlock(m.Content))
		}
	case llm.RoleTool:
		if m.ToolCallID == "" {
			return errors.New("tool message without tool_call_id")
		}
		tr := anthropic.ToolResultBlockParam{ToolUseID: m.ToolCallID}
		if m.Content != "" {
			tr.Content = []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: m.Content}}}
		}
		blocks = append(blocks, anthropic.ContentBlockParamUnion{OfToolResult: &tr})
	case llm.RoleAssistant:
		user = false
		// A refusal is the API's statement, not the model's words: it is
		// not sent back.
		if m.Content != "" {
			blocks = append(blocks, anthropic.NewTextBlock(m.Content))
		}
		for _, tc := range m.ToolCalls {
			blocks = append(blocks, anthropic.ContentBlockParamUnion{OfToolUse: &anthropic.ToolUseBlockParam{
				ID: tc.ID, Name: tc.Name, Input: toolInput(tc.Arguments),
			}})
		}
	default:
		return fmt.Errorf("unknown role %q", m.Role)
	}
	if len(blocks) == 0 {
		return nil
	}
	if n := len(b.msgs); n > 0 && b.user == user {
		if user {
			b.msgs[n-1].OfUser.Content = append(b.msgs[n-1].OfUser.Content, blocks...)
		} else {
			b.msgs[n-1].OfAssistant.Content = append(b.msgs[n-1].OfAssistant.Content, blocks...)
		}
		return nil
	}
	if user {
		b.msgs = append(b.msgs, anthropic.NewUserMessage(blocks...))
	} else {
		b.msgs = append(b.msgs, anthropic.NewAssistantMessage(blocks...))
	}
	b.user = user
	return nil
}

// toolInput is a tool call's arguments as the tool_use input, which must be
// a JSON object: arguments that are not one (cut off, or from a backend that
// sent free text) go back as {} rather than failing every later call.
func toolInput(args string) json.RawMessage {
	trimmed := bytes.TrimSpace([]byte(args))
	if len(trimmed) > 0 && trimmed[0] == '{' && json.Valid(trimmed) {
		return trimmed
	}
	return json.RawMessage(`{}`)
}

// encodeAnthropicTool encodes a tool as the Messages API takes it: name,
// description if any, input_schema, and the cache mark when asked.
func encodeAnthropicTool(t llm.ToolDef, mark bool) ([]byte, error) {
	schema, err := transport.ToolSchema(t)
	if err != nil {
		return nil, err
	}
	type cacheControl struct {
		Type string `json:"type"`
	}
	tool := struct {
		Name         string          `json:"name"`
		Description  string          `json:"description,omitempty"`
		InputSchema  json.RawMessage `json:"input_schema"`
		CacheControl *cacheControl   `json:"cache_control,omitempty"`
	}{Name: t.Name, Description: t.Description, InputSchema: schema}
	if mark {
		tool.CacheControl = &cacheControl{Type: "ephemeral"}
	}
	return json.Marshal(tool)
}
