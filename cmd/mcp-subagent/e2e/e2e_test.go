//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
)

func TestCompletedDelegation(t *testing.T) {
	transports(t, func(t *testing.T, http bool) {
		fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "The answer is 42.",
			Usage: &fakeopenai.Usage{PromptTokens: 120, CompletionTokens: 7}}))
		defer fake.Close()
		s := start(t, fake, serverOpts{http: http})
		res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "answer a question", "prompt": "What is six times seven?"})
		if res.IsError {
			t.Fatalf("isError: %s", text(res))
		}
		if got := text(res); got != "The answer is 42." {
			t.Errorf("text = %q", got)
		}
		fg := structured(t, res)
		if fg.Kind != "foreground" || fg.StopReason != "completed" || fg.Output != "The answer is 42." || !strings.HasPrefix(fg.AgentID, "agent-") {
			t.Errorf("structuredContent = %+v", fg)
		}
		if fg.Usage.InputTokens != 120 || fg.Usage.OutputTokens != 7 {
			t.Errorf("usage = %+v", fg.Usage)
		}
		reqs := fake.Requests()
		if len(reqs) != 1 || reqs[0].LastUserText() != "What is six times seven?" || reqs[0].Model != "fake-model" || !reqs[0].Stream {
			t.Fatalf("model requests = %+v", reqs)
		}
		if reqs[0].Messages[0].Role != "system" || !strings.Contains(reqs[0].Messages[0].Content, "delegated subagent") {
			t.Errorf("first message = %+v, want the subagent system prompt", reqs[0].Messages[0])
		}
	})
}

func TestChildUsesWorkspaceTool(t *testing.T) {
	transports(t, func(t *testing.T, http bool) {
		fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
			if out, ok := req.LastToolResult(); ok {
				return fakeopenai.Reply{Text: "The notes say: " + out}
			}
			return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "read_file", Arguments: `{"path":"notes.txt"}`}}}
		})
		defer fake.Close()
		s := start(t, fake, serverOpts{http: http})
		if err := os.WriteFile(filepath.Join(s.workspace, "notes.txt"), []byte("buy milk"), 0o644); err != nil {
			t.Fatal(err)
		}
		res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "read the notes", "prompt": "Read notes.txt"})
		if res.IsError || !strings.Contains(text(res), "buy milk") {
			t.Fatalf("result = %v %q", res.IsError, text(res))
		}
		reqs := fake.Requests()
		if len(reqs) != 2 {
			t.Fatalf("%d model requests, want 2", len(reqs))
		}
		if tr, _ := reqs[1].LastToolResult(); !strings.Contains(tr, "buy milk") {
			t.Errorf("tool result sent to the model = %q", tr)
		}
	})
}

func TestNonCompletedRunsAreErrors(t *testing.T) {
	cases := []struct {
		name       string
		handler    fakeopenai.Handler
		stop       string
		headline   string
		diagnostic string
		partial    string
	}{
		{
			name:    "max-tokens",
			handler: fakeopenai.Script(fakeopenai.Reply{Text: "The first half of", FinishReason: "length"}),
			stop:    "max-tokens", headline: "token limit", diagnostic: "output token limit", partial: "The first half of",
		},
		{
			name:    "refusal",
			handler: fakeopenai.Script(fakeopenai.Reply{Refusal: "I won't do that."}),
			stop:    "refusal", headline: "declined", diagnostic: "I won't do that.", partial: "I won't do that.",
		},
		{
			name: "500 after retries",
			handler: fakeopenai.Script(
				fakeopenai.Reply{Text: "Let me look around.", ToolCalls: []fakeopenai.ToolCall{{Name: "list_dir", Arguments: `{}`}}},
				fakeopenai.Reply{Status: 500, ErrorMessage: "upstream exploded"},
			),
			stop: "error", headline: "run failed", diagnostic: "500", partial: "Let me look around.",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			transports(t, func(t *testing.T, http bool) {
				fake := fakeopenai.New(tc.handler)
				defer fake.Close()
				s := start(t, fake, serverOpts{http: http, config: `{"llm":{"max_retries":2}}`})
				res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "try something", "prompt": "go"})
				if !res.IsError {
					t.Fatalf("not an error: %q", text(res))
				}
				got := text(res)
				for _, want := range []string{tc.headline, "Diagnostic: ", tc.diagnostic, "Partial output before the run ended:\n" + tc.partial} {
					if !strings.Contains(got, want) {
						t.Errorf("result text lacks %q:\n%s", want, got)
					}
				}
				fg := structured(t, res)
				if fg.StopReason != tc.stop || fg.Structured != nil {
					t.Errorf("structuredContent = %+v, want stop reason %s", fg, tc.stop)
				}
				if tc.name == "500 after retries" {
					if n := len(fake.Requests()); n != 4 { // one good, then 1 + 2 retries
						t.Errorf("%d model requests, want 4 (retries)", n)
					}
				}
			})
		})
	}
}

