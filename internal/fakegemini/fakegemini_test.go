package fakegemini_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/fakegemini"
)

func post(t *testing.T, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-goog-api-key", "k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// response is the subset of GenerateContentResponse the tests read.
type response struct {
	Candidates []struct {
		Content struct {
			Role  string
			Parts []struct {
				Text         *string
				FunctionCall *struct {
					Name string
					Args map[string]any
				}
			}
		}
		FinishReason string
	}
	UsageMetadata *struct {
		PromptTokenCount, CandidatesTokenCount, TotalTokenCount int
	}
}

const body = `{
 "systemInstruction": {"parts": [{"text": "be brief"}]},
 "contents": [
  {"role": "user", "parts": [{"text": "first"}]},
  {"role": "model", "parts": [{"text": "thinking", "thought": true}, {"functionCall": {"name": "mcp_subagent_subagent", "args": {"prompt": "x"}}}]},
  {"role": "user", "parts": [{"functionResponse": {"name": "mcp_subagent_subagent", "response": {"output": "child answer"}}}]},
  {"role": "user", "parts": [{"text": "second"}]}
 ],
 "tools": [{"functionDeclarations": [
  {"name": "mcp_subagent_subagent", "description": "delegate", "parametersJsonSchema": {"type": "object"}},
  {"name": "read_file", "parameters": {"type": "OBJECT"}}
 ]}]
}`

// The request is decoded as the client sent it: the model from the path,
// the conversation, the offered functions and the key header.
func TestRequestIsDecodedAndRecorded(t *testing.T) {
	srv := fakegemini.New(fakegemini.Script(fakegemini.Reply{Text: "hi"}))
	defer srv.Close()
	resp := post(t, srv.URL()+"/v1beta/models/fake-model:generateContent", body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests recorded, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Model != "fake-model" || r.Stream || r.System != "be brief" || r.Header.Get("x-goog-api-key") != "k" {
		t.Errorf("model %q stream %v system %q key %q", r.Model, r.Stream, r.System, r.Header.Get("x-goog-api-key"))
	}
	if got := strings.Join(r.ToolNames(), ","); got != "mcp_subagent_subagent,read_file" || !r.HasTool("read_file") {
		t.Errorf("tools %q", got)
	}
	if string(r.Tools[0].Parameters) != `{"type": "object"}` || string(r.Tools[1].Parameters) != `{"type": "OBJECT"}` {
		t.Errorf("parameters %s, %s", r.Tools[0].Parameters, r.Tools[1].Parameters)
	}
	if got := strings.Join(r.UserTexts(), "|"); got != "first|second" || r.LastUserText() != "second" {
		t.Errorf("user texts %q, last %q", got, r.LastUserText())
	}
	if m := r.Contents[1]; m.Role != "model" || m.Texts() != "" || m.Parts[1].FunctionCall.Name != "mcp_subagent_subagent" ||
		string(m.Parts[1].FunctionCall.Args) != `{"prompt": "x"}` {
		t.Errorf("model content %+v", m)
	}
	frs := r.FunctionResponses()
	if len(frs) != 1 || frs[0].Name != "mcp_subagent_subagent" || string(frs[0].Response) != `{"output": "child answer"}` {
		t.Errorf("function responses %+v", frs)
	}
}

// generateContent answers one response with the text and the calls, STOP
// and usage.
func TestGenerateContent(t *testing.T) {
	srv := fakegemini.New(fakegemini.Script(fakegemini.Reply{Text: "calling",
		Calls: []fakegemini.FunctionCall{{Name: "ls", Args: json.RawMessage(`{"path":"."}`)}, {Name: "pwd"}}}))
	defer srv.Close()
	resp := post(t, srv.URL()+"/v1/models/m:generateContent", `{"contents":[{"role":"user","parts":[{"text":"a"}]}]}`)
	var got response
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	c := got.Candidates[0]
	if c.FinishReason != "STOP" || c.Content.Role != "model" || len(c.Content.Parts) != 3 || *c.Content.Parts[0].Text != "calling" ||
		c.Content.Parts[1].FunctionCall.Name != "ls" || c.Content.Parts[1].FunctionCall.Args["path"] != "." ||
		c.Content.Parts[2].FunctionCall.Name != "pwd" || c.Content.Parts[2].FunctionCall.Args == nil {
		t.Errorf("candidate %+v", c)
	}
	if u := got.UsageMetadata; u == nil || u.PromptTokenCount != 10 || u.CandidatesTokenCount != 5 || u.TotalTokenCount != 15 {
		t.Errorf("usage %+v", u)
	}
}

// streamGenerateContent?alt=sse answers the text in pieces, then the call;
// only the last chunk has finishReason and usage.
func TestStreamGenerateContent(t *testing.T) {
	srv := fakegemini.New(fakegemini.Script(fakegemini.Reply{Text: "hello world", Calls: []fakegemini.FunctionCall{{Name: "ls"}},
		Usage: &fakegemini.Usage{PromptTokens: 7, CandidatesTokens: 3}}))
	defer srv.Close()
	resp := post(t, srv.URL()+"/v1beta/models/fake-model:streamGenerateContent?alt=sse", `{"contents":[{"role":"user","parts":[{"text":"a"}]}]}`)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content-type %q", ct)
	}
	var chunks []response
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "data: ")
		if !ok {
			continue
		}
		var r response
		if err := json.Unmarshal([]byte(data), &r); err != nil {
			t.Fatalf("frame %q: %v", data, err)
		}
		chunks = append(chunks, r)
	}
	if len(chunks) < 3 {
		t.Fatalf("%d chunks, want the text in pieces and a call", len(chunks))
	}
	var text strings.Builder
	for i, c := range chunks {
		last := i == len(chunks)-1
		cand := c.Candidates[0]
		if (cand.FinishReason != "") != last || (c.UsageMetadata != nil) != last {
			t.Errorf("chunk %d: finishReason %q usage %v; want them on the last chunk only", i, cand.FinishReason, c.UsageMetadata)
		}
		for _, p := range cand.Content.Parts {
			if p.Text != nil {
				text.WriteString(*p.Text)
			}
			if p.FunctionCall != nil && (!last || p.FunctionCall.Name != "ls") {
				t.Errorf("chunk %d: call %+v; want ls in the last chunk", i, p.FunctionCall)
			}
		}
	}
	if text.String() != "hello world" {
		t.Errorf("streamed text %q", text.String())
	}
	last := chunks[len(chunks)-1]
	if last.Candidates[0].FinishReason != "STOP" || last.UsageMetadata.TotalTokenCount != 10 {
		t.Errorf("last chunk %+v", last)
	}
	if !srv.Requests()[0].Stream {
		t.Error("a streamGenerateContent request is not recorded as Stream")
	}
}

