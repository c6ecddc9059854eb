package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"
)

// DefaultBaseURL is the endpoint used when Config.BaseURL is empty.
const DefaultBaseURL = "https://api.openai.com/v1"

const (
	defaultMaxRetries     = 2
	defaultRetryBaseDelay = 500 * time.Millisecond
	maxBackoff            = 30 * time.Second
	maxRetryAfter         = time.Minute
	maxErrorBody          = 64 << 10
	maxMessageLen         = 500
)

// Config configures NewOpenAI. Zero values mean the documented defaults.
type Config struct {
	// BaseURL is the API root, including the version path, such as
	// "https://api.deepseek.com/v1" or "http://localhost:11434/v1".
	// Empty: DefaultBaseURL.
	BaseURL string
	// APIKey is sent as a bearer token. Empty: no Authorization header
	// (local servers such as Ollama need none).
	APIKey string
	// Model is used when Request.Model is empty.
	Model string
	// MaxRetries is how many times a failed call is retried (HTTP 429, 5xx,
	// transport failures, broken streams). Zero: 2. Negative: no retries.
	MaxRetries int
	// RetryBaseDelay is the wait before the first retry; each further retry
	// waits twice as long (capped at 30s), plus up to a quarter of jitter.
	// Zero: 500ms.
	RetryBaseDelay time.Duration
	// HTTPClient makes the requests. Nil: a client like http.DefaultClient
	// whose transport gives up on response headers after 10 minutes; there is
	// no overall timeout, since streams are long (use the context).
	HTTPClient *http.Client
	// Logger receives one warning per retry. Nil: silent.
	Logger *slog.Logger
}

// OpenAI is a Client for OpenAI-compatible chat completions APIs. It is safe
// for concurrent use.
type OpenAI struct {
	chat           openai.ChatCompletionService
	apiKey         string
	model          string
	maxRetries     int
	baseDelay      time.Duration
	completionsKey bool // send max_completion_tokens rather than max_tokens
	log            *slog.Logger
	tools          toolCache
}

var _ Client = (*OpenAI)(nil)

// NewOpenAI returns a Client for the chat completions API at cfg.BaseURL.
func NewOpenAI(cfg Config) *OpenAI {
	base := cfg.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = defaultHTTPClient()
	}
	opts := []option.RequestOption{
		option.WithBaseURL(base),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0), // we retry ourselves, see Complete
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	c := &OpenAI{
		// The service, not openai.NewClient: NewClient folds in environment
		// variables (OPENAI_BASE_URL, OPENAI_ORG_ID, OPENAI_CUSTOM_HEADERS...),
		// and the caller's Config must be the whole truth.
		chat:       openai.NewChatCompletionService(opts...),
		apiKey:     cfg.APIKey,
		model:      cfg.Model,
		maxRetries: cfg.MaxRetries,
		baseDelay:  cfg.RetryBaseDelay,
		log:        cfg.Logger,
	}
	switch {
	case c.maxRetries == 0:
		c.maxRetries = defaultMaxRetries
	case c.maxRetries < 0:
		c.maxRetries = 0
	}
	if c.baseDelay <= 0 {
		c.baseDelay = defaultRetryBaseDelay
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if u, err := url.Parse(base); err == nil && u.Hostname() == "api.openai.com" {
		c.completionsKey = true
	}
	return c
}

func defaultHTTPClient() *http.Client {
	if t, ok := http.DefaultTransport.(*http.Transport); ok {
		t = t.Clone()
		t.ResponseHeaderTimeout = 10 * time.Minute
		return &http.Client{Transport: t}
	}
	return &http.Client{}
}

// Error is returned by OpenAI.Complete when no answer could be had, except
// for cancellation. Its message is safe to show and log: it carries neither
// the API key nor the URL.
type Error struct {
	// Attempts is the number of requests made.
	Attempts int
	// StatusCode is the HTTP status of the last attempt; 0 when it failed
	// before or after the status (connection error, broken stream).
	StatusCode int
	// Message describes the last failure, such as
	// "500 Internal Server Error: boom".
	Message string
	// Retryable reports whether the last failure was of a kind that is
	// retried (so a caller may try again later).
	Retryable bool

	cause error
}

