package agent_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/llm/openai"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
)

const apiKey = "sk-agent-test-secret-0123456789"

// The loop through the real adapter and the real wire format: streamed
// answers, tool calls split into chunks, ids assigned by the server.
func TestTurnsThroughTheOpenAIAdapter(t *testing.T) {
	tests := []struct {
		name        string
		replies     []fakeopenai.Reply
		schema      string
		cancelAfter time.Duration
		wantReason  agent.StopReason
		wantOutput  string
		wantStruct  string
		wantDiag    string
		wantNotDiag string
		check       func(t *testing.T, reqs []fakeopenai.Request)
	}{
		{name: "a tool call is run and its result sent back under the server's call id",
			replies: []fakeopenai.Reply{
				{Text: "Let me check.", ToolCalls: []fakeopenai.ToolCall{{Name: "echo", Arguments: `{"word":"hello"}`}}},
				{Text: "The tool said hello."},
			},
			wantReason: agent.StopCompleted, wantOutput: "The tool said hello.",
			check: func(t *testing.T, reqs []fakeopenai.Request) {
				if len(reqs) != 2 {
					t.Fatalf("%d requests, want 2", len(reqs))
				}
				msgs := reqs[1].Messages
				if len(msgs) != 4 {
					t.Fatalf("second request has %d messages: %+v", len(msgs), msgs)
				}
				asst, tool := msgs[2], msgs[3]
				if asst.Role != "assistant" || len(asst.ToolCalls) != 1 || asst.ToolCalls[0].ID != "call_0_0" ||
					asst.ToolCalls[0].Arguments != `{"word":"hello"}` {
					t.Errorf("assistant message sent back = %+v", asst)
				}
				if tool.Role != "tool" || tool.ToolCallID != "call_0_0" || tool.Content != `echo {"word":"hello"}` {
					t.Errorf("tool message = %+v", tool)
				}
				if msgs[0].Role != "system" || !reqs[0].HasTool("echo") {
					t.Errorf("first request lacks the system prompt or the tool: %+v", reqs[0])
				}
			}},
		{name: "finish_reason length is max-tokens",
			replies:    []fakeopenai.Reply{{Text: "Partial answ", FinishReason: "length"}},
			wantReason: agent.StopMaxTokens, wantOutput: "Partial answ"},
		{name: "a refusal on the wire is refusal",
			replies:    []fakeopenai.Reply{{Refusal: "I won't do that."}},
			wantReason: agent.StopRefusal, wantDiag: "I won't do that."},
		{name: "content_filter on the wire is refusal",
			replies:    []fakeopenai.Reply{{Text: "", FinishReason: "content_filter"}},
			wantReason: agent.StopRefusal, wantDiag: "content filter"},
		{name: "a server that keeps failing is error with a secret-free diagnostic",
			replies:    []fakeopenai.Reply{{Status: http.StatusInternalServerError, ErrorMessage: "the GPUs are on fire"}},
			wantReason: agent.StopError, wantDiag: "the GPUs are on fire", wantNotDiag: apiKey,
			check: func(t *testing.T, reqs []fakeopenai.Request) {
				if len(reqs) != 2 {
					t.Errorf("%d requests, want 2 (one retry)", len(reqs))
				}
			}},
		{name: "a structured result delivered through the wire",
			schema: pointSchema,
			replies: []fakeopenai.Reply{
				{ToolCalls: []fakeopenai.ToolCall{{Name: agent.CaptureToolName, Arguments: `{"x":3,"y":4}`}}},
				{Text: "Point delivered."},
			},
			wantReason: agent.StopCompleted, wantOutput: "Point delivered.", wantStruct: `{"x":3,"y":4}`},
		{name: "cancelled while the server is slow is aborted",
			replies:     []fakeopenai.Reply{{Text: "too late", Delay: 10 * time.Second}},
			cancelAfter: 50 * time.Millisecond,
			wantReason:  agent.StopAborted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := fakeopenai.New(fakeopenai.Script(tt.replies...))
			defer srv.Close()
			client := openai.New(transport.Config{BaseURL: srv.URL(), APIKey: apiKey, Model: "fake-model",
				MaxRetries: 1, RetryBaseDelay: time.Millisecond})
			echo := funcTool{name: "echo", fn: func(_ context.Context, a json.RawMessage) (string, error) {
				return "echo " + string(a), nil
			}}
			ag := newAgent(t, agent.Config{Client: client, System: "You are a test.", Tools: []agent.Tool{echo},
				OutputSchema: json.RawMessage(tt.schema)})
			ctx := context.Background()
			if tt.cancelAfter > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.cancelAfter)
				defer cancel()
			}
			began := time.Now()
			res := ag.RunTurn(ctx, "please", "")
			turnWant{tt.wantReason, tt.wantOutput, tt.wantStruct, tt.wantDiag, tt.wantNotDiag}.check(t, res)
			if tt.cancelAfter > 0 && time.Since(began) > 5*time.Second {
				t.Errorf("the cancelled turn took %v", time.Since(began))
			}
			checkJournal(t, ag.Journal())
			if tt.check != nil {
				tt.check(t, srv.Requests())
			}
		})
	}
}
