package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/llm/openai"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
)

const testKey = "sk-test-secret-123456"

// newClient starts a fake with h and returns a client pointed at it.
func newClient(t *testing.T, h fakeopenai.Handler) (*openai.Client, *fakeopenai.Server) {
	t.Helper()
	srv := fakeopenai.New(h)
	t.Cleanup(srv.Close)
	return openai.New(transport.Config{
		BaseURL:        srv.URL(),
		APIKey:         testKey,
		Model:          "test-model",
		RetryBaseDelay: time.Millisecond,
	}), srv
}

func userRequest(text string) llm.Request {
	return llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: text}}}
}

// deltas collects onDelta calls.
type deltas struct {
	mu  sync.Mutex
	got []string
}

func (d *deltas) add(s string) { d.mu.Lock(); d.got = append(d.got, s); d.mu.Unlock() }

func TestCompleteAnswers(t *testing.T) {
	tests := []struct {
		name   string
		reply  fakeopenai.Reply
		want   llm.Message
		finish llm.FinishReason
		usage  llm.Usage
	}{
		{
			name:   "text streams and stops",
			reply:  fakeopenai.Reply{Text: "Hello there, how are you today?"},
			want:   llm.Message{Role: llm.RoleAssistant, Content: "Hello there, how are you today?"},
			finish: llm.FinishStop,
			usage:  llm.Usage{InputTokens: 10, OutputTokens: 5},
		},
		{
			name: "a tool call's arguments split across chunks are joined",
			reply: fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{
				{ID: "call_abc", Name: "read_file", Arguments: `{"path":"docs/README.md","limit":200}`},
			}},
			want: llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{
				{ID: "call_abc", Name: "read_file", Arguments: `{"path":"docs/README.md","limit":200}`},
			}},
			finish: llm.FinishToolCalls,
			usage:  llm.Usage{InputTokens: 10, OutputTokens: 5},
		},
		{
			name: "two parallel tool calls keep their order, ids and arguments",
			reply: fakeopenai.Reply{Text: "Let me look.", ToolCalls: []fakeopenai.ToolCall{
				{ID: "call_1", Name: "list", Arguments: `{"dir":"."}`},
				{Name: "search", Arguments: `{"pattern":"TODO"}`}, // id assigned by the fake
			}},
			want: llm.Message{Role: llm.RoleAssistant, Content: "Let me look.", ToolCalls: []llm.ToolCall{
				{ID: "call_1", Name: "list", Arguments: `{"dir":"."}`},
				{ID: "call_0_1", Name: "search", Arguments: `{"pattern":"TODO"}`},
			}},
			finish: llm.FinishToolCalls,
			usage:  llm.Usage{InputTokens: 10, OutputTokens: 5},
		},
		{
			name: "tool calls with a stop finish reason still report tool calls",
			reply: fakeopenai.Reply{FinishReason: "stop", ToolCalls: []fakeopenai.ToolCall{
				{ID: "c", Name: "list", Arguments: `{}`},
			}},
			want: llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{
				{ID: "c", Name: "list", Arguments: `{}`},
			}},
			finish: llm.FinishToolCalls,
			usage:  llm.Usage{InputTokens: 10, OutputTokens: 5},
		},
		{
			name:   "length is a truncated answer",
			reply:  fakeopenai.Reply{Text: "The answer is", FinishReason: "length"},
			want:   llm.Message{Role: llm.RoleAssistant, Content: "The answer is"},
			finish: llm.FinishLength,
			usage:  llm.Usage{InputTokens: 10, OutputTokens: 5},
		},
		{
			name:   "a refusal wins over the wire's stop",
			reply:  fakeopenai.Reply{Refusal: "I can't help with that."},
			want:   llm.Message{Role: llm.RoleAssistant, Refusal: "I can't help with that."},
			finish: llm.FinishRefusal,
			usage:  llm.Usage{InputTokens: 10, OutputTokens: 5},
		},
		{
			name:   "content_filter",
			reply:  fakeopenai.Reply{Text: "Partial", FinishReason: "content_filter"},
			want:   llm.Message{Role: llm.RoleAssistant, Content: "Partial"},
			finish: llm.FinishContentFilter,
			usage:  llm.Usage{InputTokens: 10, OutputTokens: 5},
		},
		{
			name:   "an unknown finish reason without tool calls is a stop",
			reply:  fakeopenai.Reply{Text: "ok", FinishReason: "eos"},
			want:   llm.Message{Role: llm.RoleAssistant, Content: "ok"},
			finish: llm.FinishStop,
			usage:  llm.Usage{InputTokens: 10, OutputTokens: 5},
		},
		{
			name:   "usage comes from the final usage chunk",
			reply:  fakeopenai.Reply{Text: "hi", Usage: &fakeopenai.Usage{PromptTokens: 1234, CompletionTokens: 56}},
			want:   llm.Message{Role: llm.RoleAssistant, Content: "hi"},
			finish: llm.FinishStop,
			usage:  llm.Usage{InputTokens: 1234, OutputTokens: 56},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, srv := newClient(t, fakeopenai.Script(tt.reply))
			var d deltas
			resp, err := c.Complete(context.Background(), userRequest("hi"), d.add)
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			assertJSONEqual(t, "message", resp.Message, tt.want)
			if resp.FinishReason != tt.finish {
				t.Errorf("FinishReason = %q, want %q", resp.FinishReason, tt.finish)
			}
			if resp.Usage != tt.usage {
				t.Errorf("Usage = %+v, want %+v", resp.Usage, tt.usage)
			}
			if got := strings.Join(d.got, ""); got != tt.want.Content {
				t.Errorf("deltas joined = %q, want %q", got, tt.want.Content)
			}
			if len(tt.want.Content) > 10 && len(d.got) < 2 {
				t.Errorf("got %d deltas, want the text in several", len(d.got))
			}
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("server saw %d requests, want 1", n)
			}
		})
	}
}

