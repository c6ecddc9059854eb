package agent_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeanthropic"
	"github.com/mcp-subagent/mcp-subagent/llm/anthropic"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
)

// The loop through the native Anthropic adapter and the Messages API's wire
// format: streamed answers, tool_use blocks, tool_result blocks sent back,
// each stop reason, overload retries.
func TestTurnsThroughTheAnthropicAdapter(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("the answer is 42"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A tool that does real work: it reads a file of the test's directory.
	readFile := funcTool{name: "read_file", fn: func(_ context.Context, a json.RawMessage) (string, error) {
		var in struct{ Path string }
		if err := json.Unmarshal(a, &in); err != nil {
			return "", err
		}
		b, err := os.ReadFile(filepath.Join(dir, filepath.Base(in.Path)))
		return string(b), err
	}}
	tests := []struct {
		name        string
		replies     []fakeanthropic.Reply
		schema      string
		cancel      bool // cancel once the fake has the request
		wantReason  agent.StopReason
		wantOutput  string
		wantStruct  string
		wantDiag    string
		wantNotDiag string
		check       func(t *testing.T, reqs []fakeanthropic.Request)
	}{
		{name: "a tool call is run and its result sent back under the tool_use id",
			replies: []fakeanthropic.Reply{
				{Text: "Let me read it.", ToolUses: []fakeanthropic.ToolUse{{Name: "read_file", Input: map[string]any{"path": "notes.txt"}}}},
				{Text: "The notes say 42."},
			},
			wantReason: agent.StopCompleted, wantOutput: "The notes say 42.",
			check: func(t *testing.T, reqs []fakeanthropic.Request) {
				if len(reqs) != 2 {
					t.Fatalf("%d requests, want 2", len(reqs))
				}
				first, second := reqs[0], reqs[1]
				if len(first.System) != 1 || first.System[0].Text != "You are a test." || first.ToolNames()[0] != "read_file" {
					t.Errorf("first request lacks the system prompt or the tool: %+v", first)
				}
				tr := second.LastToolResults()
				if len(tr) != 1 || tr[0].ToolUseID != "toolu_0_0" || tr[0].Name != "read_file" || tr[0].Text != "the answer is 42" {
					t.Errorf("tool results sent back = %+v", tr)
				}
				if got, want := second.CacheMarks(), []string{"system[0]", "messages[2].content[0]"}; !slices.Equal(got, want) {
					t.Errorf("second request's cache marks %q, want %q", got, want)
				}
			}},
		{name: "max_tokens is max-tokens",
			replies:    []fakeanthropic.Reply{{Text: "Partial answ", StopReason: "max_tokens"}},
			wantReason: agent.StopMaxTokens, wantOutput: "Partial answ"},
		{name: "a tool call cut off by max_tokens is answered, not run",
			replies: []fakeanthropic.Reply{{ToolUses: []fakeanthropic.ToolUse{{Name: "read_file", Input: `{"path":"no`}},
				StopReason: "max_tokens"}},
			wantReason: agent.StopMaxTokens},
		{name: "refusal is refusal, with the API's explanation",
			replies: []fakeanthropic.Reply{{StopReason: "refusal",
				Refusal: &fakeanthropic.Refusal{Category: "cyber", Explanation: "This request was declined by policy."}}},
			wantReason: agent.StopRefusal, wantDiag: "This request was declined by policy."},
		{name: "529 overloaded and a mid-stream overloaded_error are retried, then the turn completes",
			replies: []fakeanthropic.Reply{
				{Status: 529, ErrorMessage: "Overloaded"},
				{Text: "half", StreamError: "overloaded_error"},
				{Text: "Done after the storm."},
			},
			wantReason: agent.StopCompleted, wantOutput: "Done after the storm.",
			check: func(t *testing.T, reqs []fakeanthropic.Request) {
				if len(reqs) != 3 {
					t.Errorf("%d attempts at the fake, want 3", len(reqs))
				}
			}},
		{name: "an overloaded server is error with a secret-free diagnostic after the retries",
			replies:    []fakeanthropic.Reply{{Status: 529, ErrorMessage: "Overloaded, key " + apiKey}},
			wantReason: agent.StopError, wantDiag: "529 Overloaded", wantNotDiag: apiKey,
			check: func(t *testing.T, reqs []fakeanthropic.Request) {
				if len(reqs) != 3 {
					t.Errorf("%d attempts, want 3 (two retries)", len(reqs))
				}
			}},
		{name: "a structured result delivered through tool_use",
			schema: pointSchema,
			replies: []fakeanthropic.Reply{
				{ToolUses: []fakeanthropic.ToolUse{{Name: agent.CaptureToolName, Input: map[string]any{"x": 3, "y": 4}}}},
				{Text: "Point delivered."},
			},
			wantReason: agent.StopCompleted, wantOutput: "Point delivered.", wantStruct: `{"x":3,"y":4}`},
		{name: "cancelled while the server hangs is aborted, promptly",
			replies:    []fakeanthropic.Reply{{Hang: true}},
			cancel:     true,
			wantReason: agent.StopAborted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := fakeanthropic.New(fakeanthropic.Script(tt.replies...))
			defer srv.Close()
			client := anthropic.New(transport.Config{BaseURL: srv.URL(), APIKey: apiKey, Model: "claude-fake",
				MaxRetries: 2, RetryBaseDelay: time.Millisecond})
			ag := newAgent(t, agent.Config{Client: client, System: "You are a test.", Tools: []agent.Tool{readFile},
				OutputSchema: json.RawMessage(tt.schema)})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancel {
				go func() {
					wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
					defer wcancel()
					if _, err := srv.Wait(wctx, func(fakeanthropic.Request) bool { return true }); err == nil {
						cancel()
					}
				}()
			}
			began := time.Now()
			res := ag.RunTurn(ctx, "please", "")
			turnWant{tt.wantReason, tt.wantOutput, tt.wantStruct, tt.wantDiag, tt.wantNotDiag}.check(t, res)
			if tt.cancel && time.Since(began) > 5*time.Second {
				t.Errorf("the cancelled turn took %v", time.Since(began))
			}
			checkJournal(t, ag.Journal())
			if tt.check != nil {
				tt.check(t, srv.Requests())
			}
		})
	}
}

