package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

func TestTurnOutcomes(t *testing.T) {
	tests := []struct {
		name        string
		steps       []step
		tools       []agent.Tool
		maxSteps    int
		wantReason  agent.StopReason
		wantOutput  string
		wantDiag    string   // substring
		wantResults []string // tool message contents, in order
		wantCalls   int      // model calls
	}{
		{name: "a text answer completes the turn with it as output",
			steps:      []step{say("The answer is 42.")},
			wantReason: agent.StopCompleted, wantOutput: "The answer is 42.", wantCalls: 1},
		{name: "a tool result goes back to the model and the turn continues",
			steps: []step{call("", tc("c1", "echo", `{"x":1}`)), say("done")},
			tools: []agent.Tool{funcTool{name: "echo", fn: func(_ context.Context, a json.RawMessage) (string, error) {
				return "echo " + string(a), nil
			}}},
			wantReason: agent.StopCompleted, wantOutput: "done", wantResults: []string{`echo {"x":1}`}, wantCalls: 2},
		{name: "a call with empty arguments gets an empty object",
			steps: []step{call("", tc("c1", "echo", "")), say("done")},
			tools: []agent.Tool{funcTool{name: "echo", fn: func(_ context.Context, a json.RawMessage) (string, error) {
				return string(a), nil
			}}},
			wantReason: agent.StopCompleted, wantOutput: "done", wantResults: []string{`{}`}, wantCalls: 2},
		{name: "an unknown tool is an error text to the model and the turn continues",
			steps:      []step{call("", tc("c1", "launch_missiles", `{}`)), say("sorry")},
			wantReason: agent.StopCompleted, wantOutput: "sorry",
			wantResults: []string{`Error: tool "launch_missiles" is not available to you`}, wantCalls: 2},
		{name: "a tool error becomes Error: text to the model",
			steps: []step{call("", tc("c1", "flaky", `{}`)), say("recovered")},
			tools: []agent.Tool{funcTool{name: "flaky", fn: func(context.Context, json.RawMessage) (string, error) {
				return "", errors.New("disk full")
			}}},
			wantReason: agent.StopCompleted, wantOutput: "recovered", wantResults: []string{"Error: disk full"}, wantCalls: 2},
		{name: "a tool that panics is an error text, not a crash",
			steps: []step{call("", tc("c1", "buggy", `{}`)), say("ok")},
			tools: []agent.Tool{funcTool{name: "buggy", fn: func(context.Context, json.RawMessage) (string, error) {
				panic("nil map")
			}}},
			wantReason: agent.StopCompleted, wantOutput: "ok", wantResults: []string{`Error: tool "buggy" failed: nil map`}, wantCalls: 2},
		{name: "length is max-tokens with the partial output",
			steps:      []step{answer(llm.Message{Content: "Here is the beginning of"}, llm.FinishLength)},
			wantReason: agent.StopMaxTokens, wantOutput: "Here is the beginning of", wantDiag: "output token limit", wantCalls: 1},
		{name: "length with cut-off tool calls answers them unrun",
			steps:      []step{answer(llm.Message{Content: "Let me", ToolCalls: []llm.ToolCall{tc("c1", "echo", `{"x":`)}}, llm.FinishLength)},
			tools:      []agent.Tool{constTool("echo", "must not run")},
			wantReason: agent.StopMaxTokens, wantOutput: "Let me",
			wantResults: []string{"not run: the model's answer was cut off"}, wantCalls: 1},
		{name: "a refusal is refusal with the refusal text",
			steps:      []step{answer(llm.Message{Refusal: "I can't help with that."}, llm.FinishRefusal)},
			wantReason: agent.StopRefusal, wantOutput: "I can't help with that.", wantDiag: "I can't help with that.", wantCalls: 1},
		{name: "a refusal with tool calls answers them unrun",
			steps:      []step{answer(llm.Message{Refusal: "No.", ToolCalls: []llm.ToolCall{tc("c1", "echo", `{}`)}}, llm.FinishRefusal)},
			tools:      []agent.Tool{constTool("echo", "must not run")},
			wantReason: agent.StopRefusal, wantOutput: "No.", wantDiag: "No.",
			wantResults: []string{"not run: the model declined"}, wantCalls: 1},
		{name: "a content filter stop is refusal",
			steps:      []step{answer(llm.Message{Content: "Sure, here"}, llm.FinishContentFilter)},
			wantReason: agent.StopRefusal, wantOutput: "Sure, here", wantDiag: "content filter", wantCalls: 1},
		{name: "a failed model call is error with the cause in the diagnostic",
			steps:      []step{fail(errors.New("HTTP 503: overloaded"))},
			wantReason: agent.StopError, wantDiag: "model call failed: HTTP 503: overloaded", wantCalls: 1},
		{name: "a failed model call after a tool round keeps the earlier output",
			steps:      []step{call("Looking.", tc("c1", "echo", `{}`)), fail(errBoom)},
			tools:      []agent.Tool{constTool("echo", "e")},
			wantReason: agent.StopError, wantOutput: "Looking.", wantDiag: "boom", wantResults: []string{"e"}, wantCalls: 2},
		{name: "reaching MaxSteps is error",
			steps:      []step{call("", tc("c1", "echo", `{}`)), call("", tc("c2", "echo", `{}`)), call("", tc("c3", "echo", `{}`))},
			tools:      []agent.Tool{constTool("echo", "again")},
			maxSteps:   3,
			wantReason: agent.StopError, wantDiag: "limit of 3 model calls", wantResults: []string{"again", "again", "again"}, wantCalls: 3},
		{name: "output is the last non-empty assistant message",
			steps:      []step{call("first thoughts", tc("c1", "echo", `{}`)), call("second thoughts", tc("c2", "echo", `{}`)), say("")},
			tools:      []agent.Tool{constTool("echo", "e")},
			wantReason: agent.StopCompleted, wantOutput: "second thoughts", wantResults: []string{"e", "e"}, wantCalls: 3},
		{name: "a whitespace-only answer does not replace the output",
			steps:      []step{call("the real answer", tc("c1", "echo", `{}`)), say("  \n\t ")},
			tools:      []agent.Tool{constTool("echo", "e")},
			wantReason: agent.StopCompleted, wantOutput: "the real answer", wantResults: []string{"e"}, wantCalls: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := script(tt.steps...)
			a := newAgent(t, agent.Config{Client: client, Tools: tt.tools, MaxSteps: tt.maxSteps})
			res := a.RunTurn(context.Background(), "do the task", "")
			if res.StopReason != tt.wantReason {
				t.Errorf("StopReason = %q, want %q (diagnostic %q)", res.StopReason, tt.wantReason, res.Diagnostic)
			}
			if res.Output != tt.wantOutput {
				t.Errorf("Output = %q, want %q", res.Output, tt.wantOutput)
			}
			if tt.wantDiag != "" && !strings.Contains(res.Diagnostic, tt.wantDiag) {
				t.Errorf("Diagnostic = %q, want it to contain %q", res.Diagnostic, tt.wantDiag)
			}
			if tt.wantReason == agent.StopCompleted && res.Diagnostic != "" {
				t.Errorf("a completed turn has diagnostic %q", res.Diagnostic)
			}
			if res.Structured != nil {
				t.Errorf("Structured = %s without an output schema", res.Structured)
			}
			evs := checkJournal(t, a.Journal())
			var got []string
			for _, m := range toolResults(evs) {
				got = append(got, m.Content)
			}
			if strings.Join(got, "\x00") != strings.Join(tt.wantResults, "\x00") {
				t.Errorf("tool results = %q, want %q", got, tt.wantResults)
			}
			if n := len(client.requests()); n != tt.wantCalls {
				t.Errorf("%d model calls, want %d", n, tt.wantCalls)
			}
			// The turn is framed: start, the user's prompt, ..., end with the
			// turn's stop reason and diagnostic.
			first, last := evs[0], evs[len(evs)-1]
			if first.Kind != agent.EventTurnStart || evs[1].Message == nil || evs[1].Message.Content != "do the task" ||
				evs[1].Source != agent.SourceUser || evs[1].Message.Role != seam.RoleUser {
				t.Errorf("turn opens with %+v, %+v", first, evs[1])
			}
			if last.Kind != agent.EventTurnEnd || last.StopReason != res.StopReason || last.Diagnostic != res.Diagnostic {
				t.Errorf("turn ends with %+v, want stop reason %q", last, res.StopReason)
			}
			if want := (seam.Usage{InputTokens: usage.InputTokens * int64(countAssistant(evs)),
				OutputTokens: usage.OutputTokens * int64(countAssistant(evs))}); res.Usage != want {
				t.Errorf("Usage = %+v, want %+v (the sum of the answers)", res.Usage, want)
			}
		})
	}
}