const answerSchema = `{"type":"object","properties":{"answer":{"type":"string"},"confidence":{"type":"number"}},"required":["answer"],"additionalProperties":false}`

func TestOutputSchema(t *testing.T) {
	var schema map[string]any
	if err := json.Unmarshal([]byte(answerSchema), &schema); err != nil {
		t.Fatal(err)
	}
	t.Run("met", func(t *testing.T) {
		transports(t, func(t *testing.T, http bool) {
			fake := fakeopenai.New(fakeopenai.Script(
				// An invalid object first: the child is told why and retries.
				fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "structured_output", Arguments: `{"answer": 42}`}}},
				fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "structured_output", Arguments: `{"answer":"42","confidence":0.9}`}}},
				fakeopenai.Reply{Text: "Delivered."},
			))
			defer fake.Close()
			s := start(t, fake, serverOpts{http: http})
			res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "structured answer", "prompt": "answer", "output_schema": schema})
			if res.IsError {
				t.Fatalf("isError: %s", text(res))
			}
			fg := structured(t, res)
			var s2 jsonschema.Schema
			_ = json.Unmarshal([]byte(answerSchema), &s2)
			rs, err := s2.Resolve(nil)
			if err != nil {
				t.Fatal(err)
			}
			var obj any
			if err := json.Unmarshal(fg.Structured, &obj); err != nil || obj == nil {
				t.Fatalf("structured = %s", fg.Structured)
			}
			if err := rs.Validate(obj); err != nil {
				t.Errorf("structured %s does not validate: %v", fg.Structured, err)
			}
			reqs := fake.Requests()
			if !reqs[0].HasTool("structured_output") {
				t.Error("the child was not offered structured_output")
			}
			if tr, _ := reqs[1].LastToolResult(); !strings.Contains(tr, "does not match the output schema") {
				t.Errorf("the invalid capture was answered with %q", tr)
			}
		})
	})
	t.Run("never met", func(t *testing.T) {
		transports(t, func(t *testing.T, http bool) {
			fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "Here is prose instead."}))
			defer fake.Close()
			s := start(t, fake, serverOpts{http: http})
			res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "structured answer", "prompt": "answer", "output_schema": schema})
			if !res.IsError {
				t.Fatalf("not an error: %s", text(res))
			}
			fg := structured(t, res)
			if fg.StopReason != "error" || fg.Structured != nil || !strings.Contains(fg.Diagnostic, "structured_output") {
				t.Errorf("structuredContent = %+v", fg)
			}
			if !strings.Contains(text(res), "Here is prose instead.") {
				t.Errorf("partial output missing: %s", text(res))
			}
		})
	})
	t.Run("not an object", func(t *testing.T) {
		fake := fakeopenai.New(nil)
		defer fake.Close()
		s := start(t, fake, serverOpts{})
		res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "x", "prompt": "y", "output_schema": map[string]any{"type": "array"}})
		if !res.IsError || !strings.Contains(text(res), "INVALID_REQUEST") || !strings.Contains(text(res), "output_schema") {
			t.Errorf("result = %q", text(res))
		}
		if len(fake.Requests()) != 0 {
			t.Error("a refused request reached the model")
		}
	})
}

