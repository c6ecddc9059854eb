package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeanthropic"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/llm/anthropic"
	"github.com/mcp-subagent/mcp-subagent/llm/openai"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
)

// testKey is the API key the fake expects; no error may show it.
const testKey = "sk-test-secret-123456"

func userRequest(text string) llm.Request {
	return llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: text}}}
}

// deltas collects onDelta calls.
type deltas struct {
	mu  sync.Mutex
	got []string
}

func (d *deltas) add(s string) { d.mu.Lock(); d.got = append(d.got, s); d.mu.Unlock() }

// newClient starts a fake chat completions API with h and returns an
// OpenAI client pointed at it, to compare the two backends.
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

// newAnthropic starts a fake Messages API with h and returns a client
// pointed at it.
func newAnthropic(t *testing.T, h fakeanthropic.Handler, maxRetries int) (*anthropic.Client, *fakeanthropic.Server) {
	t.Helper()
	srv := fakeanthropic.New(h)
	t.Cleanup(srv.Close)
	return anthropic.New(transport.Config{
		BaseURL:        srv.URL(),
		APIKey:         testKey,
		Model:          "claude-test",
		MaxRetries:     maxRetries,
		RetryBaseDelay: time.Millisecond,
	}), srv
}

func TestAnthropicAnswers(t *testing.T) {
	tests := []struct {
		name   string
		reply  fakeanthropic.Reply
		want   llm.Message
		finish llm.FinishReason
		usage  llm.Usage
	}{
		{name: "text streams and ends the turn",
			reply:  fakeanthropic.Reply{Text: "Hello there."},
			want:   llm.Message{Role: llm.RoleAssistant, Content: "Hello there."},
			finish: llm.FinishStop, usage: llm.Usage{InputTokens: 25, OutputTokens: 5}},
		{name: "tool_use blocks become tool calls with the server's ids and the joined input",
			reply: fakeanthropic.Reply{Text: "Let me look.", ToolUses: []fakeanthropic.ToolUse{
				{ID: "toolu_a", Name: "read_file", Input: map[string]any{"path": "README.md"}},
				{Name: "list", Input: nil},
			}},
			want: llm.Message{Role: llm.RoleAssistant, Content: "Let me look.", ToolCalls: []llm.ToolCall{
				{ID: "toolu_a", Name: "read_file", Arguments: `{"path":"README.md"}`},
				{ID: "toolu_0_1", Name: "list", Arguments: `{}`},
			}},
			finish: llm.FinishToolCalls, usage: llm.Usage{InputTokens: 25, OutputTokens: 5}},
		{name: "max_tokens is a truncated answer",
			reply:  fakeanthropic.Reply{Text: "The answer is", StopReason: "max_tokens"},
			want:   llm.Message{Role: llm.RoleAssistant, Content: "The answer is"},
			finish: llm.FinishLength, usage: llm.Usage{InputTokens: 25, OutputTokens: 5}},
		{name: "model_context_window_exceeded is a truncated answer too",
			reply:  fakeanthropic.Reply{Text: "Part", StopReason: "model_context_window_exceeded"},
			want:   llm.Message{Role: llm.RoleAssistant, Content: "Part"},
			finish: llm.FinishLength, usage: llm.Usage{InputTokens: 25, OutputTokens: 5}},
		{name: "a refusal carries the API's explanation",
			reply: fakeanthropic.Reply{StopReason: "refusal",
				Refusal: &fakeanthropic.Refusal{Category: "cyber", Explanation: "This request was declined."}},
			want:   llm.Message{Role: llm.RoleAssistant, Refusal: "This request was declined."},
			finish: llm.FinishRefusal, usage: llm.Usage{InputTokens: 25, OutputTokens: 5}},
		{name: "a refusal without details still says it was one",
			reply:  fakeanthropic.Reply{Text: "I", StopReason: "refusal"},
			want:   llm.Message{Role: llm.RoleAssistant, Content: "I", Refusal: "the API stopped the answer (stop_reason refusal)"},
			finish: llm.FinishRefusal, usage: llm.Usage{InputTokens: 25, OutputTokens: 5}},
		{name: "stop_sequence is a stop",
			reply:  fakeanthropic.Reply{Text: "done", StopReason: "stop_sequence"},
			want:   llm.Message{Role: llm.RoleAssistant, Content: "done"},
			finish: llm.FinishStop, usage: llm.Usage{InputTokens: 25, OutputTokens: 5}},
		{name: "input tokens count cache writes and reads",
			reply: fakeanthropic.Reply{Text: "hi", Usage: &fakeanthropic.Usage{InputTokens: 7, OutputTokens: 42,
				CacheCreationInputTokens: 1000, CacheReadInputTokens: 20000}},
			want:   llm.Message{Role: llm.RoleAssistant, Content: "hi"},
			finish: llm.FinishStop, usage: llm.Usage{InputTokens: 21007, OutputTokens: 42}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, srv := newAnthropic(t, fakeanthropic.Script(tt.reply), 0)
			var d deltas
			resp, err := c.Complete(context.Background(), userRequest("hi"), d.add)
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if !equalMessage(resp.Message, tt.want) {
				t.Errorf("Message = %+v, want %+v", resp.Message, tt.want)
			}
			if resp.FinishReason != tt.finish {
				t.Errorf("FinishReason = %q, want %q", resp.FinishReason, tt.finish)
			}
			if resp.Usage != tt.usage {
				t.Errorf("Usage = %+v, want %+v", resp.Usage, tt.usage)
			}
			if got := strings.Join(d.got, ""); got != tt.want.Content {
				t.Errorf("deltas %q, want %q", got, tt.want.Content)
			}
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
		})
	}
}

