package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// step answers one model call.
type step func(ctx context.Context, req llm.Request) (llm.Response, error)

// scriptClient is a fake llm.Client that answers the n-th call with
// steps[n]; calls past the script fail.
type scriptClient struct {
	mu    sync.Mutex
	steps []step
	reqs  []llm.Request
}

func script(steps ...step) *scriptClient { return &scriptClient{steps: steps} }

func (c *scriptClient) Complete(ctx context.Context, req llm.Request, _ func(string)) (llm.Response, error) {
	c.mu.Lock()
	n := len(c.reqs)
	req.Messages = append([]llm.Message(nil), req.Messages...)
	c.reqs = append(c.reqs, req)
	c.mu.Unlock()
	if n >= len(c.steps) {
		return llm.Response{}, fmt.Errorf("script exhausted: unexpected model call %d", n+1)
	}
	return c.steps[n](ctx, req)
}

func (c *scriptClient) requests() []llm.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]llm.Request(nil), c.reqs...)
}

var usage = llm.Usage{InputTokens: 10, OutputTokens: 3}

// say answers text and stops.
func say(text string) step {
	return answer(llm.Message{Content: text}, llm.FinishStop)
}

// call answers the given tool calls (with optional text).
func call(text string, calls ...llm.ToolCall) step {
	return answer(llm.Message{Content: text, ToolCalls: calls}, llm.FinishToolCalls)
}

func answer(msg llm.Message, finish llm.FinishReason) step {
	return func(context.Context, llm.Request) (llm.Response, error) {
		msg.Role = llm.RoleAssistant
		msg.ToolCalls = append([]llm.ToolCall(nil), msg.ToolCalls...)
		return llm.Response{Message: msg, FinishReason: finish, Usage: usage}, nil
	}
}

func fail(err error) step {
	return func(context.Context, llm.Request) (llm.Response, error) { return llm.Response{}, err }
}

func tc(id, name, args string) llm.ToolCall { return llm.ToolCall{ID: id, Name: name, Arguments: args} }

// funcTool is a tool whose behaviour the test gives.
type funcTool struct {
	name string
	fn   func(ctx context.Context, args json.RawMessage) (string, error)
}

func (t funcTool) Def() llm.ToolDef {
	return llm.ToolDef{Name: t.name, Description: "test tool " + t.name, Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (t funcTool) Call(ctx context.Context, args json.RawMessage) (string, error) {
	return t.fn(ctx, args)
}

func constTool(name, out string) funcTool {
	return funcTool{name: name, fn: func(context.Context, json.RawMessage) (string, error) { return out, nil }}
}

func newAgent(t *testing.T, cfg agent.Config) *agent.Agent {
	t.Helper()
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatalf("agent.New: %v", err)
	}
	return a
}

// checkJournal fails unless the agent's journal satisfies the invariants
// and its sequence numbers count from 0 without gaps.
func checkJournal(t *testing.T, j *agent.Journal) []agent.Event {
	t.Helper()
	evs := j.Events()
	if err := agent.Validate(evs); err != nil {
		t.Fatalf("journal invalid: %v\n%s", err, dump(evs))
	}
	for i, e := range evs {
		if e.Seq != int64(i) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
		if e.Time.IsZero() {
			t.Errorf("event %d has no time", i)
		}
	}
	return evs
}

// toolResults returns the tool messages of evs in order.
func toolResults(evs []agent.Event) []seam.Message {
	var out []seam.Message
	for _, e := range evs {
		if e.Kind == agent.EventMessage && e.Message != nil && e.Message.Role == seam.RoleTool {
			out = append(out, *e.Message)
		}
	}
	return out
}

func dump(evs []agent.Event) string {
	b, _ := json.MarshalIndent(evs, "", "  ")
	return string(b)
}

var errBoom = errors.New("boom")
