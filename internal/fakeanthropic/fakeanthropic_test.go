package fakeanthropic_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeanthropic"
)

func post(t *testing.T, url, body string) string {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// A request in the shape Claude Code 2.1.332 sends after a ToolSearch
// call: the deferred list in the system prompt, the loaded tool with its
// schema and defer_loading, the tool_reference result.
const afterToolSearch = `{"model":"fake","max_tokens":100,"stream":true,
 "system":[{"type":"text","text":"Intro.\n\nThe following deferred tools are now available via ToolSearch. Their schemas are NOT loaded — calling them directly will fail with InputValidationError. Use ToolSearch with query \"select:<name>[,<name>...]\" to load tool schemas before calling them:\nWebFetch\nmcp__subagent__subagent\n\nMore."}],
 "tools":[{"name":"ToolSearch","input_schema":{"type":"object"}},{"name":"DeferredToolPlaceholder","input_schema":{"type":"object","properties":{}},"defer_loading":true},
  {"name":"mcp__subagent__subagent","input_schema":{"type":"object","properties":{"prompt":{"type":"string"}}},"defer_loading":true}],
 "messages":[{"role":"user","content":"SESSION-1: go"},
  {"role":"assistant","content":[{"type":"tool_use","id":"toolu_a","name":"ToolSearch","input":{"query":"select:mcp__subagent__subagent"}}]},
  {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_a","content":[{"type":"tool_reference","tool_name":"mcp__subagent__subagent"}]}]}]}`

func TestToolSearchFlowAndStreamedToolUse(t *testing.T) {
	s := fakeanthropic.New(func(r fakeanthropic.Request) fakeanthropic.Reply {
		return fakeanthropic.Reply{ToolUses: []fakeanthropic.ToolUse{fakeanthropic.Use(r, "mcp__subagent__subagent", map[string]any{"prompt": "p"})}}
	})
	defer s.Close()
	body := post(t, s.URL()+"/v1/messages?beta=true", afterToolSearch)
	for _, want := range []string{"event: message_start", `"type":"tool_use"`, `"name":"mcp__subagent__subagent"`,
		`"partial_json":"{\"prompt\":\"p\"}"`, `"stop_reason":"tool_use"`, "event: message_stop"} {
		if !strings.Contains(body, want) {
			t.Errorf("stream lacks %s:\n%s", want, body)
		}
	}
	r := s.Requests()[0]
	if got := r.DeferredTools(); len(got) != 2 || got[1] != "mcp__subagent__subagent" {
		t.Errorf("deferred tools = %q", got)
	}
	if !r.Offers("mcp__subagent__subagent") || r.Offers("WebFetch") {
		t.Error("Offers misreads the loaded and the unloaded tools")
	}
	if tr := r.LastToolResults(); len(tr) != 1 || tr[0].Name != "ToolSearch" || tr[0].Text != "tool_reference:mcp__subagent__subagent" {
		t.Errorf("last tool results = %+v", tr)
	}
}

func TestUseLoadsADeferredToolFirst(t *testing.T) {
	var r fakeanthropic.Request
	if u := fakeanthropic.Use(r, "mcp__x__y", nil); u.Name != "ToolSearch" {
		t.Errorf("an unloaded tool: %+v, want the ToolSearch call", u)
	}
}

func TestNonStreamingToolResultsAndWait(t *testing.T) {
	s := fakeanthropic.New(nil)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan fakeanthropic.Request, 1)
	go func() {
		r, err := s.Wait(ctx, func(r fakeanthropic.Request) bool { return len(r.ResultsOf("mcp__s__t")) > 0 })
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	post(t, s.URL()+"/v1/messages", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	body := post(t, s.URL()+"/v1/messages", `{"model":"m","messages":[{"role":"user","content":"hi"},
	 {"role":"assistant","content":[{"type":"tool_use","id":"u1","name":"mcp__s__t","input":{}}]},
	 {"role":"user","content":[{"type":"tool_result","tool_use_id":"u1","content":"{\"a\":1}"}]}]}`)
	var msg struct {
		Type    string
		Content []struct{ Type, Text string }
	}
	if err := json.Unmarshal([]byte(body), &msg); err != nil || msg.Type != "message" || msg.Content[0].Text != "ok" {
		t.Errorf("non-streamed answer %s (%v)", body, err)
	}
	r := <-got
	if tr := r.ResultsOf("mcp__s__t"); tr[0].Text != `{"a":1}` {
		t.Errorf("tool result text %q", tr[0].Text)
	}
	if out := post(t, s.URL()+"/v1/messages/count_tokens", `{}`); !strings.Contains(out, "input_tokens") {
		t.Errorf("count_tokens: %s", out)
	}
}

func TestErrorsInTheAPIShape(t *testing.T) {
	s := fakeanthropic.New(fakeanthropic.Script(
		fakeanthropic.Reply{Status: 529},
		fakeanthropic.Reply{Text: "half", StreamError: "overloaded_error"},
		fakeanthropic.Reply{Text: "x", StopReason: "refusal", Refusal: &fakeanthropic.Refusal{Category: "bio", Explanation: "no"},
			Usage: &fakeanthropic.Usage{InputTokens: 3, OutputTokens: 4, CacheReadInputTokens: 9}},
	))
	defer s.Close()
	const req = `{"model":"m","stream":true,"output_config":{"effort":"low"},"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],
	 "messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]}`
	if body := post(t, s.URL()+"/v1/messages", req); !strings.Contains(body, `"type":"overloaded_error"`) {
		t.Errorf("529 body %s", body)
	}
	body := post(t, s.URL()+"/v1/messages", req)
	if !strings.Contains(body, "event: error\ndata: {\"error\":{\"message\":\"Overloaded\",\"type\":\"overloaded_error\"},\"type\":\"error\"}") ||
		strings.Contains(body, "message_stop") {
		t.Errorf("mid-stream error body %s", body)
	}
	body = post(t, s.URL()+"/v1/messages", req)
	for _, want := range []string{`"stop_reason":"refusal"`, `"explanation":"no"`, `"cache_read_input_tokens":9`, `"output_tokens":4`, "event: message_stop"} {
		if !strings.Contains(body, want) {
			t.Errorf("stream lacks %s:\n%s", want, body)
		}
	}
	r := s.Requests()[0]
	if got := r.CacheMarks(); len(got) != 2 || got[0] != "system[0]" || got[1] != "messages[0].content[0]" || r.Effort != "low" {
		t.Errorf("recorded marks %q effort %q", got, r.Effort)
	}
}
