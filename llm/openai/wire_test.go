package openai

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/llm/anthropic"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
)

// sdkBody is the body the SDK would send for req: its parameter types,
// mapped as the client did before it encoded bodies itself, and its
// encoder. It is the reference the client's own encoding must match.
func sdkBody(t *testing.T, c *Client, req llm.Request) []byte {
	t.Helper()
	var p openai.ChatCompletionNewParams
	p.Model = req.Model
	if p.Model == "" {
		p.Model = c.model
	}
	p.StreamOptions.IncludeUsage = param.NewOpt(true)
	if req.MaxTokens > 0 {
		if c.completionsKey {
			p.MaxCompletionTokens = param.NewOpt(req.MaxTokens)
		} else {
			p.MaxTokens = param.NewOpt(req.MaxTokens)
		}
	}
	p.ReasoningEffort = shared.ReasoningEffort(req.Effort)
	for _, m := range req.Messages {
		switch m.Role {
		case llm.RoleSystem:
			p.Messages = append(p.Messages, openai.SystemMessage(m.Content))
		case llm.RoleUser:
			p.Messages = append(p.Messages, openai.UserMessage(m.Content))
		case llm.RoleTool:
			p.Messages = append(p.Messages, openai.ToolMessage(m.Content, m.ToolCallID))
		case llm.RoleAssistant:
			var a openai.ChatCompletionAssistantMessageParam
			if m.Content != "" || len(m.ToolCalls) == 0 {
				a.Content.OfString = param.NewOpt(m.Content)
			}
			if m.Refusal != "" {
				a.Refusal = param.NewOpt(m.Refusal)
			}
			for _, tc := range m.ToolCalls {
				args := tc.Arguments
				if strings.TrimSpace(args) == "" {
					args = "{}"
				}
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{ID: tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: args}}})
			}
			p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		}
	}
	for _, td := range req.Tools {
		params, err := transport.ToolSchema(td)
		if err != nil {
			t.Fatal(err)
		}
		var schema map[string]any
		if err := json.Unmarshal(params, &schema); err != nil {
			t.Fatal(err)
		}
		fn := shared.FunctionDefinitionParam{Name: td.Name, Parameters: schema}
		if td.Description != "" {
			fn.Description = param.NewOpt(td.Description)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fn))
	}
	raw, err := p.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	// The SDK's NewStreaming sets stream on the encoded body.
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatal(err)
	}
	body["stream"] = true
	out, _ := json.Marshal(body)
	return out
}

// The body the client encodes is, as JSON, the one the SDK would have sent
// for the same request: every role, tool calls with and without content
// and arguments, refusals, text that JSON must escape, max tokens under
// both keys, effort, and tools with and without descriptions and schemas.
func TestBodyIsTheSDKs(t *testing.T) {
	tricky := "quotes \" backslash \\ newline \n tab \t html <b>&amp;</b> unicode é 😀 \u2028 nul-free"
	reqs := map[string]llm.Request{
		"one user message": {Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}},
		"a whole conversation": {MaxTokens: 256, Effort: "high", Messages: []llm.Message{
			{Role: llm.RoleSystem, Content: "You are terse."},
			{Role: llm.RoleUser, Content: tricky},
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c1", Name: "read", Arguments: `{"path":"a"}`}, {ID: "c2", Name: "ls", Arguments: "  "}}},
			{Role: llm.RoleTool, ToolCallID: "c1", Content: tricky},
			{Role: llm.RoleTool, ToolCallID: "c2", Content: ""},
			{Role: llm.RoleAssistant, Content: "both", ToolCalls: []llm.ToolCall{{ID: "c3", Name: "cat", Arguments: "{}"}}},
			{Role: llm.RoleTool, ToolCallID: "c3", Content: "x"},
			{Role: llm.RoleAssistant, Content: "", Refusal: "I won't."},
			{Role: llm.RoleAssistant, Content: ""},
			{Role: llm.RoleUser, Content: ""},
		}, Tools: append(benchTools(), llm.ToolDef{Name: "bare"}, llm.ToolDef{Name: "spaced", Description: tricky, Parameters: json.RawMessage(" {\"type\": \"object\"} ")})},
		"model per request": {Model: "other", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}},
	}
	for _, openaiHost := range []bool{false, true} {
		c := New(transport.Config{Model: "m", APIKey: "k"})
		c.completionsKey = openaiHost
		for name, req := range reqs {
			got, err := c.body(req)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var g, w any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatalf("%s: body is not JSON: %v\n%s", name, err, got)
			}
			if err := json.Unmarshal(sdkBody(t, c, req), &w); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(g, w) {
				gj, _ := json.MarshalIndent(g, "", " ")
				wj, _ := json.MarshalIndent(w, "", " ")
				t.Errorf("%s (completions key %v): body differs from the SDK's\ngot:  %s\nwant: %s", name, openaiHost, gj, wj)
			}
		}
	}
}