func (e *Error) Error() string {
	if e.Attempts > 1 {
		return fmt.Sprintf("chat completion failed after %d attempts: %s", e.Attempts, e.Message)
	}
	return "chat completion failed: " + e.Message
}

// Unwrap returns the underlying error of the last attempt, if any. Unlike
// Error's message, it is not sanitised.
func (e *Error) Unwrap() error { return e.cause }

// Complete sends req and returns the model's answer, retrying transient
// failures. See the package doc for what is retried and how the answer is
// assembled.
func (c *OpenAI) Complete(ctx context.Context, req Request, onDelta func(text string)) (Response, error) {
	params, err := c.params(req)
	if err != nil {
		return Response{}, &Error{Attempts: 0, Message: c.redact(err.Error()), cause: err}
	}
	for attempt := 1; ; attempt++ {
		resp, f := c.attempt(ctx, params, onDelta)
		if f == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return Response{}, ctxError(ctx)
		}
		if !f.retryable || attempt > c.maxRetries {
			return Response{}, &Error{
				Attempts:   attempt,
				StatusCode: f.status,
				Message:    c.redact(f.message),
				Retryable:  f.retryable,
				cause:      f.cause,
			}
		}
		delay := c.backoff(attempt, f.retryAfter)
		c.log.WarnContext(ctx, "chat completion failed, retrying",
			"attempt", attempt, "status", f.status, "error", c.redact(f.message), "delay", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return Response{}, ctxError(ctx)
		case <-t.C:
		}
	}
}

// ctxError wraps ctx.Err() and, when different, the cancellation cause, so
// errors.Is works for both.
func ctxError(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("chat completion: %w: %w", err, cause)
	}
	return fmt.Errorf("chat completion: %w", err)
}

// backoff is the wait before retry number attempt (1-based).
func (c *OpenAI) backoff(attempt int, retryAfter time.Duration) time.Duration {
	d := c.baseDelay
	for i := 1; i < attempt && d < maxBackoff; i++ {
		d *= 2
	}
	d = min(d, max(maxBackoff, c.baseDelay))
	d += rand.N(d/4 + 1)
	if retryAfter > d {
		d = min(retryAfter, maxRetryAfter)
	}
	return d
}

// redact removes the API key from a message meant for humans.
func (c *OpenAI) redact(s string) string {
	if len(c.apiKey) >= 4 {
		s = strings.ReplaceAll(s, c.apiKey, "[REDACTED]")
	}
	if len(s) > maxMessageLen {
		s = s[:maxMessageLen] + "…"
	}
	return s
}

// failure is why one attempt produced no answer.
type failure struct {
	status     int
	message    string
	retryable  bool
	retryAfter time.Duration
	cause      error
}

// exchange records what the HTTP layer saw during one attempt. The SDK calls
// the middleware, and the decoder reads the body, on the goroutine that runs
// the attempt, so no locking is needed.
type exchange struct {
	sent        bool
	status      int
	contentType string
	message     string // the server's error message, for statuses >= 400
	retryAfter  time.Duration
	sawDone     bool // the stream carried its [DONE] terminator
}

func (x *exchange) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	x.sent = true
	res, err := next(req)
	if err != nil || res == nil {
		return res, err
	}
	x.status = res.StatusCode
	x.contentType = res.Header.Get("Content-Type")
	if res.StatusCode >= 400 {
		// Read the error ourselves: the SDK only understands
		// {"error":{...}} bodies and drops the status for anything else
		// (a proxy's HTML page, {"error":"text"}).
		body, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
		_ = res.Body.Close()
		res.Body = io.NopCloser(bytes.NewReader(body))
		x.message = errorMessage(body)
		x.retryAfter = retryAfter(res.Header)
		return res, nil
	}
	if res.Body != nil {
		res.Body = &doneWatcher{rc: res.Body, x: x}
	}
	return res, nil
}

// doneWatcher notes whether the SSE body contained a "data: [DONE]" line.
// The SDK's stream ends the same way on [DONE] and on a clean EOF, and only
// the former means the server finished.
type doneWatcher struct {
	rc   io.ReadCloser
	x    *exchange
	tail []byte // the end of what was read so far, in case a marker spans reads
}