func countAssistant(evs []agent.Event) int {
	n := 0
	for _, e := range evs {
		if e.Message != nil && e.Message.Role == seam.RoleAssistant {
			n++
		}
	}
	return n
}

// Two tools that each wait for the other would deadlock if the calls of one
// answer ran one after the other.
func TestToolCallsOfOneAnswerRunConcurrentlyAndAreRecordedInCallOrder(t *testing.T) {
	arrivedA, arrivedB := make(chan struct{}), make(chan struct{})
	bReturned := make(chan struct{})
	wait := func(ch chan struct{}) error {
		select {
		case <-ch:
			return nil
		case <-time.After(5 * time.Second):
			return errors.New("the other tool never ran: calls are sequential")
		}
	}
	a := funcTool{name: "a", fn: func(context.Context, json.RawMessage) (string, error) {
		close(arrivedA)
		if err := wait(arrivedB); err != nil {
			return "", err
		}
		// Finish after b, so completion order differs from call order.
		if err := wait(bReturned); err != nil {
			return "", err
		}
		return "result of a", nil
	}}
	b := funcTool{name: "b", fn: func(context.Context, json.RawMessage) (string, error) {
		defer close(bReturned)
		close(arrivedB)
		if err := wait(arrivedA); err != nil {
			return "", err
		}
		return "result of b", nil
	}}
	client := script(call("", tc("call_a", "a", `{}`), tc("call_b", "b", `{}`)), say("both done"))
	ag := newAgent(t, agent.Config{Client: client, Tools: []agent.Tool{a, b}})
	res := ag.RunTurn(context.Background(), "run both", "")
	if res.StopReason != agent.StopCompleted {
		t.Fatalf("turn ended %q: %s", res.StopReason, res.Diagnostic)
	}
	results := toolResults(checkJournal(t, ag.Journal()))
	if len(results) != 2 || results[0].ToolCallID != "call_a" || results[0].Content != "result of a" ||
		results[1].ToolCallID != "call_b" || results[1].Content != "result of b" {
		t.Fatalf("tool results = %+v, want a's then b's", results)
	}
	// The model's next request carries them in call order too.
	reqs := client.requests()
	msgs := reqs[1].Messages
	if len(msgs) < 2 || msgs[len(msgs)-2].ToolCallID != "call_a" || msgs[len(msgs)-1].ToolCallID != "call_b" {
		t.Errorf("second request ends with %+v, want the results of call_a then call_b", msgs)
	}
}