func TestToolFilter(t *testing.T) {
	t.Run("unknown tool refused", func(t *testing.T) {
		fake := fakeopenai.New(nil)
		defer fake.Close()
		s := start(t, fake, serverOpts{})
		res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "x", "prompt": "y", "tool_filter": map[string]any{"deny": []string{"read_file", "teleport"}}})
		if !res.IsError || !strings.Contains(text(res), "INVALID_REQUEST") || !strings.Contains(text(res), "teleport") {
			t.Errorf("result = %q", text(res))
		}
		if len(fake.Requests()) != 0 {
			t.Error("a refused request reached the model")
		}
	})
	t.Run("filtered tool hidden and refused", func(t *testing.T) {
		transports(t, func(t *testing.T, http bool) {
			fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
				if out, ok := req.LastToolResult(); ok {
					return fakeopenai.Reply{Text: "tool said: " + out}
				}
				// Call the hidden tool anyway.
				return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "write_file", Arguments: `{"path":"x.txt","content":"x"}`}}}
			})
			defer fake.Close()
			s := start(t, fake, serverOpts{http: http})
			res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "x", "prompt": "y", "tool_filter": map[string]any{"deny": []string{"write_file"}}})
			req := fake.Requests()[0]
			if req.HasTool("write_file") {
				t.Error("the denied tool was shown to the model")
			}
			if !req.HasTool("read_file") || !req.HasTool("subagent") {
				t.Errorf("the model lost tools it should keep: %+v", req.Tools)
			}
			if _, err := os.Stat(filepath.Join(s.workspace, "x.txt")); err == nil {
				t.Error("the denied tool ran")
			}
			if !strings.Contains(text(res), "not available") {
				t.Errorf("result = %q", text(res))
			}
		})
	})
	t.Run("allow keeps only the named", func(t *testing.T) {
		fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "ok"}))
		defer fake.Close()
		s := start(t, fake, serverOpts{})
		res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "x", "prompt": "y", "tool_filter": map[string]any{"allow": []string{"read_file"}}})
		if res.IsError {
			t.Fatal(text(res))
		}
		if tools := fake.Requests()[0].Tools; len(tools) != 1 || tools[0].Name != "read_file" {
			t.Errorf("tools shown = %+v", tools)
		}
	})
}

// nestingModel delegates one level deeper on every prompt "level N" and
// answers with whatever its delegation returned.
func nestingModel(n int, req fakeopenai.Request) fakeopenai.Reply {
	if out, ok := req.LastToolResult(); ok {
		return fakeopenai.Reply{Text: "got[" + out + "]"}
	}
	var level int
	fmt.Sscanf(req.LastUserText(), "level %d", &level)
	args, _ := json.Marshal(map[string]any{"description": "go deeper", "prompt": fmt.Sprintf("level %d", level+1)})
	return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "subagent", Arguments: string(args)}}}
}