// doneMarkers are the terminator lines, with or without the optional space,
// anchored at a line start so text inside a chunk cannot match.
var doneMarkers = [][]byte{[]byte("\ndata: [DONE]"), []byte("\ndata:[DONE]")}

func (d *doneWatcher) Read(p []byte) (int, error) {
	n, err := d.rc.Read(p)
	if n > 0 && !d.x.sawDone {
		if d.tail == nil {
			d.tail = []byte{'\n'} // the body's start is a line start
		}
		buf := append(d.tail, p[:n]...)
		for _, m := range doneMarkers {
			if bytes.Contains(buf, m) {
				d.x.sawDone = true
			}
		}
		keep := min(len(buf), len(doneMarkers[0]))
		d.tail = append([]byte(nil), buf[len(buf)-keep:]...)
	}
	return n, err
}

func (d *doneWatcher) Close() error { return d.rc.Close() }

// attempt makes one streaming request. It returns the answer, or why there
// is none.
func (c *OpenAI) attempt(ctx context.Context, params openai.ChatCompletionNewParams, onDelta func(string)) (Response, *failure) {
	x := &exchange{}
	stream := c.chat.NewStreaming(ctx, params, option.WithMiddleware(x.middleware))
	defer stream.Close()

	var acc accumulator
	for stream.Next() {
		acc.add(stream.Current(), onDelta)
	}
	err := stream.Err()

	switch {
	case ctx.Err() != nil:
		return Response{}, &failure{message: ctx.Err().Error(), cause: ctx.Err()}
	case x.status >= 400:
		msg := fmt.Sprintf("%d %s", x.status, http.StatusText(x.status))
		if x.message != "" {
			msg += ": " + x.message
		}
		return Response{}, &failure{
			status:     x.status,
			message:    msg,
			retryable:  x.status == http.StatusTooManyRequests || x.status >= 500,
			retryAfter: x.retryAfter,
			cause:      err,
		}
	case err != nil && !x.sent:
		// The request could not even be built: retrying will not help.
		return Response{}, &failure{message: "preparing request: " + err.Error(), cause: err}
	case err != nil && x.status == 0:
		return Response{}, &failure{message: "connection error: " + transportMessage(err), retryable: true, cause: err}
	case err != nil:
		return Response{}, &failure{message: "stream broken: " + streamMessage(err), retryable: true, cause: err}
	case !acc.sawChoice:
		msg := "stream ended without an answer"
		if mt, _, _ := mime.ParseMediaType(x.contentType); mt != "" && mt != "text/event-stream" {
			msg += " (the server answered " + mt + ", not an event stream)"
		}
		return Response{}, &failure{message: msg, retryable: true}
	case acc.finish == "" && !x.sawDone:
		return Response{}, &failure{message: "stream ended before the answer was complete", retryable: true}
	}
	return acc.response(), nil
}