func equalMessage(a, b llm.Message) bool {
	return a.Role == b.Role && a.Content == b.Content && a.Refusal == b.Refusal &&
		a.ToolCallID == b.ToolCallID && slices.Equal(a.ToolCalls, b.ToolCalls)
}

// A conversation of the agent loop's shape, as the Messages API wants it.
func TestAnthropicRequestMapping(t *testing.T) {
	c, srv := newAnthropic(t, nil, 0)
	tools := []llm.ToolDef{
		{Name: "read_file", Description: "Reads a file.", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)},
		{Name: "list"},
	}
	req := llm.Request{Tools: tools, Messages: []llm.Message{
		{Role: llm.RoleSystem, Content: "You are a test."},
		{Role: llm.RoleUser, Content: "look around"},
		{Role: llm.RoleAssistant, Content: "Looking.", ToolCalls: []llm.ToolCall{
			{ID: "toolu_1", Name: "read_file", Arguments: `{"path":"a"}`},
			{ID: "toolu_2", Name: "list", Arguments: ``},
		}},
		{Role: llm.RoleTool, ToolCallID: "toolu_1", Content: "contents of a"},
		{Role: llm.RoleTool, ToolCallID: "toolu_2", Content: ""},
		{Role: llm.RoleUser, Content: "and now?"},
	}}
	if _, err := c.Complete(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	r := srv.Requests()[0]
	if r.Path != "/v1/messages" || !r.Stream || r.Model != "claude-test" || r.MaxTokens != anthropic.DefaultMaxTokens {
		t.Errorf("path %s stream %v model %q max_tokens %d", r.Path, r.Stream, r.Model, r.MaxTokens)
	}
	if got := r.Header.Get("X-Api-Key"); got != testKey {
		t.Errorf("x-api-key = %q, want the key", got)
	}
	if got := r.Header.Get("Authorization"); got != "" {
		t.Errorf("Authorization = %q, want none", got)
	}
	if len(r.System) != 1 || r.System[0].Text != "You are a test." {
		t.Errorf("system = %+v", r.System)
	}
	if len(r.Tools) != 2 || r.Tools[0].Description != "Reads a file." ||
		!strings.Contains(string(r.Tools[0].InputSchema), `"required":["path"]`) ||
		string(r.Tools[1].InputSchema) != `{"type":"object","properties":{}}` {
		t.Errorf("tools = %+v", r.Tools)
	}
	if len(r.Messages) != 3 {
		t.Fatalf("%d messages, want 3 (user, assistant, user with both results and the text): %+v", len(r.Messages), r.Messages)
	}
	asst := r.Messages[1]
	if asst.Role != "assistant" || len(asst.Content) != 3 || asst.Content[0].Text != "Looking." ||
		asst.Content[1].Type != "tool_use" || asst.Content[1].ID != "toolu_1" || string(asst.Content[1].Input) != `{"path":"a"}` ||
		asst.Content[2].Name != "list" || string(asst.Content[2].Input) != `{}` {
		t.Errorf("assistant message = %+v", asst)
	}
	results := r.LastToolResults()
	if len(results) != 2 || results[0].ToolUseID != "toolu_1" || results[0].Name != "read_file" ||
		results[0].Text != "contents of a" || results[1].ToolUseID != "toolu_2" || results[1].Text != "" {
		t.Errorf("tool results = %+v", results)
	}
	if last := r.Messages[2].Content; last[2].Type != "text" || last[2].Text != "and now?" {
		t.Errorf("the user's text does not follow the results: %+v", last)
	}
	// The fixed prefix is marked on the system prompt, the history on the
	// newest block.
	if got, want := r.CacheMarks(), []string{"system[0]", "messages[2].content[2]"}; !slices.Equal(got, want) {
		t.Errorf("cache marks %q, want %q", got, want)
	}
	if r.Effort != "" || r.Thinking != nil || strings.Contains(string(r.Raw), "output_config") {
		t.Errorf("no effort asked, but the request has %s", r.Raw)
	}
}