func TestCompleteSendsTheRequest(t *testing.T) {
	c, srv := newClient(t, fakeopenai.Script(fakeopenai.Reply{Text: "done"}))
	schema := json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"file to read"}},"required":["path"],"additionalProperties":false}`)
	req := llm.Request{
		MaxTokens: 256,
		Messages: []llm.Message{
			{Role: llm.RoleSystem, Content: "You are terse."},
			{Role: llm.RoleUser, Content: "Read a.txt"},
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "call_9", Name: "read_file", Arguments: `{"path":"a.txt"}`}}},
			{Role: llm.RoleTool, ToolCallID: "call_9", Content: "contents of a"},
			{Role: llm.RoleAssistant, Content: "It says: contents of a"},
			{Role: llm.RoleUser, Content: "Thanks"},
		},
		Tools: []llm.ToolDef{{Name: "read_file", Description: "Read a file.", Parameters: schema}},
	}
	if _, err := c.Complete(context.Background(), req, nil); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("server saw %d requests, want 1", len(reqs))
	}
	got := reqs[0]
	if got.Model != "test-model" {
		t.Errorf("model = %q, want the Config.Model default", got.Model)
	}
	if !got.Stream {
		t.Error("stream = false, want true")
	}
	if auth := got.Header.Get("Authorization"); auth != "Bearer "+testKey {
		t.Errorf("Authorization = %q", auth)
	}
	wantMsgs := []fakeopenai.Message{
		{Role: "system", Content: "You are terse."},
		{Role: "user", Content: "Read a.txt"},
		{Role: "assistant", ToolCalls: []fakeopenai.ToolCall{{ID: "call_9", Name: "read_file", Arguments: `{"path":"a.txt"}`}}},
		{Role: "tool", ToolCallID: "call_9", Content: "contents of a"},
		{Role: "assistant", Content: "It says: contents of a"},
		{Role: "user", Content: "Thanks"},
	}
	assertJSONEqual(t, "messages", got.Messages, wantMsgs)
	if len(got.Tools) != 1 || got.Tools[0].Name != "read_file" || got.Tools[0].Description != "Read a file." {
		t.Fatalf("tools = %+v", got.Tools)
	}
	assertJSONEqual(t, "tool parameters", got.Tools[0].Parameters, schema)

	var raw struct {
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		MaxTokens int `json:"max_tokens"`
		Tools     []struct {
			Type string `json:"type"`
		} `json:"tools"`
		Messages []map[string]any `json:"messages"`
	}
	if err := json.Unmarshal(got.Raw, &raw); err != nil {
		t.Fatal(err)
	}
	if !raw.StreamOptions.IncludeUsage {
		t.Error("stream_options.include_usage not set")
	}
	if raw.MaxTokens != 256 {
		t.Errorf("max_tokens = %d, want 256", raw.MaxTokens)
	}
	if raw.Tools[0].Type != "function" {
		t.Errorf("tool type = %q", raw.Tools[0].Type)
	}
	if _, ok := raw.Messages[2]["content"]; ok {
		t.Errorf("assistant message with only tool calls sent content: %v", raw.Messages[2])
	}
	if got.Messages[5].Content != "Thanks" || got.LastUserText() != "Thanks" {
		t.Errorf("LastUserText = %q", got.LastUserText())
	}
}

func TestCompleteRequestModelOverridesConfig(t *testing.T) {
	c, srv := newClient(t, nil)
	req := userRequest("hi")
	req.Model = "other-model"
	if _, err := c.Complete(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	if m := srv.Requests()[0].Model; m != "other-model" {
		t.Errorf("model = %q", m)
	}
}

// Effort goes out as reasoning_effort; without one the field is absent,
// so servers that do not know it are not sent it.
func TestCompleteSendsEffortAsReasoningEffort(t *testing.T) {
	c, srv := newClient(t, nil)
	for _, e := range []llm.Effort{llm.EffortHigh, ""} {
		req := userRequest("hi")
		req.Effort = e
		if _, err := c.Complete(context.Background(), req, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []any{"high", nil} {
		var body map[string]any
		if err := json.Unmarshal(srv.Requests()[i].Raw, &body); err != nil {
			t.Fatal(err)
		}
		if got := body["reasoning_effort"]; got != want {
			t.Errorf("request %d: reasoning_effort = %v, want %v", i, got, want)
		}
	}
}

func TestCompleteRejectsBadRequestsBeforeSending(t *testing.T) {
	srv := fakeopenai.New(nil)
	defer srv.Close()
	tests := []struct {
		name string
		cfg  transport.Config
		req  llm.Request
		want string
	}{
		{"no model anywhere", transport.Config{BaseURL: srv.URL()}, userRequest("hi"), "no model"},
		{"unknown role", transport.Config{BaseURL: srv.URL(), Model: "m"}, llm.Request{Messages: []llm.Message{{Role: "wizard"}}}, `unknown role "wizard"`},
		{"tool message without id", transport.Config{BaseURL: srv.URL(), Model: "m"}, llm.Request{Messages: []llm.Message{{Role: llm.RoleTool, Content: "x"}}}, "tool_call_id"},
		{"parameters not an object", transport.Config{BaseURL: srv.URL(), Model: "m"}, llm.Request{
			Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"}},
			Tools:    []llm.ToolDef{{Name: "t", Parameters: json.RawMessage(`[1]`)}},
		}, "not a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := openai.New(tt.cfg).Complete(context.Background(), tt.req, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("server saw %d requests, want none", n)
	}
}

func TestCompleteRetries(t *testing.T) {
	tests := []struct {
		name     string
		replies  []fakeopenai.Reply
		wantText string // success expected when non-empty
		wantErr  []string
		requests int
		status   int
	}{
		{
			name:     "a 500 then success",
			replies:  []fakeopenai.Reply{{Status: 500, ErrorMessage: "boom"}, {Text: "recovered"}},
			wantText: "recovered",
			requests: 2,
		},
		{
			name:     "a 429 is retried",
			replies:  []fakeopenai.Reply{{Status: 429, ErrorMessage: "slow down"}, {Status: 429}, {Text: "finally"}},
			wantText: "finally",
			requests: 3,
		},
		{
			name:     "a broken stream is retried",
			replies:  []fakeopenai.Reply{{Text: "half an ans", Truncate: true}, {Text: "the whole answer"}},
			wantText: "the whole answer",
			requests: 2,
		},
		{
			name:     "a 500 forever fails after the retries, naming status and message",
			replies:  []fakeopenai.Reply{{Status: 500, ErrorMessage: "boom"}},
			wantErr:  []string{"chat completion failed after 3 attempts: 500 Internal Server Error: boom"},
			requests: 3,
			status:   500,
		},
		{
			name:     "a 400 is not retried",
			replies:  []fakeopenai.Reply{{Status: 400, ErrorMessage: "messages: bad shape"}},
			wantErr:  []string{"chat completion failed: 400 Bad Request: messages: bad shape"},
			requests: 1,
			status:   400,
		},
		{
			name:     "a 401 is not retried",
			replies:  []fakeopenai.Reply{{Status: 401, ErrorMessage: "Incorrect API key provided: " + testKey}},
			wantErr:  []string{"401 Unauthorized: Incorrect API key provided: [REDACTED]"},
			requests: 1,
			status:   401,
		},
		{
			name:     "a stream broken every time fails",
			replies:  []fakeopenai.Reply{{Text: "half", Truncate: true}},
			wantErr:  []string{"after 3 attempts", "stream ended before the answer was complete"},
			requests: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, srv := newClient(t, fakeopenai.Script(tt.replies...))
			resp, err := c.Complete(context.Background(), userRequest("hi"), nil)
			if n := len(srv.Requests()); n != tt.requests {
				t.Errorf("server saw %d requests, want %d", n, tt.requests)
			}
			if tt.wantText != "" {
				if err != nil {
					t.Fatalf("Complete: %v", err)
				}
				if resp.Message.Content != tt.wantText {
					t.Errorf("content = %q, want %q", resp.Message.Content, tt.wantText)
				}
				return
			}
			if err == nil {
				t.Fatalf("Complete succeeded: %+v", resp)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			assertSecretFree(t, err, srv.URL())
			var e *transport.Error
			if !errors.As(err, &e) {
				t.Fatalf("error is %T, want *transport.Error", err)
			}
			if e.StatusCode != tt.status || e.Attempts != tt.requests {
				t.Errorf("Error = %+v, want status %d after %d attempts", e, tt.status, tt.requests)
			}
		})
	}
}

func TestCompleteMaxRetriesNegativeMeansOneAttempt(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Status: 503}))
	defer srv.Close()
	c := openai.New(transport.Config{BaseURL: srv.URL(), Model: "m", MaxRetries: -1})
	_, err := c.Complete(context.Background(), userRequest("hi"), nil)
	if err == nil || !strings.Contains(err.Error(), "chat completion failed: 503 Service Unavailable") {
		t.Fatalf("err = %v", err)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("server saw %d requests, want 1", n)
	}
}

func TestCompleteConnectionErrorIsRetriedAndSecretFree(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	base := srv.URL + "/v1?token=" + testKey
	srv.Close() // nothing listens there any more
	c := openai.New(transport.Config{BaseURL: base, APIKey: testKey, Model: "m", RetryBaseDelay: time.Millisecond, MaxRetries: 1})
	_, err := c.Complete(context.Background(), userRequest("hi"), nil)
	if err == nil || !strings.Contains(err.Error(), "after 2 attempts: connection error") {
		t.Fatalf("err = %v", err)
	}
	assertSecretFree(t, err, srv.URL)
}

func TestCompleteCancellation(t *testing.T) {
	t.Run("mid-stream returns promptly", func(t *testing.T) {
		c, _ := newClient(t, fakeopenai.Script(fakeopenai.Reply{
			Text:       strings.Repeat("word ", 40),
			ChunkDelay: 500 * time.Millisecond, // the rest would take seconds
		}))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		first := make(chan struct{})
		var once sync.Once
		errc := make(chan error, 1)
		go func() {
			_, err := c.Complete(ctx, userRequest("hi"), func(string) { once.Do(func() { close(first) }) })
			errc <- err
		}()
		<-first
		start := time.Now()
		cancel()
		select {
		case err := <-errc:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("err = %v, want context.Canceled", err)
			}
			if d := time.Since(start); d > 1500*time.Millisecond { // uncancelled, the rest takes 3s
				t.Errorf("returned %v after cancel", d)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Complete did not return after cancel")
		}
	})
	t.Run("while waiting for headers", func(t *testing.T) {
		c, _ := newClient(t, fakeopenai.Script(fakeopenai.Reply{Text: "late", Delay: 10 * time.Second}))
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := c.Complete(ctx, userRequest("hi"), nil)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("took %v", d)
		}
	})
	t.Run("during the retry backoff", func(t *testing.T) {
		srv := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Status: 500}))
		defer srv.Close()
		c := openai.New(transport.Config{BaseURL: srv.URL(), Model: "m", RetryBaseDelay: 10 * time.Second})
		cause := errors.New("interrupted by parent")
		ctx, cancel := context.WithCancelCause(context.Background())
		time.AfterFunc(100*time.Millisecond, func() { cancel(cause) })
		start := time.Now()
		_, err := c.Complete(ctx, userRequest("hi"), nil)
		if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) {
			t.Errorf("err = %v, want context.Canceled and the cause", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("took %v", d)
		}
		if n := len(srv.Requests()); n != 1 {
			t.Errorf("server saw %d requests, want 1", n)
		}
	})
}

// rawServer answers every request with the given responses in turn (the
// last repeating), for wire shapes the fake does not produce.
func rawServer(t *testing.T, responses ...rawResponse) (*httptest.Server, *int) {
	t.Helper()
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		resp := responses[min(n, len(responses)-1)]
		n++
		mu.Unlock()
		for k, v := range resp.header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", resp.contentType)
		w.WriteHeader(resp.status)
		_, _ = io.WriteString(w, resp.body)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

type rawResponse struct {
	status      int
	contentType string
	header      map[string]string
	body        string
}

func sse(frames ...string) string {
	var b strings.Builder
	for _, f := range frames {
		fmt.Fprintf(&b, "data: %s\n\n", f)
	}
	return b.String()
}

func TestCompleteWireShapes(t *testing.T) {
	const es = "text/event-stream"
	tests := []struct {
		name      string
		responses []rawResponse
		wantText  string
		wantCalls []llm.ToolCall
		finish    llm.FinishReason
		wantErr   string
		requests  int
	}{
		{
			name: "an HTML 502 from a proxy keeps its status",
			responses: []rawResponse{{status: 502, contentType: "text/html",
				body: "<html><body><h1>502 Bad Gateway</h1></body></html>"}},
			wantErr:  "chat completion failed after 3 attempts: 502 Bad Gateway",
			requests: 3,
		},
		{
			name:      "an error given as a plain string",
			responses: []rawResponse{{status: 404, contentType: "application/json", body: `{"error":"model 'llama9' not found"}`}},
			wantErr:   "chat completion failed: 404 Not Found: model 'llama9' not found",
			requests:  1,
		},
		{
			name: "an error event mid-stream is retried and its message kept",
			responses: []rawResponse{{status: 200, contentType: es, body: sse(
				`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}`,
				`{"error":{"message":"upstream overloaded","type":"server_error"}}`,
			)}},
			wantErr:  "after 3 attempts: stream broken: server error event: upstream overloaded",
			requests: 3,
		},
		{
			name: "a [DONE] without finish_reason is complete; tool calls decide",
			responses: []rawResponse{{status: 200, contentType: es, body: sse(
				`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"ls","arguments":"{}"}}]},"finish_reason":null}]}`,
				`[DONE]`,
			)}},
			wantCalls: []llm.ToolCall{{ID: "a", Name: "ls", Arguments: "{}"}},
			finish:    llm.FinishToolCalls,
			requests:  1,
		},
		{
			name: "calls all numbered 0 but with distinct ids stay distinct; a missing id is made up",
			responses: []rawResponse{{status: 200, contentType: es, body: sse(
				`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"ls","arguments":"{\"d\":"}}]},"finish_reason":null}]}`,
				`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]},"finish_reason":null}]}`,
				`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"b","type":"function","function":{"name":"cat","arguments":"{}"}}]},"finish_reason":null}]}`,
				`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"type":"function","function":{"name":"pwd","arguments":""}}]},"finish_reason":"tool_calls"}]}`,
				`[DONE]`,
			)}},
			wantCalls: []llm.ToolCall{{ID: "a", Name: "ls", Arguments: `{"d":1}`}, {ID: "b", Name: "cat", Arguments: "{}"}, {ID: "call_2", Name: "pwd"}},
			finish:    llm.FinishToolCalls,
			requests:  1,
		},
		{
			name:      "a JSON answer to a streaming request is not taken for an empty answer",
			responses: []rawResponse{{status: 200, contentType: "application/json", body: `{"id":"x","object":"chat.completion","choices":[]}`}},
			wantErr:   "stream ended without an answer (the server answered application/json, not an event stream)",
			requests:  3,
		},
		{
			name: "Retry-After is honoured without hanging the test",
			responses: []rawResponse{
				{status: 429, contentType: "application/json", header: map[string]string{"Retry-After-Ms": "20"}, body: `{"error":{"message":"rate"}}`},
				{status: 200, contentType: es, body: sse(`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}`, `[DONE]`)},
			},
			wantText: "ok",
			finish:   llm.FinishStop,
			requests: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, n := rawServer(t, tt.responses...)
			c := openai.New(transport.Config{BaseURL: srv.URL + "/v1", Model: "m", RetryBaseDelay: time.Millisecond})
			resp, err := c.Complete(context.Background(), userRequest("hi"), nil)
			if *n != tt.requests {
				t.Errorf("server saw %d requests, want %d", *n, tt.requests)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if resp.Message.Content != tt.wantText || resp.FinishReason != tt.finish {
				t.Errorf("got %q/%q, want %q/%q", resp.Message.Content, resp.FinishReason, tt.wantText, tt.finish)
			}
			assertJSONEqual(t, "tool calls", resp.Message.ToolCalls, tt.wantCalls)
		})
	}
}

func TestCompleteIsSafeForConcurrentUse(t *testing.T) {
	c, srv := newClient(t, func(n int, req fakeopenai.Request) fakeopenai.Reply {
		return fakeopenai.Reply{Text: "echo " + req.LastUserText()}
	})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			msg := fmt.Sprintf("m%d", i)
			resp, err := c.Complete(context.Background(), userRequest(msg), nil)
			if err != nil || resp.Message.Content != "echo "+msg {
				t.Errorf("%s: %q, %v", msg, resp.Message.Content, err)
			}
		})
	}
	wg.Wait()
	if n := len(srv.Requests()); n != 8 {
		t.Errorf("server saw %d requests", n)
	}
}

// FuzzStreamDecode feeds arbitrary response bodies to the stream decoder:
// it must never panic, and on success the deltas must add up to the content.
func FuzzStreamDecode(f *testing.F) {
	f.Add(sse(`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}`, `[DONE]`))
	f.Add(sse(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":3,"id":"q","function":{"name":"n","arguments":"{"}}]}}]}`, `{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}`, `[DONE]`))
	f.Add("data: {\"choices\":[{\"index\":0,\"delta\":{\"refusal\":\"no\"},\"finish_reason\":\"stop\"}]}\n\ndata:[DONE]\n\n")
	f.Add("event: error\ndata: {\"error\":\"x\"}\n\n")
	f.Add(": comment\n\ndata: not json\n\n")
	f.Fuzz(func(t *testing.T, body string) {
		hc := &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
			return &http.Response{
				StatusCode: 200,
				Header:     http.Header{"Content-Type": {"text/event-stream"}},
				Body:       io.NopCloser(strings.NewReader(body)),
			}, nil
		})}
		c := openai.New(transport.Config{BaseURL: "http://fuzz.invalid/v1", Model: "m", MaxRetries: -1, HTTPClient: hc})
		var d deltas
		resp, err := c.Complete(context.Background(), userRequest("hi"), d.add)
		if err != nil {
			var e *transport.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T is not *transport.Error: %v", err, err)
			}
			return
		}
		if got := strings.Join(d.got, ""); got != resp.Message.Content {
			t.Fatalf("deltas %q != content %q", got, resp.Message.Content)
		}
		if resp.Message.Role != llm.RoleAssistant || resp.FinishReason == "" {
			t.Fatalf("bad response %+v", resp)
		}
		for _, tc := range resp.Message.ToolCalls {
			if tc.ID == "" {
				t.Fatalf("tool call without id: %+v", tc)
			}
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func assertSecretFree(t *testing.T, err error, url string) {
	t.Helper()
	msg := err.Error()
	if strings.Contains(msg, testKey) {
		t.Errorf("error leaks the API key: %q", msg)
	}
	if strings.Contains(msg, url) {
		t.Errorf("error leaks the URL: %q", msg)
	}
}

func assertJSONEqual(t *testing.T, what string, got, want any) {
	t.Helper()
	g, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var gv, wv any
	_ = json.Unmarshal(g, &gv)
	_ = json.Unmarshal(w, &wv)
	gn, _ := json.Marshal(gv)
	wn, _ := json.Marshal(wv)
	if !bytes.Equal(gn, wn) {
		t.Errorf("%s:\n got  %s\n want %s", what, gn, wn)
	}
}