// transportMessage describes a transport error without the request URL,
// which may carry credentials.
func transportMessage(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// streamMessage describes a failure while reading the stream, preferring the
// server's message for an error event.
func streamMessage(err error) string {
	var se *ssestream.StreamError
	if errors.As(err, &se) {
		if m := errorMessage(se.Event.Data); m != "" {
			return "server error event: " + m
		}
		return "server error event"
	}
	return transportMessage(err)
}

// errorMessage extracts the human part of an error body: OpenAI's
// {"error":{"message":...}}, the {"error":"..."} or {"message":"..."} of
// other servers, or the start of a plain-text body.
func errorMessage(body []byte) string {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return ""
	}
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &v) == nil {
		if len(v.Error) > 0 && v.Error[0] == '{' {
			var e struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    any    `json:"code"`
			}
			if json.Unmarshal(v.Error, &e) == nil {
				switch {
				case e.Message != "":
					return oneLine(e.Message)
				case e.Type != "":
					return e.Type
				case e.Code != nil:
					return fmt.Sprint(e.Code)
				}
			}
		}
		var s string
		if json.Unmarshal(v.Error, &s) == nil && s != "" {
			return oneLine(s)
		}
		if v.Message != "" {
			return oneLine(v.Message)
		}
		if json.Unmarshal(v.Detail, &s) == nil && s != "" {
			return oneLine(s)
		}
		return ""
	}
	if body[0] == '<' { // an HTML error page says nothing the status does not
		return ""
	}
	return oneLine(string(body))
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// retryAfter reads the wait a server asks for, from retry-after-ms or
// Retry-After (seconds or an HTTP date).
func retryAfter(h http.Header) time.Duration {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// accumulator assembles one assistant message from stream chunks.
type accumulator struct {
	content   strings.Builder
	refusal   strings.Builder
	calls     []ToolCall
	byIndex   map[int64]int // wire tool-call index -> position in calls
	finish    string
	usage     Usage
	sawChoice bool
}

// legacyIndex keys the deprecated function_call delta among tool calls.
const legacyIndex = -1

func (a *accumulator) add(ch openai.ChatCompletionChunk, onDelta func(string)) {
	if ch.JSON.Usage.Valid() {
		a.usage = Usage{InputTokens: ch.Usage.PromptTokens, OutputTokens: ch.Usage.CompletionTokens}
	}
	for _, choice := range ch.Choices {
		if choice.Index != 0 {
			continue
		}
		a.sawChoice = true
		d := choice.Delta
		if d.Content != "" {
			a.content.WriteString(d.Content)
			if onDelta != nil {
				onDelta(d.Content)
			}
		}
		a.refusal.WriteString(d.Refusal)
		for _, tc := range d.ToolCalls {
			a.addCall(tc.Index, tc.ID, tc.Function.Name, tc.Function.Arguments)
		}
		//lint:ignore SA1019 servers that speak the legacy function_call still exist
		if fc := d.FunctionCall; fc.Name != "" || fc.Arguments != "" {
			a.addCall(legacyIndex, "", fc.Name, fc.Arguments)
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
		a.calls = append(a.calls, ToolCall{})
		pos = len(a.calls) - 1
		a.byIndex[index] = pos
	}
	call := &a.calls[pos]
	if id != "" {
		call.ID = id
	}
	call.Name += name
	call.Arguments += args
}

func (a *accumulator) response() Response {
	msg := Message{
		Role:    RoleAssistant,
		Content: a.content.String(),
		Refusal: a.refusal.String(),
	}
	for i, call := range a.calls {
		if call.ID == "" {
			call.ID = "call_" + strconv.Itoa(i)
		}
		msg.ToolCalls = append(msg.ToolCalls, call)
	}
	return Response{Message: msg, FinishReason: finishReason(a.finish, msg), Usage: a.usage}
}

// finishReason maps the wire finish_reason; see the package doc.
func finishReason(wire string, msg Message) FinishReason {
	if msg.Refusal != "" {
		return FinishRefusal
	}
	switch wire {
	case "length":
		return FinishLength
	case "content_filter":
		return FinishContentFilter
	case "tool_calls", "function_call":
		return FinishToolCalls
	}
	if len(msg.ToolCalls) > 0 {
		return FinishToolCalls
	}
	return FinishStop
}

// params maps a Request to the SDK's parameters.
func (c *OpenAI) params(req Request) (openai.ChatCompletionNewParams, error) {
	var p openai.ChatCompletionNewParams
	p.Model = req.Model
	if p.Model == "" {
		p.Model = c.model
	}
	if p.Model == "" {
		return p, errors.New("no model: Request.Model and Config.Model are both empty")
	}
	p.StreamOptions.IncludeUsage = param.NewOpt(true)
	if req.MaxTokens > 0 {
		if c.completionsKey {
			p.MaxCompletionTokens = param.NewOpt(req.MaxTokens)
		} else {
			p.MaxTokens = param.NewOpt(req.MaxTokens)
		}
	}
	if req.Effort != "" {
		// reasoning_effort: OpenAI's reasoning models and the compatible
		// servers that think (DeepSeek's, Ollama's) read it; others ignore it.
		p.ReasoningEffort = shared.ReasoningEffort(req.Effort)
	}
	for i, m := range req.Messages {
		mp, err := messageParam(m)
		if err != nil {
			return p, fmt.Errorf("messages[%d]: %w", i, err)
		}
		p.Messages = append(p.Messages, mp)
	}
	for i, t := range req.Tools {
		tp, err := c.toolParam(t)
		if err != nil {
			return p, fmt.Errorf("tools[%d] (%s): %w", i, t.Name, err)
		}
		p.Tools = append(p.Tools, tp)
	}
	return p, nil
}

func messageParam(m Message) (openai.ChatCompletionMessageParamUnion, error) {
	switch m.Role {
	case RoleSystem:
		return openai.SystemMessage(m.Content), nil
	case RoleUser:
		return openai.UserMessage(m.Content), nil
	case RoleTool:
		if m.ToolCallID == "" {
			return openai.ChatCompletionMessageParamUnion{}, errors.New("tool message without tool_call_id")
		}
		return openai.ToolMessage(m.Content, m.ToolCallID), nil
	case RoleAssistant:
		var a openai.ChatCompletionAssistantMessageParam
		// Content may be omitted only when the message calls tools; some
		// servers reject an assistant message with neither.
		if m.Content != "" || len(m.ToolCalls) == 0 {
			a.Content.OfString = param.NewOpt(m.Content)
		}
		if m.Refusal != "" {
			a.Refusal = param.NewOpt(m.Refusal)
		}
		for _, tc := range m.ToolCalls {
			args := tc.Arguments
			if strings.TrimSpace(args) == "" {
				args = "{}" // servers that parse arguments reject ""
			}
			a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID: tc.ID,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
						Name:      tc.Name,
						Arguments: args,
					},
				},
			})
		}
		return openai.ChatCompletionMessageParamUnion{OfAssistant: &a}, nil
	}
	return openai.ChatCompletionMessageParamUnion{}, fmt.Errorf("unknown role %q", m.Role)
}