func TestAnthropicCachesTheToolsWithoutASystemPrompt(t *testing.T) {
	c, srv := newAnthropic(t, nil, 0)
	req := userRequest("hi")
	req.Tools = []llm.ToolDef{{Name: "a"}, {Name: "b"}}
	req.MaxTokens = 123
	req.Model = "claude-other"
	if _, err := c.Complete(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	r := srv.Requests()[0]
	if got, want := r.CacheMarks(), []string{"tools[1]", "messages[0].content[0]"}; !slices.Equal(got, want) {
		t.Errorf("cache marks %q, want %q", got, want)
	}
	if r.MaxTokens != 123 || r.Model != "claude-other" {
		t.Errorf("max_tokens %d model %q, want the request's", r.MaxTokens, r.Model)
	}
}

func TestEffortReachesBothBackends(t *testing.T) {
	for _, e := range []llm.Effort{llm.EffortLow, llm.EffortMedium, llm.EffortHigh} {
		t.Run(string(e), func(t *testing.T) {
			ac, asrv := newAnthropic(t, nil, 0)
			req := userRequest("think")
			req.Effort = e
			if _, err := ac.Complete(context.Background(), req, nil); err != nil {
				t.Fatal(err)
			}
			if got := asrv.Requests()[0].Effort; got != string(e) {
				t.Errorf("anthropic output_config.effort = %q, want %q", got, e)
			}
			oc, osrv := newClient(t, fakeopenai.Script(fakeopenai.Reply{Text: "ok"}))
			if _, err := oc.Complete(context.Background(), req, nil); err != nil {
				t.Fatal(err)
			}
			var body struct {
				ReasoningEffort string `json:"reasoning_effort"`
			}
			if err := json.Unmarshal(osrv.Requests()[0].Raw, &body); err != nil || body.ReasoningEffort != string(e) {
				t.Errorf("openai reasoning_effort = %q (%v), want %q", body.ReasoningEffort, err, e)
			}
		})
	}
	t.Run("none asked, none sent to openai", func(t *testing.T) {
		oc, osrv := newClient(t, fakeopenai.Script(fakeopenai.Reply{Text: "ok"}))
		if _, err := oc.Complete(context.Background(), userRequest("hi"), nil); err != nil {
			t.Fatal(err)
		}
		if raw := string(osrv.Requests()[0].Raw); strings.Contains(raw, "reasoning_effort") {
			t.Errorf("request has reasoning_effort: %s", raw)
		}
	})
	t.Run("an unknown level is refused before any request", func(t *testing.T) {
		ac, asrv := newAnthropic(t, nil, 0)
		oc, osrv := newClient(t, nil)
		req := userRequest("hi")
		req.Effort = "max"
		for name, c := range map[string]llm.Client{"anthropic": ac, "openai": oc} {
			_, err := c.Complete(context.Background(), req, nil)
			if err == nil || !strings.Contains(err.Error(), `effort "max"`) {
				t.Errorf("%s: err = %v, want one naming the effort", name, err)
			}
		}
		if len(asrv.Requests())+len(osrv.Requests()) != 0 {
			t.Error("a request was sent")
		}
	})
}

func TestAnthropicRetries(t *testing.T) {
	ok := fakeanthropic.Reply{Text: "finally"}
	tests := []struct {
		name  string
		first fakeanthropic.Reply
	}{
		{"HTTP 529 overloaded", fakeanthropic.Reply{Status: 529, ErrorMessage: "Overloaded"}},
		{"HTTP 429", fakeanthropic.Reply{Status: http.StatusTooManyRequests, RetryAfter: "0"}},
		{"HTTP 500", fakeanthropic.Reply{Status: http.StatusInternalServerError}},
		{"an overloaded_error event mid-stream", fakeanthropic.Reply{Text: "partial", StreamError: "overloaded_error"}},
		{"a stream cut before message_stop", fakeanthropic.Reply{Text: "partial", CutBeforeStop: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, srv := newAnthropic(t, fakeanthropic.Script(tt.first, ok), 2)
			resp, err := c.Complete(context.Background(), userRequest("hi"), nil)
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if resp.Message.Content != "finally" || resp.FinishReason != llm.FinishStop {
				t.Errorf("answer %+v, want the retry's", resp)
			}
			if n := len(srv.Requests()); n != 2 {
				t.Errorf("%d attempts at the fake, want 2", n)
			}
		})
	}
}

func TestAnthropicGivesUp(t *testing.T) {
	// The server echoes the key, as a misconfigured proxy might: the error
	// must not.
	leak := "invalid x-api-key " + testKey
	tests := []struct {
		name      string
		reply     fakeanthropic.Reply
		attempts  int
		status    int
		retryable bool
		want      string
	}{
		{"529 after every retry", fakeanthropic.Reply{Status: 529, ErrorMessage: "Overloaded " + leak},
			3, 529, true, "529 Overloaded: Overloaded invalid x-api-key [REDACTED]"},
		{"an overloaded event every time", fakeanthropic.Reply{Text: "x", StreamError: "overloaded_error", ErrorMessage: leak},
			3, 0, true, "server error event: overloaded_error: invalid x-api-key [REDACTED]"},
		{"a 400 is not retried", fakeanthropic.Reply{Status: http.StatusBadRequest, ErrorMessage: "max_tokens: too large"},
			1, 400, false, "400 Bad Request: max_tokens: too large"},
		{"a 401 is not retried", fakeanthropic.Reply{Status: http.StatusUnauthorized, ErrorMessage: leak},
			1, 401, false, "401 Unauthorized: invalid x-api-key [REDACTED]"},
		{"an invalid_request_error event is not retried", fakeanthropic.Reply{Text: "x", StreamError: "invalid_request_error", ErrorMessage: "bad"},
			1, 0, false, "server error event: invalid_request_error: bad"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, srv := newAnthropic(t, fakeanthropic.Script(tt.reply), 2)
			_, err := c.Complete(context.Background(), userRequest("hi"), nil)
			var le *transport.Error
			if !errors.As(err, &le) {
				t.Fatalf("err = %v (%T), want *transport.Error", err, err)
			}
			if le.Attempts != tt.attempts || le.StatusCode != tt.status || le.Retryable != tt.retryable {
				t.Errorf("Error = %+v, want %d attempts, status %d, retryable %v", le, tt.attempts, tt.status, tt.retryable)
			}
			if n := len(srv.Requests()); n != tt.attempts {
				t.Errorf("%d requests at the fake, want %d", n, tt.attempts)
			}
			if !strings.Contains(le.Message, tt.want) {
				t.Errorf("Message = %q, want it to contain %q", le.Message, tt.want)
			}
			if msg := err.Error(); strings.Contains(msg, testKey) || strings.Contains(msg, srv.URL()) {
				t.Errorf("error leaks the key or the URL: %s", msg)
			}
		})
	}
}