func TestCancellation(t *testing.T) {
	t.Run("cancelled during a tool call: aborted, the call answered, the journal balanced", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		started := make(chan struct{})
		slow := funcTool{name: "slow", fn: func(ctx context.Context, _ json.RawMessage) (string, error) {
			close(started)
			<-ctx.Done()
			return "", ctx.Err()
		}}
		client := script(call("working", tc("c1", "slow", `{}`), tc("c2", "slow2", `{}`)), say("never asked"))
		ag := newAgent(t, agent.Config{Client: client, Tools: []agent.Tool{slow}})
		go func() { <-started; cancel() }()
		res := ag.RunTurn(ctx, "work", "")
		if res.StopReason != agent.StopAborted {
			t.Errorf("StopReason = %q, want aborted", res.StopReason)
		}
		if res.Output != "working" {
			t.Errorf("Output = %q, want the partial output", res.Output)
		}
		evs := checkJournal(t, ag.Journal())
		if got := len(toolResults(evs)); got != 2 {
			t.Errorf("%d tool results, want both calls answered", got)
		}
		if last := evs[len(evs)-1]; last.Kind != agent.EventTurnEnd || last.StopReason != agent.StopAborted {
			t.Errorf("last event = %+v, want turn/end aborted", last)
		}
		if n := len(client.requests()); n != 1 {
			t.Errorf("%d model calls, want 1: a cancelled turn must not call the model again", n)
		}
	})
	t.Run("cancelled during the model call: aborted, not error", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		client := script(func(ctx context.Context, _ llm.Request) (llm.Response, error) {
			cancel()
			<-ctx.Done()
			return llm.Response{}, fmt.Errorf("request: %w", ctx.Err())
		})
		ag := newAgent(t, agent.Config{Client: client})
		res := ag.RunTurn(ctx, "work", "")
		if res.StopReason != agent.StopAborted {
			t.Errorf("StopReason = %q (%s), want aborted", res.StopReason, res.Diagnostic)
		}
		checkJournal(t, ag.Journal())
	})
	t.Run("a turn started with a cancelled context is aborted without a model call", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		client := script(say("never"))
		ag := newAgent(t, agent.Config{Client: client})
		if res := ag.RunTurn(ctx, "work", ""); res.StopReason != agent.StopAborted {
			t.Errorf("StopReason = %q, want aborted", res.StopReason)
		}
		if n := len(client.requests()); n != 0 {
			t.Errorf("%d model calls", n)
		}
		if evs := checkJournal(t, ag.Journal()); len(evs) != 3 {
			t.Errorf("journal = %s, want turn/start, prompt, turn/end", dump(evs))
		}
	})
	t.Run("tools of an answer that arrives after cancellation are answered, not run", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var ran atomic.Int32
		client := script(func(context.Context, llm.Request) (llm.Response, error) {
			cancel() // a client that ignores cancellation and answers anyway
			return llm.Response{Message: llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{tc("c1", "t", `{}`)}},
				FinishReason: llm.FinishToolCalls}, nil
		})
		tool := funcTool{name: "t", fn: func(context.Context, json.RawMessage) (string, error) { ran.Add(1); return "ran", nil }}
		ag := newAgent(t, agent.Config{Client: client, Tools: []agent.Tool{tool}})
		if res := ag.RunTurn(ctx, "work", ""); res.StopReason != agent.StopAborted {
			t.Errorf("StopReason = %q, want aborted", res.StopReason)
		}
		if ran.Load() != 0 {
			t.Error("a tool ran after the turn was cancelled")
		}
		results := toolResults(checkJournal(t, ag.Journal()))
		if len(results) != 1 || !strings.HasPrefix(results[0].Content, "Error: not run") {
			t.Errorf("tool results = %+v", results)
		}
	})
}