// FuzzChunkIsTheSDKs decodes arbitrary chunk JSON with the client's chunk
// and the SDK's: where the SDK reads a well-typed chunk, the client reads
// the same text, calls, finish reason and usage from it. (Where a field has
// the wrong type the SDK coerces some, a number to a string say, and the
// client leaves it zero; that it still reads the rest is checked too. And
// encoding/json matches keys regardless of case where the SDK does not:
// inputs with such keys are not compared.)
func FuzzChunkIsTheSDKs(f *testing.F) {
	f.Add(`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}`)
	f.Add(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":3,"id":"q","function":{"name":"n","arguments":"{"}}]}}]}`)
	f.Add(`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}`)
	f.Add(`{"choices":[{"index":0,"delta":{"refusal":"no","function_call":{"name":"f","arguments":"{}"}},"finish_reason":null}],"usage":null}`)
	f.Add(`{"choices":[{"index":"0","delta":{"content":5}}]}`)
	f.Fuzz(func(t *testing.T, data string) {
		var sdk openai.ChatCompletionChunk
		if json.Unmarshal([]byte(data), &sdk) != nil {
			return
		}
		var ours chunk
		err := json.Unmarshal([]byte(data), &ours)
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) || caseVariantKeys(data) {
			return
		}
		if err != nil {
			t.Fatalf("the SDK reads %s, the client does not: %v", data, err)
		}
		var a, b accumulator
		a.add(ours, nil)
		b.add(fromSDK(sdk), nil)
		if !reflect.DeepEqual(a.response(), b.response()) || a.sawChoice != b.sawChoice {
			t.Fatalf("%s:\nclient %+v\nSDK    %+v", data, a.response(), b.response())
		}
	})
}

// fromSDK is the SDK's reading of a chunk, in the client's chunk type.
func fromSDK(ch openai.ChatCompletionChunk) chunk {
	var c chunk
	if ch.JSON.Usage.Valid() {
		c.Usage = &chunkUsage{ch.Usage.PromptTokens, ch.Usage.CompletionTokens}
	}
	for _, choice := range ch.Choices {
		d := choice.Delta
		//lint:ignore SA1019 the legacy function_call, as the client reads it
		fc := d.FunctionCall
		o := chunkChoice{Index: choice.Index, FinishReason: choice.FinishReason, Delta: chunkDelta{
			Content: d.Content, Refusal: d.Refusal, FunctionCall: chunkFunction{fc.Name, fc.Arguments}}}
		for _, tc := range d.ToolCalls {
			o.Delta.ToolCalls = append(o.Delta.ToolCalls, chunkToolCall{tc.Index, tc.ID, chunkFunction{tc.Function.Name, tc.Function.Arguments}})
		}
		c.Choices = append(c.Choices, o)
	}
	return c
}

// chunkKeys are the keys the client's chunk reads.
var chunkKeys = []string{"choices", "index", "delta", "content", "refusal", "tool_calls", "id",
	"function", "name", "arguments", "function_call", "finish_reason", "usage", "prompt_tokens", "completion_tokens", "error"}

// caseVariantKeys reports whether data has an object key that equals one
// of chunkKeys only when case is ignored.
func caseVariantKeys(data string) bool {
	var v any
	if json.Unmarshal([]byte(data), &v) != nil {
		return false
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				for _, known := range chunkKeys {
					if k != known && strings.EqualFold(k, known) {
						return true
					}
				}
				if walk(e) {
					return true
				}
			}
		case []any:
			for _, e := range v {
				if walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}

// connCounter counts the connections a test server accepts.
type connCounter struct {
	mu sync.Mutex
	n  int
}

func (c *connCounter) state(_ net.Conn, s http.ConnState) {
	if s == http.StateNew {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
	}
}

func (c *connCounter) count() int { c.mu.Lock(); defer c.mu.Unlock(); return c.n }

func sseHandler(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
}

// Children of one model call it in parallel, step after step, running
// tools between their calls: the connections of calls that ended serve the
// next ones, rather than Go's two idle connections per host and a dial for
// every other call.
func TestParallelCallersReuseConnections(t *testing.T) {
	var conns connCounter
	srv := httptest.NewUnstartedServer(http.HandlerFunc(sseHandler))
	srv.Config.ConnState = conns.state
	srv.Start()
	defer srv.Close()
	c := New(transport.Config{BaseURL: srv.URL, Model: "m", MaxRetries: -1})
	const callers, steps = 16, 10
	for range steps {
		// Every call of a step ends before the next step's calls start.
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				if _, err := c.Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}, nil); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	// Every caller dials once, and a few more when calls of a step overlap
	// unevenly; keeping two idle connections, each step after the first
	// would dial 14 more (142 in all).
	if n := conns.count(); n > 2*callers {
		t.Errorf("%d connections for %d calls by %d callers, want at most %d", n, callers*steps, callers, 2*callers)
	}
}

// Calls that start together over HTTPS to an HTTP/2 server share its
// connections: about httpsMaxConnsPerHost are dialled (the cap holds the
// dials in flight at once), where Go's transport alone dials one TLS
// connection per call.
func TestHTTPSCallsStartingTogetherDialAtMostTheCap(t *testing.T) {
	var conns connCounter
	srv := httptest.NewUnstartedServer(http.HandlerFunc(sseHandler))
	srv.EnableHTTP2 = true
	srv.Config.ConnState = conns.state
	srv.StartTLS()
	defer srv.Close()
	tr := transport.DefaultTransport(srv.URL)
	// A copy: the server's own client transport rewrites its config when Close
	// closes its idle connections, while dials of ours may still be going.
	tr.TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	c := New(transport.Config{BaseURL: srv.URL, Model: "m", MaxRetries: -1, HTTPClient: &http.Client{Transport: tr}})
	const calls = 4 * transport.HttpsMaxConnsPerHost
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range calls {
		wg.Go(func() {
			<-start
			if _, err := c.Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}, nil); err != nil {
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	if n := conns.count(); n > 2*transport.HttpsMaxConnsPerHost {
		t.Errorf("%d TLS connections for %d calls started together, want at most %d", n, calls, 2*transport.HttpsMaxConnsPerHost)
	}
}

// A server that flushes [DONE] and then ends the body (as servers do: the
// end goes out after the handler returns) keeps its HTTP/1.1 connection
// for the next call: the client reads the body to its end before it lets
// it go.
func TestCallsAfterAFlushedDoneReuseTheConnection(t *testing.T) {
	var conns connCounter
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sseHandler(w, r)
		// [DONE] goes out alone; the body's end follows a moment later,
		// when this returns (the client must wait for it, not close first).
		w.(http.Flusher).Flush()
		time.Sleep(5 * time.Millisecond)
	}))
	srv.Config.ConnState = conns.state
	srv.Start()
	defer srv.Close()
	c := New(transport.Config{BaseURL: srv.URL, Model: "m", MaxRetries: -1})
	const calls = 20
	for range calls {
		if _, err := c.Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.count(); n > 2 {
		t.Errorf("%d connections for %d calls one after another, want 1", n, calls)
	}
}

// A server that sends [DONE] and never ends the body does not hold the
// call: the rest of the body is given up after finishWait.
func TestADoneWithNoEndDoesNotHoldTheCall(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sseHandler(w, r)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	c := New(transport.Config{BaseURL: srv.URL, Model: "m", MaxRetries: -1})
	resp, err := c.Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}, nil)
	if err != nil || resp.Message.Content != "ok" {
		t.Fatalf("got %+v, %v", resp, err)
	}
}