func TestDepthExceededThroughNestedDelegation(t *testing.T) {
	transports(t, func(t *testing.T, http bool) {
		fake := fakeopenai.New(nestingModel)
		defer fake.Close()
		s := start(t, fake, serverOpts{http: http})
		res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "go deep", "prompt": "level 1"})
		if res.IsError {
			t.Fatal(text(res))
		}
		// Depths 1, 2 and 3 run; the request for depth 4 is refused.
		want := "got[got[got[Error: DEPTH_EXCEEDED: subagent depth 4 exceeds maxDepth 3]]]"
		if got := text(res); got != want {
			t.Errorf("output = %q, want %q", got, want)
		}
		// Usage is summed up the tree: each of the three children made two
		// model calls of 10 in / 5 out tokens.
		fg := structured(t, res)
		var tree struct {
			TreeUsage struct {
				InputTokens int64 `json:"input_tokens"`
			} `json:"tree_usage"`
		}
		raw, _ := json.Marshal(res.StructuredContent)
		if res.RawStructuredContent != nil {
			raw = res.RawStructuredContent
		}
		_ = json.Unmarshal(raw, &tree)
		if fg.Usage.InputTokens != 20 || tree.TreeUsage.InputTokens != 60 {
			t.Errorf("usage = %d in, tree usage = %d in; want 20 and 60 (%s)", fg.Usage.InputTokens, tree.TreeUsage.InputTokens, raw)
		}
	})
	t.Run("max_depth from the caller", func(t *testing.T) {
		fake := fakeopenai.New(nestingModel)
		defer fake.Close()
		s := start(t, fake, serverOpts{})
		res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "go deep", "prompt": "level 1", "max_depth": 2})
		want := "got[got[Error: DEPTH_EXCEEDED: subagent depth 3 exceeds maxDepth 2]]"
		if got := text(res); got != want {
			t.Errorf("output = %q, want %q", got, want)
		}
	})
	t.Run("config cap", func(t *testing.T) {
		fake := fakeopenai.New(nestingModel)
		defer fake.Close()
		s := start(t, fake, serverOpts{config: `{"max_depth": 1}`})
		res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "go deep", "prompt": "level 1"})
		want := "got[Error: DEPTH_EXCEEDED: subagent depth 2 exceeds maxDepth 1]"
		if got := text(res); got != want {
			t.Errorf("output = %q, want %q", got, want)
		}
	})
}

func TestClientCancelAborts(t *testing.T) {
	transports(t, func(t *testing.T, http bool) {
		var inflight atomic.Int32
		fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
			inflight.Add(1)
			return fakeopenai.Reply{Text: "too late", Delay: 30 * time.Second}
		})
		defer fake.Close()
		s := start(t, fake, serverOpts{http: http})
		ctx, cancel := context.WithCancel(testCtx(t))
		errc := make(chan error, 1)
		go func() {
			req := mcp.CallToolRequest{}
			req.Params.Name = "subagent"
			req.Params.Arguments = map[string]any{"description": "slow work", "prompt": "take your time"}
			_, err := s.client.CallTool(ctx, req)
			errc <- err
		}()
		if !waitFor(10*time.Second, func() bool { return inflight.Load() == 1 }) {
			t.Fatal("the child never called the model")
		}
		cancelled := time.Now()
		cancel()
		if err := <-errc; err == nil {
			t.Fatal("the cancelled call returned no error")
		}
		// The child's own turn (not just the call) must end aborted.
		turnAborted := func() bool {
			for _, line := range strings.Split(s.stderr.String(), "\n") {
				if strings.Contains(line, `"msg":"turn ended"`) && strings.Contains(line, `"stop_reason":"aborted"`) {
					return true
				}
			}
			return false
		}
		if !waitFor(time.Second, turnAborted) {
			t.Fatalf("the run did not end aborted within a second of the cancel; stderr:\n%s", s.stderr)
		}
		t.Logf("aborted %v after the cancel", time.Since(cancelled))
		// The server keeps serving.
		fake2 := s.call(t, testCtx(t), "subagent", map[string]any{"description": "bad", "prompt": 5})
		if !fake2.IsError {
			t.Error("server stopped answering after a cancel")
		}
	})
}

func TestProgressNotifications(t *testing.T) {
	transports(t, func(t *testing.T, http bool) {
		fake := fakeopenai.New(fakeopenai.Script(
			fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "list_dir", Arguments: `{}`}}},
			fakeopenai.Reply{Text: "done"},
		))
		defer fake.Close()
		s := start(t, fake, serverOpts{http: http})
		req := mcp.CallToolRequest{}
		req.Params.Name = "subagent"
		req.Params.Arguments = map[string]any{"description": "with progress", "prompt": "go"}
		req.Params.Meta = &mcp.Meta{ProgressToken: "tok-1"}
		res, err := s.client.CallTool(testCtx(t), req)
		if err != nil || res.IsError {
			t.Fatalf("call: %v %v", err, res)
		}
		var msgs []string
		collect := func() {
			for {
				select {
				case n := <-s.notes:
					if n.Method == "notifications/progress" && n.Params.AdditionalFields["progressToken"] == "tok-1" {
						msgs = append(msgs, fmt.Sprint(n.Params.AdditionalFields["message"]))
					}
				default:
					return
				}
			}
		}
		// The last note races the result on the wire (notes may be dropped,
		// the result never is), so only the earlier ones are required.
		waitFor(2*time.Second, func() bool { collect(); return len(msgs) >= 2 })
		joined := strings.Join(msgs, " | ")
		if !strings.Contains(joined, "started agent-") || !strings.Contains(joined, "calling list_dir") {
			t.Errorf("progress messages = %q\n%s", msgs, s.stderr)
		}
	})
}