const pointSchema = `{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"}},"required":["x","y"],"additionalProperties":false}`

func TestOutputSchema(t *testing.T) {
	capture := func(id, args string) llm.ToolCall { return tc(id, agent.CaptureToolName, args) }
	tests := []struct {
		name           string
		steps          []step
		wantReason     agent.StopReason
		wantStructured string // compact JSON; empty: nil
		wantOutput     string
		wantResults    []string // prefixes of the tool results
		wantNudges     int
	}{
		{name: "a valid capture is the structured result",
			steps:      []step{call("", capture("c1", `{"x": 1, "y": 2}`)), say("Delivered.")},
			wantReason: agent.StopCompleted, wantStructured: `{"x":1,"y":2}`, wantOutput: "Delivered.",
			wantResults: []string{"Structured output recorded."}},
		{name: "without any text the output is the captured object",
			steps:      []step{call("", capture("c1", `{"x":1,"y":2}`)), say("")},
			wantReason: agent.StopCompleted, wantStructured: `{"x":1,"y":2}`, wantOutput: `{"x":1,"y":2}`,
			wantResults: []string{"Structured output recorded."}},
		{name: "an invalid capture is answered with the validation error and retried",
			steps:      []step{call("", capture("c1", `{"x":"one","y":2}`)), call("", capture("c2", `{"x":1,"y":2}`)), say("ok")},
			wantReason: agent.StopCompleted, wantStructured: `{"x":1,"y":2}`, wantOutput: "ok",
			wantResults: []string{"Error: the object does not match the output schema", "Structured output recorded."}},
		{name: "a capture that is not JSON is answered and retried",
			steps:      []step{call("", capture("c1", `{"x":1,`)), call("", capture("c2", `{"x":1,"y":2}`)), say("ok")},
			wantReason: agent.StopCompleted, wantStructured: `{"x":1,"y":2}`, wantOutput: "ok",
			wantResults: []string{"Error: the arguments are not valid JSON", "Structured output recorded."}},
		{name: "a model that forgets the tool is nudged once and then succeeds",
			steps:      []step{say("x is 1, y is 2"), call("", capture("c1", `{"x":1,"y":2}`)), say("")},
			wantReason: agent.StopCompleted, wantStructured: `{"x":1,"y":2}`, wantOutput: "x is 1, y is 2",
			wantResults: []string{"Structured output recorded."}, wantNudges: 1},
		{name: "never captured: error after one nudge and no structured result",
			steps:      []step{say("x is 1"), say("really, x is 1")},
			wantReason: agent.StopError, wantOutput: "really, x is 1", wantNudges: 1},
		{name: "only invalid captures: error and no structured result",
			steps:      []step{call("", capture("c1", `{"x":1}`)), say("done"), say("done!")},
			wantReason: agent.StopError, wantOutput: "done!",
			wantResults: []string{"Error: the object does not match the output schema"}, wantNudges: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := script(tt.steps...)
			ag := newAgent(t, agent.Config{Client: client, OutputSchema: json.RawMessage(pointSchema)})
			res := ag.RunTurn(context.Background(), "give me a point", "")
			if res.StopReason != tt.wantReason {
				t.Errorf("StopReason = %q (%s), want %q", res.StopReason, res.Diagnostic, tt.wantReason)
			}
			if tt.wantStructured == "" && res.Structured != nil {
				t.Errorf("Structured = %s, want none", res.Structured)
			}
			if tt.wantStructured != "" && string(res.Structured) != tt.wantStructured {
				t.Errorf("Structured = %s, want %s", res.Structured, tt.wantStructured)
			}
			if res.Output != tt.wantOutput {
				t.Errorf("Output = %q, want %q", res.Output, tt.wantOutput)
			}
			if tt.wantReason == agent.StopError && !strings.Contains(res.Diagnostic, "structured_output") {
				t.Errorf("Diagnostic %q does not say the object was never delivered", res.Diagnostic)
			}
			evs := checkJournal(t, ag.Journal())
			results := toolResults(evs)
			if len(results) != len(tt.wantResults) {
				t.Fatalf("tool results = %+v, want %d", results, len(tt.wantResults))
			}
			for i, want := range tt.wantResults {
				if !strings.HasPrefix(results[i].Content, want) {
					t.Errorf("tool result %d = %q, want it to start with %q", i, results[i].Content, want)
				}
			}
			nudges := 0
			for _, e := range evs[2:] {
				if e.Message != nil && e.Message.Role == seam.RoleUser {
					nudges++
					if !strings.Contains(e.Message.Content, agent.CaptureToolName) {
						t.Errorf("nudge %q does not name the tool", e.Message.Content)
					}
				}
			}
			if nudges != tt.wantNudges {
				t.Errorf("%d nudges, want %d", nudges, tt.wantNudges)
			}
			// The model is shown the capture tool with the schema as its input.
			req := client.requests()[0]
			found := false
			for _, d := range req.Tools {
				if d.Name == agent.CaptureToolName {
					found = string(d.Parameters) == pointSchema
				}
			}
			if !found {
				t.Errorf("the model was not offered %s with the output schema: %+v", agent.CaptureToolName, req.Tools)
			}
		})
	}
}