// The SDK's own environment defaults must not leak in: the Config is the
// whole truth.
func TestAnthropicIgnoresTheEnvironment(t *testing.T) {
	t.Setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
	t.Setenv("ANTHROPIC_API_KEY", "sk-from-the-environment")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "token-from-the-environment")
	t.Setenv("ANTHROPIC_CUSTOM_HEADERS", "X-Leak: yes")
	srv := fakeanthropic.New(nil)
	defer srv.Close()
	c := anthropic.New(transport.Config{BaseURL: srv.URL() + "/gateway", Model: "m", MaxRetries: -1})
	if _, err := c.Complete(context.Background(), userRequest("hi"), nil); err != nil {
		t.Fatal(err)
	}
	r := srv.Requests()[0]
	if r.Path != "/gateway/v1/messages" {
		t.Errorf("path %s, want the base URL's", r.Path)
	}
	for _, h := range []string{"X-Api-Key", "Authorization", "X-Leak"} {
		if v := r.Header.Get(h); v != "" {
			t.Errorf("%s: %q came from the environment", h, v)
		}
	}
}

func TestAnthropicRefusesBadRequests(t *testing.T) {
	c, srv := newAnthropic(t, nil, 0)
	for _, tt := range []struct {
		name string
		req  llm.Request
		want string
	}{
		{"no messages", llm.Request{Messages: []llm.Message{{Role: llm.RoleSystem, Content: "s"}}}, "no messages"},
		{"a tool result without its call id", llm.Request{Messages: []llm.Message{{Role: llm.RoleTool, Content: "x"}}}, "messages[0]: tool message without tool_call_id"},
		{"a tool without a name", llm.Request{Messages: userRequest("hi").Messages, Tools: []llm.ToolDef{{}}}, "tools[0]"},
	} {
		_, err := c.Complete(context.Background(), tt.req, nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", tt.name, err, tt.want)
		}
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("%d requests sent for bad input", n)
	}
}

func TestAnthropicCancellationEndsPromptly(t *testing.T) {
	c, srv := newAnthropic(t, fakeanthropic.Script(fakeanthropic.Reply{Hang: true}), 2)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Complete(ctx, userRequest("hi"), nil)
		done <- err
	}()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if _, err := srv.Wait(wctx, func(fakeanthropic.Request) bool { return true }); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Complete did not return after cancellation")
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d requests, want 1 (a cancelled call is not retried)", n)
	}
}