func TestSixConcurrentForegroundCallsOverStdio(t *testing.T) {
	const n = 6
	var mu sync.Mutex
	arrived := 0
	all := make(chan struct{})
	fake := fakeopenai.New(func(_ int, req fakeopenai.Request) fakeopenai.Reply {
		// Each child's model call waits until all six are in flight: the
		// test passes only if the server runs them concurrently.
		mu.Lock()
		arrived++
		if arrived == n {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(20 * time.Second):
			return fakeopenai.Reply{Status: 400, ErrorMessage: "calls were not concurrent"}
		}
		return fakeopenai.Reply{Text: "echo " + req.LastUserText()}
	})
	defer fake.Close()
	s := start(t, fake, serverOpts{})
	var wg sync.WaitGroup
	results := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "parallel", "prompt": fmt.Sprintf("task %d", i)})
			if res.IsError {
				t.Errorf("call %d: %s", i, text(res))
			}
			results[i] = text(res)
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r != fmt.Sprintf("echo task %d", i) {
			t.Errorf("call %d answered %q", i, r)
		}
	}
}

func TestBadInputNamesTheField(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "fine"}))
	defer fake.Close()
	s := start(t, fake, serverOpts{})
	base := func(extra map[string]any) map[string]any {
		m := map[string]any{"description": "valid", "prompt": "valid"}
		for k, v := range extra {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	cases := []struct {
		name  string
		args  map[string]any
		field string
	}{
		{"description wrong type", base(map[string]any{"description": 7}), "description"},
		{"description missing", base(map[string]any{"description": nil}), "description"},
		{"description empty", base(map[string]any{"description": ""}), "description"},
		{"prompt wrong type", base(map[string]any{"prompt": []int{1}}), "prompt"},
		{"prompt missing", base(map[string]any{"prompt": nil}), "prompt"},
		{"prompt empty", base(map[string]any{"prompt": ""}), "prompt"},
		{"provider wrong type", base(map[string]any{"provider": true}), "provider"},
		{"provider unknown", base(map[string]any{"provider": "nope"}), "provider"},
		{"output_schema wrong type", base(map[string]any{"output_schema": "object"}), "output_schema"},
		{"output_schema not object-rooted", base(map[string]any{"output_schema": map[string]any{"type": "string"}}), "output_schema"},
		{"max_depth wrong type", base(map[string]any{"max_depth": "two"}), "max_depth"},
		{"max_depth fractional", base(map[string]any{"max_depth": 1.5}), "max_depth"},
		{"max_depth negative", base(map[string]any{"max_depth": -1}), "max_depth"},
		{"tool_filter wrong type", base(map[string]any{"tool_filter": []string{"read_file"}}), "tool_filter"},
		{"tool_filter both", base(map[string]any{"tool_filter": map[string]any{"allow": []string{"read_file"}, "deny": []string{"search"}}}), "tool_filter"},
		{"tool_filter allow wrong type", base(map[string]any{"tool_filter": map[string]any{"allow": "read_file"}}), "tool_filter.allow"},
		{"tool_filter unknown key", base(map[string]any{"tool_filter": map[string]any{"only": []string{"x"}}}), "only"},
		{"persona wrong type", base(map[string]any{"persona": 3}), "persona"},
		{"cwd wrong type", base(map[string]any{"cwd": 3}), "cwd"},
		{"cwd outside roots", base(map[string]any{"cwd": "/"}), "cwd"},
		{"cwd missing dir", base(map[string]any{"cwd": "no/such/dir"}), "cwd"},
		{"unknown field", base(map[string]any{"colour": "red"}), "colour"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := s.call(t, testCtx(t), "subagent", tc.args)
			if !res.IsError {
				t.Fatalf("accepted: %s", text(res))
			}
			if got := text(res); !strings.Contains(got, `"`+tc.field+`"`) && !strings.Contains(got, tc.field+":") {
				t.Errorf("error %q does not name the field %q", got, tc.field)
			}
		})
	}
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("%d bad requests reached the model", n)
	}
	// The server keeps serving.
	res := s.call(t, testCtx(t), "subagent", base(nil))
	if res.IsError || text(res) != "fine" {
		t.Errorf("after bad input: %v %q", res.IsError, text(res))
	}
}

