package fakeresponses_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeresponses"
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

// The shape Codex 0.171 sends: MCP tools in a namespace, the output of a
// call as "Wall time: …\nOutput:\n<JSON>".
const codexRequest = `{"model":"fake-model","stream":true,"instructions":"be brief",
 "tools":[{"type":"function","name":"exec_command","parameters":{}},
  {"type":"namespace","name":"mcp__subagent","tools":[{"type":"function","name":"list_agents","parameters":{}},{"type":"function","name":"subagent","parameters":{}}]}],
 "input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"SESSION: go"}]},
  {"type":"function_call","name":"subagent","namespace":"mcp__subagent","arguments":"{}","call_id":"c1"},
  {"type":"function_call_output","call_id":"c1","output":"Wall time: 0.01 seconds\nOutput:\n{\"kind\":\"continuable\"}"}]}`

func TestNamespacedCallsAndOutputs(t *testing.T) {
	s := fakeresponses.New(func(r fakeresponses.Request) fakeresponses.Reply {
		c, ok := r.Call("subagent", "list_agents", map[string]any{"wait_seconds": 5})
		if !ok {
			return fakeresponses.Reply{Text: "no tool"}
		}
		return fakeresponses.Reply{Calls: []fakeresponses.Call{c}}
	})
	defer s.Close()
	body := post(t, s.URL()+"/responses", codexRequest)
	for _, want := range []string{"event: response.created", `"type":"function_call"`, `"namespace":"mcp__subagent"`,
		`"name":"list_agents"`, `"arguments":"{\"wait_seconds\":5}"`, "event: response.completed"} {
		if !strings.Contains(body, want) {
			t.Errorf("stream lacks %s:\n%s", want, body)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := s.Wait(ctx, fakeresponses.Request.IsAgentTurn)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.ToolNames(); len(got) != 3 || got[2] != "mcp__subagent.subagent" {
		t.Errorf("tool names %q", got)
	}
	out := r.LastOutputs()
	if len(out) != 1 || out[0].Name != "subagent" || !strings.HasSuffix(out[0].Output, `{"kind":"continuable"}`) {
		t.Errorf("last outputs %+v", out)
	}
	if r.LastUserText() != "SESSION: go" || len(r.OutputsOf("subagent")) != 1 {
		t.Errorf("user text %q, outputs %+v", r.LastUserText(), r.Outputs())
	}
	if _, ok := r.FindTool("other", "subagent"); ok {
		t.Error("FindTool matched another server's namespace")
	}
}