// The Anthropic stream is read to its end too (the SDK's stream runs to
// EOF; message_stop is not a terminator we stop at): its HTTP/1.1
// connection serves the next call even when the server ends the body a
// moment after its last event.
func TestAnthropicCallsReuseTheConnection(t *testing.T) {
	var conns connCounter
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, f := range []string{
			`event: message_start` + "\n" + `data: {"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"x","content":[],"stop_reason":null,"usage":{"input_tokens":1,"output_tokens":0}}}`,
			`event: content_block_start` + "\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			`event: content_block_delta` + "\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}}`,
			`event: content_block_stop` + "\n" + `data: {"type":"content_block_stop","index":0}`,
			`event: message_delta` + "\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}`,
			`event: message_stop` + "\n" + `data: {"type":"message_stop"}`,
		} {
			_, _ = io.WriteString(w, f+"\n\n")
		}
		w.(http.Flusher).Flush()
		time.Sleep(5 * time.Millisecond)
	}))
	srv.Config.ConnState = conns.state
	srv.Start()
	defer srv.Close()
	c := anthropic.New(transport.Config{BaseURL: srv.URL, APIKey: "k", Model: "m", MaxRetries: -1})
	const calls = 20
	for range calls {
		resp, err := c.Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}, nil)
		if err != nil || resp.Message.Content != "ok" {
			t.Fatalf("got %+v, %v", resp, err)
		}
	}
	if n := conns.count(); n > 2 {
		t.Errorf("%d connections for %d calls one after another, want 1", n, calls)
	}
}