// countTokens answers a count without calling the handler; an error reply
// and an unknown path answer Gemini-shaped errors.
func TestCountTokensErrorsAndUnknownPaths(t *testing.T) {
	srv := fakegemini.New(fakegemini.Script(fakegemini.Reply{Status: 429, ErrorMessage: "slow down"}))
	defer srv.Close()
	var n struct{ TotalTokens int }
	if err := json.NewDecoder(post(t, srv.URL()+"/v1beta/models/m:countTokens", body).Body).Decode(&n); err != nil || n.TotalTokens <= 0 {
		t.Errorf("countTokens = %+v, %v", n, err)
	}
	if len(srv.Requests()) != 0 {
		t.Error("countTokens was recorded as a content request")
	}
	var e struct {
		Error struct {
			Code            int
			Message, Status string
		}
	}
	resp := post(t, srv.URL()+"/v1beta/models/m:generateContent", body)
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != 429 || e.Error.Code != 429 || e.Error.Message != "slow down" || e.Error.Status != "RESOURCE_EXHAUSTED" {
		t.Errorf("error reply: status %d %+v %v", resp.StatusCode, e, err)
	}
	resp = post(t, srv.URL()+"/v1beta/files", "{}")
	if resp.StatusCode != 404 || strings.Join(srv.Others(), ",") != "POST /v1beta/files" {
		t.Errorf("unknown path: status %d, others %q", resp.StatusCode, srv.Others())
	}
}