func TestNew(t *testing.T) {
	echo := constTool("echo", "")
	tests := []struct {
		name    string
		cfg     agent.Config
		wantErr string // substring; empty: success
	}{
		{name: "no client is refused", cfg: agent.Config{}, wantErr: "Client"},
		{name: "duplicate tool names are refused", cfg: agent.Config{Client: script(), Tools: []agent.Tool{echo, constTool("echo", "other")}},
			wantErr: `duplicate tool "echo"`},
		{name: "a tool named like the capture tool clashes with an output schema",
			cfg:     agent.Config{Client: script(), Tools: []agent.Tool{constTool(agent.CaptureToolName, "")}, OutputSchema: json.RawMessage(`{"type":"object"}`)},
			wantErr: `duplicate tool "structured_output"`},
		{name: "an array-rooted output schema is refused", cfg: agent.Config{Client: script(), OutputSchema: json.RawMessage(`{"type":"array"}`)},
			wantErr: `"type": "object"`},
		{name: "a misspelt root type is refused", cfg: agent.Config{Client: script(), OutputSchema: json.RawMessage(`{"type":"objekt"}`)},
			wantErr: `"type": "object"`},
		{name: "a schema without a root type is refused", cfg: agent.Config{Client: script(), OutputSchema: json.RawMessage(`{"properties":{}}`)},
			wantErr: `"type": "object"`},
		{name: "an output schema that is not JSON is refused", cfg: agent.Config{Client: script(), OutputSchema: json.RawMessage(`{"type":`)},
			wantErr: "not a JSON Schema"},
		{name: "a JSON array as output schema is refused", cfg: agent.Config{Client: script(), OutputSchema: json.RawMessage(`["object"]`)},
			wantErr: "not a JSON Schema"},
		{name: "an output schema that does not resolve is refused",
			cfg:     agent.Config{Client: script(), OutputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"#/$defs/missing"}}}`)},
			wantErr: "does not resolve"},
		{name: "an output schema that refers to itself in place is refused",
			cfg:     agent.Config{Client: script(), OutputSchema: json.RawMessage(`{"type":"object","$ref":"#"}`)},
			wantErr: "applies itself to the same value forever"},
		{name: "an output schema with two $defs referring to each other is refused",
			cfg:     agent.Config{Client: script(), OutputSchema: json.RawMessage(`{"type":"object","$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"properties":{"x":{"$ref":"#/$defs/a"}}}`)},
			wantErr: "applies itself to the same value forever"},
		{name: "an output schema with an unknown type is refused naming where",
			cfg:     agent.Config{Client: script(), OutputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"nonsense"}}}`)},
			wantErr: `"type" at /properties/a is "nonsense"`},
		{name: "a recursive output schema that descends into the value is accepted",
			cfg: agent.Config{Client: script(), Tools: []agent.Tool{echo, constTool("other", "")}, OutputSchema: json.RawMessage(`{"type":"object","properties":{"next":{"$ref":"#"}}}`)}},
		{name: "unique tools and an object schema are accepted",
			cfg: agent.Config{Client: script(), Tools: []agent.Tool{echo, constTool("other", "")}, OutputSchema: json.RawMessage(pointSchema)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := agent.New(tt.cfg)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				var names []string
				for _, d := range a.ToolDefs() {
					names = append(names, d.Name)
				}
				if got := strings.Join(names, ","); got != "echo,other,structured_output" {
					t.Errorf("ToolDefs = %s", got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New error = %v, want one containing %q", err, tt.wantErr)
			}
			if a != nil {
				t.Error("New returned an agent with its error")
			}
		})
	}
}

func TestTheModelSeesSystemPromptToolsAndEarlierTurns(t *testing.T) {
	client := script(say("first answer"), say("second answer"))
	ag := newAgent(t, agent.Config{Client: client, Model: "m-1", System: "Be brief.", MaxTokens: 99,
		Tools: []agent.Tool{constTool("echo", "")}})
	if res := ag.RunTurn(context.Background(), "q1", ""); res.StopReason != agent.StopCompleted {
		t.Fatal(res)
	}
	res := ag.RunTurn(context.Background(), "report from child", agent.SourceReport)
	if res.StopReason != agent.StopCompleted || res.Output != "second answer" {
		t.Fatalf("second turn = %+v", res)
	}
	req := client.requests()[1]
	if req.Model != "m-1" || req.MaxTokens != 99 || len(req.Tools) != 1 || req.Tools[0].Name != "echo" {
		t.Errorf("request = model %q, max tokens %d, tools %+v", req.Model, req.MaxTokens, req.Tools)
	}
	var roles, contents []string
	for _, m := range req.Messages {
		roles = append(roles, string(m.Role))
		contents = append(contents, m.Content)
	}
	if got := strings.Join(roles, ","); got != "system,user,assistant,user" {
		t.Errorf("roles = %s", got)
	}
	if got := strings.Join(contents, "|"); got != "Be brief.|q1|first answer|report from child" {
		t.Errorf("contents = %s", got)
	}
	evs := checkJournal(t, ag.Journal())
	turns := map[int]int{}
	for _, e := range evs {
		turns[e.Turn]++
		if e.Kind == agent.EventMessage && e.Message.Content == "report from child" && e.Source != agent.SourceReport {
			t.Errorf("the report was recorded with source %q", e.Source)
		}
	}
	if len(turns) != 2 || turns[1] == 0 || turns[2] == 0 {
		t.Errorf("events per turn = %v, want turns 1 and 2", turns)
	}
	// Usage is per turn.
	if res.Usage != seam.Usage(usage) {
		t.Errorf("second turn usage = %+v, want %+v", res.Usage, usage)
	}
}

// One turn runs at a time: a second RunTurn waits for the first, so the
// journal never interleaves two turns.
func TestConcurrentTurnsDoNotInterleave(t *testing.T) {
	release := make(chan struct{})
	client := &scriptClient{}
	for range 4 {
		client.steps = append(client.steps, func(ctx context.Context, _ llm.Request) (llm.Response, error) {
			<-release
			return llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Content: "ok"}, FinishReason: llm.FinishStop}, nil
		})
	}
	ag := newAgent(t, agent.Config{Client: client})
	done := make(chan agent.TurnResult)
	for i := range 4 {
		go func() { done <- ag.RunTurn(context.Background(), fmt.Sprint("turn ", i), "") }()
	}
	close(release)
	for range 4 {
		if res := <-done; res.StopReason != agent.StopCompleted {
			t.Errorf("a turn ended %q", res.StopReason)
		}
	}
	evs := checkJournal(t, ag.Journal())
	if len(evs) != 16 {
		t.Errorf("%d events, want 16", len(evs))
	}
}

// The llm.Client contract does not promise unique call ids, and servers
// repeat or omit them; the journal must still pair every answer with one
// call, or it can no longer seed a fork or be resumed (NewJournal refuses
// it).
func TestToolCallsSharingOrLackingAnIDStillLeaveAValidJournal(t *testing.T) {
	tests := []struct {
		name  string
		calls []llm.ToolCall
		kept  []int // calls whose id must stay as the model sent it
	}{
		{"two calls with the same id", []llm.ToolCall{tc("call_0", "echo", `{"n":1}`), tc("call_0", "echo", `{"n":2}`)}, []int{0}},
		{"two calls without an id", []llm.ToolCall{tc("", "echo", `{"n":1}`), tc("", "echo", `{"n":2}`)}, nil},
		{"a missing id next to one that looks generated", []llm.ToolCall{tc("", "echo", `{"n":1}`), tc("call_0_0", "echo", `{"n":2}`), tc("call_0_0", "echo", `{"n":3}`)}, []int{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			echo := funcTool{name: "echo", fn: func(_ context.Context, a json.RawMessage) (string, error) { return string(a), nil }}
			client := script(call("", tt.calls...), say("done"))
			ag := newAgent(t, agent.Config{Client: client, Tools: []agent.Tool{echo}})
			if res := ag.RunTurn(context.Background(), "go", ""); res.StopReason != agent.StopCompleted {
				t.Fatalf("turn ended %q: %s", res.StopReason, res.Diagnostic)
			}
			evs := checkJournal(t, ag.Journal())
			if _, err := agent.NewJournal(ag.Journal().CompletedPrefix()); err != nil {
				t.Fatalf("the journal cannot seed a fork: %v", err)
			}
			// Each call got its own answer, in call order, with its own result.
			var asst *seam.Message
			for _, e := range evs {
				if e.Message != nil && len(e.Message.ToolCalls) > 0 {
					asst = e.Message
				}
			}
			results := toolResults(evs)
			if asst == nil || len(results) != len(tt.calls) {
				t.Fatalf("%d results for %d calls", len(results), len(tt.calls))
			}
			for i, r := range results {
				if r.ToolCallID != asst.ToolCalls[i].ID || r.Content != tt.calls[i].Arguments {
					t.Errorf("result %d = %+v, want the answer to call %+v", i, r, asst.ToolCalls[i])
				}
			}
			for _, i := range tt.kept {
				if asst.ToolCalls[i].ID != tt.calls[i].ID {
					t.Errorf("call %d's id %q was changed to %q", i, tt.calls[i].ID, asst.ToolCalls[i].ID)
				}
			}
		})
	}
}

// A capture nested past schemas.MaxOutputDepth is answered like a
// mismatch, so the model can deliver a flatter object; it never reaches
// the recursive validator.
func TestADeeplyNestedCaptureIsRefusedAndRetried(t *testing.T) {
	list := `{"type":"object","properties":{"next":{"$ref":"#"}}}`
	deep := strings.Repeat(`{"next":`, 5000) + `{}` + strings.Repeat(`}`, 5000)
	client := script(call("", tc("c1", agent.CaptureToolName, deep)), call("", tc("c2", agent.CaptureToolName, `{"next":{}}`)), say("ok"))
	ag := newAgent(t, agent.Config{Client: client, OutputSchema: json.RawMessage(list)})
	res := ag.RunTurn(context.Background(), "give me a list", "")
	if res.StopReason != agent.StopCompleted || string(res.Structured) != `{"next":{}}` {
		t.Fatalf("result = %q %s (%s), want completed with the shallow list", res.StopReason, res.Structured, res.Diagnostic)
	}
	var first string
	for _, e := range ag.Journal().Events() {
		if e.Message != nil && e.Message.Role == seam.RoleTool {
			first = e.Message.Content
			break
		}
	}
	if !strings.Contains(first, "does not match the output schema") || !strings.Contains(first, "deeper than") {
		t.Errorf("the deep capture was answered %q, want a depth refusal", first)
	}
}
