package fakeopenai_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
)

func post(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestNonStreamingCompletion(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{
		Text:      "hi",
		ToolCalls: []fakeopenai.ToolCall{{Name: "ls", Arguments: "{}"}},
	}))
	defer srv.Close()
	resp := post(t, srv.URL()+"/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var got struct {
		Object  string
		Model   string
		Choices []struct {
			FinishReason string `json:"finish_reason"`
			Message      struct {
				Role      string
				Content   *string
				Refusal   *string
				ToolCalls []struct {
					ID       string
					Type     string
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
		}
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			TotalTokens  int `json:"total_tokens"`
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	c := got.Choices[0]
	if got.Object != "chat.completion" || got.Model != "m" || c.FinishReason != "tool_calls" ||
		c.Message.Role != "assistant" || c.Message.Content == nil || *c.Message.Content != "hi" || c.Message.Refusal != nil ||
		len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].ID != "call_0_0" || c.Message.ToolCalls[0].Type != "function" ||
		got.Usage.PromptTokens != 10 || got.Usage.TotalTokens != 15 {
		t.Errorf("unexpected completion: %+v", got)
	}
	if u := srv.Requests()[0].LastUserText(); u != "ab" {
		t.Errorf("content parts flattened to %q, want %q", u, "ab")
	}
}

func TestStreamingFrames(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "hello world"}))
	defer srv.Close()
	resp := post(t, srv.URL()+"/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}`)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content-type %q", ct)
	}
	var frames []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("line %q is not a data line", line)
		}
		frames = append(frames, data)
	}
	if len(frames) < 5 || frames[len(frames)-1] != "[DONE]" {
		t.Fatalf("frames = %q", frames)
	}
	var text strings.Builder
	for i, f := range frames[:len(frames)-1] {
		var ch struct {
			Object  string
			Choices []struct {
				Delta        struct{ Content string }
				FinishReason *string `json:"finish_reason"`
			}
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			}
		}
		if err := json.Unmarshal([]byte(f), &ch); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if ch.Object != "chat.completion.chunk" {
			t.Errorf("frame %d object %q", i, ch.Object)
		}
		last := i == len(frames)-2
		if last != (len(ch.Choices) == 0) || last != (ch.Usage != nil) {
			t.Errorf("frame %d: only the last frame has usage and no choices: %s", i, f)
		}
		for _, c := range ch.Choices {
			text.WriteString(c.Delta.Content)
			if (c.FinishReason != nil) != (i == len(frames)-3) {
				t.Errorf("frame %d: finish_reason only on the last choice frame: %s", i, f)
			}
		}
	}
	if text.String() != "hello world" {
		t.Errorf("text = %q", text.String())
	}
}

func TestErrorsAndModels(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Status: 429, ErrorMessage: "slow down"}))
	defer srv.Close()

	resp := post(t, srv.URL()+"/chat/completions", `{"model":"m","stream":true,"messages":[]}`)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 429 || !strings.Contains(string(body), `"message":"slow down"`) || !strings.Contains(string(body), `"type":"rate_limit_error"`) {
		t.Errorf("got %d %s", resp.StatusCode, body)
	}

	resp = post(t, srv.URL()+"/chat/completions", `{not json`)
	if resp.StatusCode != 400 {
		t.Errorf("bad JSON: status %d", resp.StatusCode)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("recorded %d requests; a malformed body is not a chat request", n)
	}

	mresp, err := http.Get(srv.URL() + "/models")
	if err != nil {
		t.Fatal(err)
	}
	defer mresp.Body.Close()
	body, _ = io.ReadAll(mresp.Body)
	if !strings.Contains(string(body), `"id":"fake-model"`) || !strings.Contains(string(body), `"object":"list"`) {
		t.Errorf("models: %s", body)
	}
}

func TestRequestHelpers(t *testing.T) {
	r := fakeopenai.Request{
		Tools: []fakeopenai.Tool{{Name: "report"}},
		Messages: []fakeopenai.Message{
			{Role: "user", Content: "first"},
			{Role: "tool", Content: "old result"},
			{Role: "user", Content: "second"},
			{Role: "assistant", ToolCalls: []fakeopenai.ToolCall{{ID: "a", Name: "report"}}},
			{Role: "tool", ToolCallID: "a", Content: "new result"},
		},
	}
	if r.LastUserText() != "second" || !r.HasTool("report") || r.HasTool("ls") {
		t.Error("LastUserText/HasTool")
	}
	if got, ok := r.LastToolResult(); !ok || got != "new result" {
		t.Errorf("LastToolResult = %q, %v", got, ok)
	}
	r.Messages = r.Messages[:3]
	if _, ok := r.LastToolResult(); ok {
		t.Error("a tool result before the last user message counts")
	}
}