// A follow-up turn after a refusal resends the history the API accepts:
// the refusal (the API's words) is left out, and the user messages around
// it merge into one.
func TestAnthropicFollowUpAfterARefusal(t *testing.T) {
	srv := fakeanthropic.New(fakeanthropic.Script(
		fakeanthropic.Reply{StopReason: "refusal"},
		fakeanthropic.Reply{Text: "Sure, that one I can do."},
	))
	defer srv.Close()
	client := anthropic.New(transport.Config{BaseURL: srv.URL(), APIKey: apiKey, Model: "claude-fake", MaxRetries: -1})
	ag := newAgent(t, agent.Config{Client: client, System: "s"})
	if res := ag.RunTurn(context.Background(), "something bad", ""); res.StopReason != agent.StopRefusal {
		t.Fatalf("first turn %q, want refusal", res.StopReason)
	}
	res := ag.RunTurn(context.Background(), "something fine", "")
	if res.StopReason != agent.StopCompleted || res.Output != "Sure, that one I can do." {
		t.Fatalf("follow-up %q %q (%s)", res.StopReason, res.Output, res.Diagnostic)
	}
	r := srv.Requests()[1]
	if len(r.Messages) != 1 || r.Messages[0].Role != "user" || !slices.Equal(r.UserTexts(), []string{"something bad", "something fine"}) {
		t.Errorf("follow-up messages = %+v", r.Messages)
	}
	checkJournal(t, ag.Journal())
}

// turnWant is what a turn through a real adapter must end with.
type turnWant struct {
	reason                            agent.StopReason
	output, structured, diag, notDiag string // output and diag: "" checks nothing
}

func (w turnWant) check(t *testing.T, res agent.TurnResult) {
	t.Helper()
	if res.StopReason != w.reason {
		t.Errorf("StopReason = %q (%s), want %q", res.StopReason, res.Diagnostic, w.reason)
	}
	if w.output != "" && res.Output != w.output {
		t.Errorf("Output = %q, want %q", res.Output, w.output)
	}
	if string(res.Structured) != w.structured {
		t.Errorf("Structured = %s, want %s", res.Structured, w.structured)
	}
	if w.diag != "" && !strings.Contains(res.Diagnostic, w.diag) {
		t.Errorf("Diagnostic = %q, want it to contain %q", res.Diagnostic, w.diag)
	}
	if w.notDiag != "" && strings.Contains(res.Diagnostic, w.notDiag) {
		t.Errorf("Diagnostic %q leaks %q", res.Diagnostic, w.notDiag)
	}
	if res.StopReason == agent.StopCompleted && (res.Usage.InputTokens == 0 || res.Usage.OutputTokens == 0) {
		t.Errorf("Usage = %+v, want the server's counts", res.Usage)
	}
}
