//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeanthropic"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
)

// anthropicReply scripts the fake Messages API by the child's task: WRITE
// writes a file with write_file and then answers; LONG stops at
// max_tokens; REFUSE is refused; anything else is answered at once.
func anthropicReply(r fakeanthropic.Request) fakeanthropic.Reply {
	task := strings.Join(r.UserTexts(), "\n")
	switch {
	case strings.Contains(task, "WRITE") && len(r.LastToolResults()) == 0:
		return fakeanthropic.Reply{ToolUses: []fakeanthropic.ToolUse{{Name: "write_file",
			Input: map[string]any{"path": "from-claude.txt", "content": "written over the Messages API"}}}}
	case strings.Contains(task, "WRITE"):
		return fakeanthropic.Reply{Text: "wrote it: " + r.LastToolResults()[0].Text}
	case strings.Contains(task, "LONG"):
		return fakeanthropic.Reply{Text: "a partial ans", StopReason: "max_tokens"}
	case strings.Contains(task, "REFUSE"):
		return fakeanthropic.Reply{StopReason: "refusal", Refusal: &fakeanthropic.Refusal{Category: "cyber", Explanation: "not this one"}}
	}
	return fakeanthropic.Reply{Text: "claude: " + task}
}

// A configured anthropic model runs a spawn child over the native Messages
// API, chosen per call beside an OpenAI-compatible one: the request carries
// the configured model id, the call's effort and the key as x-api-key; the
// child's tool call runs and its result goes back as a tool_result; a
// max_tokens stop and a refusal reach the client as error results with
// their stop reasons; the other model's calls go to the other server.
func TestAnthropicModelThroughTheBinary(t *testing.T) {
	anth := fakeanthropic.New(anthropicReply)
	defer anth.Close()
	oa := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "from openai"}))
	defer oa.Close()
	cfg := fmt.Sprintf(`{"providers": [], "models": [
		{"name": "claude", "api": "anthropic", "base_url": %q, "api_key_env": "TEST_ANTHROPIC_KEY", "model": "claude-id"},
		{"name": "oa", "api": "openai", "base_url": %q, "api_key_env": "OPENAI_API_KEY", "model": "oa-id"}]}`, anth.URL(), oa.URL())
	s := start(t, nil, serverOpts{config: cfg, env: []string{"TEST_ANTHROPIC_KEY=anthropic-test-key"}})
	ctx := testCtx(t)

	res := s.call(t, ctx, "subagent", map[string]any{"description": "writer", "prompt": "WRITE the file", "effort": "high"})
	if res.IsError {
		t.Fatalf("subagent on the default (anthropic) model: %s", text(res))
	}
	var fg struct {
		Output     string `json:"output"`
		StopReason string `json:"stop_reason"`
	}
	decodeSC(t, res, &fg)
	if fg.StopReason != "completed" || !strings.HasPrefix(fg.Output, "wrote it: ") {
		t.Errorf("result %+v; want the answer after the tool round", fg)
	}
	if got, err := os.ReadFile(filepath.Join(s.workspace, "from-claude.txt")); err != nil || string(got) != "written over the Messages API" {
		t.Errorf("the child's write_file: %q, %v", got, err)
	}
	reqs := anth.Requests()
	if len(reqs) != 2 {
		t.Fatalf("the Messages API got %d requests, want 2 (the tool call, the answer)", len(reqs))
	}
	for i, r := range reqs {
		if r.Model != "claude-id" || r.Effort != "high" || r.Header.Get("x-api-key") != "anthropic-test-key" || !r.Stream {
			t.Errorf("request %d: model %q, effort %q, x-api-key %q, stream %v; want claude-id, high, the configured key, streamed",
				i, r.Model, r.Effort, r.Header.Get("x-api-key"), r.Stream)
		}
	}
	if trs := reqs[1].LastToolResults(); len(trs) != 1 || trs[0].Name != "write_file" || trs[0].IsError {
		t.Errorf("the second request's tool results = %+v; want write_file's, matched to its tool_use", trs)
	}

	for _, c := range []struct{ prompt, stop, diag string }{
		{"LONG answer", "max-tokens", ""},
		{"REFUSE this", "refusal", "not this one"},
	} {
		res := s.call(t, ctx, "subagent", map[string]any{"description": "stopper", "prompt": c.prompt})
		var got struct {
			StopReason string `json:"stop_reason"`
			Diagnostic string `json:"diagnostic"`
		}
		decodeSC(t, res, &got)
		if !res.IsError || got.StopReason != c.stop || !strings.Contains(got.Diagnostic, c.diag) {
			t.Errorf("%q: isError %v, %+v; want an error result with stop_reason %s", c.prompt, res.IsError, got, c.stop)
		}
	}

	before := len(anth.Requests())
	res = s.call(t, ctx, "subagent", map[string]any{"description": "other", "prompt": "hello", "model": "oa"})
	decodeSC(t, res, &fg)
	if res.IsError || fg.Output != "from openai" {
		t.Errorf("model oa: %s", text(res))
	}
	if r := oa.Requests(); len(r) != 1 || r[0].Model != "oa-id" {
		t.Errorf("the OpenAI-compatible server got %+v, want one request for oa-id", r)
	}
	if n := len(anth.Requests()); n != before {
		t.Errorf("a call on model oa reached the Messages API (%d more requests)", n-before)
	}
}