// A root principal's notice is pushed to its connected session as an MCP
// log notification (besides riding in band on its next call).
func TestNoticePushedAsLogNotification(t *testing.T) {
	transports(t, func(t *testing.T, http bool) {
		fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "all done", Delay: 200 * time.Millisecond}))
		defer fake.Close()
		s := start(t, fake, serverOpts{http: http})
		res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "background", "prompt": "go", "run_in_background": true})
		if res.IsError {
			t.Fatal(text(res))
		}
		id := structured(t, res).AgentID
		var got map[string]any
		waitFor(10*time.Second, func() bool {
			for {
				select {
				case n := <-s.notes:
					if n.Method != "notifications/message" {
						continue
					}
					if data, ok := n.Params.AdditionalFields["data"].(map[string]any); ok && data["agent_id"] == id {
						got = data
						return true
					}
				default:
					return false
				}
			}
		})
		if got == nil {
			t.Fatalf("no log notification for %s; stderr:\n%s", id, s.stderr)
		}
		if got["source"] != "subagent-settled" || !strings.Contains(fmt.Sprint(got["text"]), "all done") {
			t.Errorf("notification data = %v", got)
		}
	})
}

// A foreground call bounded by wait_seconds hands back a running handle
// when the child is slower; the child goes on and its settlement notice
// follows. A foreground call that got its answer in band gets no second
// notice for the same epoch.
func TestForegroundWaitSecondsAndNoDuplicateNotice(t *testing.T) {
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		if req.LastUserText() == "slow" {
			return fakeopenai.Reply{Text: "slow answer", Delay: 1500 * time.Millisecond}
		}
		return fakeopenai.Reply{Text: "quick answer"}
	})
	defer fake.Close()
	s := start(t, fake, serverOpts{})

	// In band: the answer is the epoch's notice; nothing follows.
	res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "quick", "prompt": "quick"})
	if res.IsError || text(res) != "quick answer" {
		t.Fatalf("quick: %v %q", res.IsError, text(res))
	}
	// Until the listing shows the epoch settled (its notice, if there were
	// one, is stored by then), no listing carries a notice.
	quick := structured(t, res).AgentID
	settled := waitFor(10*time.Second, func() bool {
		list, rows := callList(t, s, testCtx(t), nil)
		if strings.Contains(text(list), "[subagent-settled") {
			t.Fatalf("a notice followed an in-band answer: %q", text(list))
		}
		r, _ := rowOf(rows, quick)
		return r.Status == "ready"
	})
	if !settled {
		t.Fatalf("the quick child never listed as settled")
	}
	if list := s.call(t, testCtx(t), "list_agents", map[string]any{}); strings.Contains(text(list), "[subagent-settled") {
		t.Errorf("a notice followed an in-band answer: %q", text(list))
	}

	// Bounded: a running handle at once, the notice later.
	t0 := time.Now()
	res = s.call(t, testCtx(t), "subagent", map[string]any{"description": "slow", "prompt": "slow", "wait_seconds": 0.3})
	if d := time.Since(t0); d > time.Second {
		t.Errorf("wait_seconds 0.3 returned after %v", d)
	}
	var h struct {
		Kind, AgentID, Status string
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if res.RawStructuredContent != nil {
		raw = res.RawStructuredContent
	}
	_ = json.Unmarshal(raw, &struct {
		Kind    *string `json:"kind"`
		AgentID *string `json:"agent_id"`
		Status  *string `json:"status"`
	}{&h.Kind, &h.AgentID, &h.Status})
	if res.IsError || h.Kind != "continuable" || h.Status != "running" || h.AgentID == "" {
		t.Fatalf("bounded foreground = %v %s", res.IsError, raw)
	}
	list := s.call(t, testCtx(t), "list_agents", map[string]any{"wait_seconds": 10})
	if got := text(list); !strings.Contains(got, "[subagent-settled from "+h.AgentID+"]") || !strings.Contains(got, "slow answer") {
		t.Errorf("the notice after the bound = %q", got)
	}
}