// toolParam maps a tool definition to the SDK's parameter. The function
// definition is encoded once per distinct definition and handed to the SDK
// as raw JSON: a child sends the same tools on every model call, and
// decoding its schemas into maps for the SDK to re-encode by reflection
// was a tenth of the CPU of a delegation.
func (c *OpenAI) toolParam(t ToolDef) (openai.ChatCompletionToolUnionParam, error) {
	raw, err := c.tools.encoded(t)
	if err != nil {
		return openai.ChatCompletionToolUnionParam{}, err
	}
	var fn shared.FunctionDefinitionParam
	param.SetJSON(raw, &fn)
	return openai.ChatCompletionFunctionTool(fn), nil
}

// toolCache holds encoded function definitions by their content. It is
// bounded: a deployment has a few dozen distinct tools; past maxCachedTools
// it starts over rather than grow.
type toolCache struct {
	mu sync.Mutex
	m  map[toolKey][]byte
}

type toolKey struct{ name, description, parameters string }

const maxCachedTools = 1024

func (tc *toolCache) encoded(t ToolDef) ([]byte, error) {
	k := toolKey{t.Name, t.Description, string(t.Parameters)}
	tc.mu.Lock()
	raw, ok := tc.m[k]
	tc.mu.Unlock()
	if ok {
		return raw, nil
	}
	raw, err := encodeTool(t)
	if err != nil {
		return nil, err
	}
	tc.mu.Lock()
	if tc.m == nil || len(tc.m) >= maxCachedTools {
		tc.m = map[toolKey][]byte{}
	}
	tc.m[k] = raw
	tc.mu.Unlock()
	return raw, nil
}

// encodeTool encodes a function definition as the chat API takes it:
// name, description if any, and the parameters schema, which must be a
// JSON object (an empty one when none is given).
func encodeTool(t ToolDef) ([]byte, error) {
	if t.Name == "" {
		return nil, errors.New("tool without a name")
	}
	params := json.RawMessage(`{"type":"object","properties":{}}`)
	if trimmed := bytes.TrimSpace(t.Parameters); len(trimmed) > 0 {
		if trimmed[0] != '{' || !json.Valid(trimmed) {
			return nil, errors.New("parameters are not a JSON object")
		}
		params = trimmed
	}
	fn := struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters"`
	}{t.Name, t.Description, params}
	return json.Marshal(fn)
}