// A persona shadows the deployment persona for that child only.
func TestPersonaShadowsTheDeploymentPersona(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "ok"}))
	defer fake.Close()
	s := start(t, fake, serverOpts{config: `{"persona": "DEPLOYMENT-PERSONA"}`})
	for _, tc := range []struct{ persona, want, not string }{
		{"CHILD-PERSONA", "CHILD-PERSONA", "DEPLOYMENT-PERSONA"},
		{"", "DEPLOYMENT-PERSONA", "CHILD-PERSONA"},
	} {
		args := map[string]any{"description": "persona", "prompt": "hi " + tc.want}
		if tc.persona != "" {
			args["persona"] = tc.persona
		}
		if res := s.call(t, testCtx(t), "subagent", args); res.IsError {
			t.Fatal(text(res))
		}
		var system string
		for _, r := range fake.Requests() {
			if r.LastUserText() == "hi "+tc.want {
				system = r.Messages[0].Content
			}
		}
		if !strings.Contains(system, tc.want) || strings.Contains(system, tc.not) {
			t.Errorf("persona %q: system prompt = %q", tc.persona, system)
		}
	}
}

// mcp-go's client on its default, the stateless modern protocol, gets the
// same delegation over HTTP (notices still ride in band).
func TestModernProtocolClientOverHTTP(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "modern answer"}))
	defer fake.Close()
	s := start(t, fake, serverOpts{http: true})
	c, err := client.NewStreamableHttpClient(s.url, transport.WithHTTPHeaders(s.bearer()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testCtx(t)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ClientInfo = mcp.Implementation{Name: "modern", Version: "1"}
	ir, err := c.Initialize(ctx, init)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("negotiated %s", ir.ProtocolVersion)
	req := mcp.CallToolRequest{}
	req.Params.Name = "subagent"
	req.Params.Arguments = map[string]any{"description": "modern", "prompt": "hi", "run_in_background": false}
	res, err := c.CallTool(ctx, req)
	if err != nil || res.IsError || text(res) != "modern answer" {
		t.Fatalf("call: %v %+v", err, res)
	}
}

type rootsHandler struct{ uris []string }

func (h rootsHandler) ListRoots(context.Context, mcp.ListRootsRequest) (*mcp.ListRootsResult, error) {
	res := &mcp.ListRootsResult{}
	for _, u := range h.uris {
		res.Roots = append(res.Roots, mcp.Root{URI: u, Name: "project"})
	}
	return res, nil
}

// A child's cwd may lie in a root the client offers over MCP; outside any
// root it is refused.
func TestClientRootsWidenTheAllowedCwds(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "ok"}))
	defer fake.Close()
	project := t.TempDir()
	if real, err := filepath.EvalSymlinks(project); err == nil {
		project = real
	}
	other := t.TempDir()
	s := start(t, fake, serverOpts{clientOpts: []client.ClientOption{client.WithRootsHandler(rootsHandler{[]string{"file://" + project}})}})
	if res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "in a client root", "prompt": "hi", "cwd": project}); res.IsError {
		t.Errorf("cwd inside the client's root refused: %s", text(res))
	}
	res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "outside", "prompt": "hi", "cwd": other})
	if !res.IsError || !strings.Contains(text(res), `"cwd"`) {
		t.Errorf("cwd outside every root: %v %q", res.IsError, text(res))
	}
}
