// Package fakeresponses is a scriptable fake of the OpenAI Responses API as
// the Codex CLI uses it, for tests only.
//
// Point Codex at it with a custom model provider in $CODEX_HOME/config.toml
// (see [Server.ProviderTOML]); Codex POSTs {base_url}/responses with
// "stream": true and resends the whole history every time. It serves:
//
//   - POST /v1/responses (and /responses): SSE frames response.created,
//     response.output_item.added and .done per output item, and
//     response.completed with usage.
//   - GET /v1/models (and /models): an empty list.
//   - anything else: an empty JSON object, recorded in [Server.Others].
//
// A [Handler] decides the answer to each request from the decoded
// [Request]: assistant text, function calls, an HTTP error, or a hang until
// the client goes away. Every request is recorded before its handler runs;
// [Server.Requests] lists them and [Server.Wait] blocks until one matching a
// predicate has arrived.
//
// Codex sends requests of its own beside the agent turn (titles, memory);
// [Request.IsAgentTurn] tells the turn's requests apart.
//
// Codex 0.17x puts each MCP server's tools in a namespace tool
// ({"type":"namespace","name":"mcp__subagent","tools":[...]}): a call
// names the namespace and the tool separately ("namespace":
// "mcp__subagent", "name": "subagent"). The output the model then
// receives is "Wall time: ... seconds\nOutput:\n<JSON of the MCP result's
// structuredContent>". [Request.FindTool] resolves
// a tool by its MCP name and [Request.Call] builds a call to it.
//
// A Server is safe for concurrent use; handlers may be called concurrently.
package fakeresponses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/record"
)

// Request is one decoded POST /v1/responses.
type Request struct {
	// Seq is the request's 0-based index.
	Seq          int
	Model        string
	Instructions string
	Input        []Item
	Tools        []Tool
	Stream       bool
	Header       http.Header
	// Raw is the body exactly as received.
	Raw json.RawMessage
}

// Item is one input item: a message, a function call, its output,
// reasoning...
type Item struct {
	Type string
	Role string
	// Text joins a message's text parts (input_text, output_text, text).
	Text string
	// function_call
	Name      string
	Namespace string
	Arguments string
	CallID    string
	// function_call_output: Output flattened to text.
	Output string
	Raw    json.RawMessage
}

// Tool is an offered tool; a namespace holds its own Tools.
type Tool struct {
	Type        string
	Name        string
	Description string
	Parameters  json.RawMessage
	Tools       []Tool
	Raw         json.RawMessage
}

// FunctionOutput is a function_call_output with the call it answers.
type FunctionOutput struct {
	CallID    string
	Name      string // the call's tool name ("" when not found)
	Namespace string
	Arguments string
	Output    string
	// Index is the item's position in Input.
	Index int
}

// Reply scripts the answer to one request.
type Reply struct {
	// Text is an assistant message (before any call).
	Text string
	// Calls are function calls; an empty CallID becomes call_<seq>_<i>.
	Calls []Call
	// Status, when non-zero, answers this HTTP status with ErrorMessage.
	Status       int
	ErrorMessage string
	// Hang holds the request open, unanswered, until the client goes away.
	Hang bool
	// Delay is waited before answering.
	Delay time.Duration
}

// Call is one function call of a Reply.
type Call struct {
	Name      string
	Namespace string // the namespace tool's name, for namespaced tools
	Arguments any    // marshalled; a string or json.RawMessage is sent as is
	CallID    string
}

// Handler decides the Reply to a request.
type Handler func(req Request) Reply

// Generic answers with a short text.
func Generic(Request) Reply { return Reply{Text: "ok"} }

// Server is a running fake. Create it with New; Close it when done.
type Server struct {
	record.Server[Request]
	h Handler
}

// New starts a fake answering with h (nil: Generic).
func New(h Handler) *Server {
	if h == nil {
		h = Generic
	}
	s := &Server{h: h}
	s.Serve(http.HandlerFunc(s.serve))
	return s
}

// URL is the provider base URL, ending in /v1.
func (s *Server) URL() string { return s.BaseURL() + "/v1" }

// ProviderTOML is the config.toml text that makes Codex use this fake as
// its model provider "fake" with model "fake-model"; the API key is read
// from the environment variable envKey, which must be non-empty.
func (s *Server) ProviderTOML(envKey string) string {
	return fmt.Sprintf(`model = "fake-model"
model_provider = "fake"

[model_providers.fake]
name = "fake"
base_url = %q
env_key = %q
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
`, s.URL(), envKey)
}

// IsAgentTurn reports whether the request belongs to an agent turn (it
// offers tools) rather than one of Codex's background requests.
func (r Request) IsAgentTurn() bool { return len(r.Tools) > 0 }

// ToolNames lists the offered tools, namespaced ones as "namespace.name".
func (r Request) ToolNames() []string {
	var names []string
	var walk func([]Tool, string)
	walk = func(ts []Tool, prefix string) {
		for _, t := range ts {
			if t.Type == "namespace" || len(t.Tools) > 0 {
				walk(t.Tools, prefix+t.Name+".")
				continue
			}
			n := t.Name
			if n == "" {
				n = t.Type
			}
			names = append(names, prefix+n)
		}
	}
	walk(r.Tools, "")
	return names
}

// FindTool finds an MCP tool by server and tool name, as Codex names it
// (flat "mcp__server__tool", or "tool" inside the namespace
// "mcp__server__"), and returns the Call to make with args.
func (r Request) FindTool(server, tool string) (Call, bool) {
	flat := "mcp__" + server + "__" + tool
	for _, t := range r.Tools {
		if len(t.Tools) > 0 || t.Type == "namespace" {
			if t.Name != "mcp__"+server && t.Name != "mcp__"+server+"__" && t.Name != server {
				continue
			}
			for _, sub := range t.Tools {
				if sub.Name == tool || sub.Name == flat {
					return Call{Namespace: t.Name, Name: sub.Name}, true
				}
			}
			continue
		}
		if t.Name == flat || t.Name == server+"__"+tool || t.Name == server+"."+tool {
			return Call{Name: t.Name}, true
		}
	}
	return Call{}, false
}

// Call builds a call to an MCP tool the request offers; ok is false when
// it offers no such tool.
func (r Request) Call(server, tool string, args any) (Call, bool) {
	c, ok := r.FindTool(server, tool)
	c.Arguments = args
	return c, ok
}

// UserTexts lists the texts of user messages, in order.
func (r Request) UserTexts() []string {
	var out []string
	for _, it := range r.Input {
		if it.Type == "message" && it.Role == "user" {
			out = append(out, it.Text)
		}
	}
	return out
}

// LastUserText is the text of the last user message.
func (r Request) LastUserText() string {
	u := r.UserTexts()
	if len(u) == 0 {
		return ""
	}
	return u[len(u)-1]
}

// Text joins every message text and function output of the input.
func (r Request) Text() string {
	var b strings.Builder
	for _, it := range r.Input {
		for _, s := range []string{it.Text, it.Output} {
			if s != "" {
				b.WriteString(s)
				b.WriteByte('\n')
			}
		}
	}
	return b.String()
}

// Outputs lists every function_call_output, with the call it answers.
func (r Request) Outputs() []FunctionOutput {
	calls := map[string]Item{}
	var out []FunctionOutput
	for i, it := range r.Input {
		switch it.Type {
		case "function_call", "custom_tool_call":
			calls[it.CallID] = it
		case "function_call_output", "custom_tool_call_output":
			c := calls[it.CallID]
			out = append(out, FunctionOutput{CallID: it.CallID, Name: c.Name, Namespace: c.Namespace,
				Arguments: c.Arguments, Output: it.Output, Index: i})
		}
	}
	return out
}

// LastOutputs lists the function outputs after the input's last
// non-output item: what the model answers now.
func (r Request) LastOutputs() []FunctionOutput {
	all := r.Outputs()
	var out []FunctionOutput
	for i := len(all) - 1; i >= 0; i-- {
		o := all[i]
		tail := true
		for _, it := range r.Input[o.Index+1:] {
			if it.Type != "function_call_output" && it.Type != "function_call" && it.Type != "reasoning" {
				tail = false
				break
			}
		}
		if !tail {
			break
		}
		out = append([]FunctionOutput{o}, out...)
	}
	return out
}

// OutputsOf lists the outputs of calls to a tool (its bare or flat name).
func (r Request) OutputsOf(tool string) []FunctionOutput {
	var out []FunctionOutput
	for _, o := range r.Outputs() {
		if o.Name == tool || strings.HasSuffix(o.Name, "__"+tool) {
			out = append(out, o)
		}
	}
	return out
}

// wire shapes

type wireRequest struct {
	Model        string            `json:"model"`
	Instructions string            `json:"instructions"`
	Input        json.RawMessage   `json:"input"`
	Tools        []json.RawMessage `json:"tools"`
	Stream       bool              `json:"stream"`
}

type wireItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Name      string          `json:"name"`
	Namespace string          `json:"namespace"`
	Arguments string          `json:"arguments"`
	Input     string          `json:"input"`
	CallID    string          `json:"call_id"`
	Output    json.RawMessage `json:"output"`
}

// texts flattens content or output: a string, or parts with text.
func texts(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return ""
	}
	if raw[0] == '"' {
		var s string
		_ = json.Unmarshal(raw, &s)
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return string(raw)
	}
	var out []string
	for _, p := range parts {
		if p.Text != "" {
			out = append(out, p.Text)
		}
	}
	return strings.Join(out, "\n")
}

func decodeTool(raw json.RawMessage) (Tool, error) {
	var w struct {
		Type        string            `json:"type"`
		Name        string            `json:"name"`
		Description string            `json:"description"`
		Parameters  json.RawMessage   `json:"parameters"`
		Tools       []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return Tool{}, err
	}
	t := Tool{Type: w.Type, Name: w.Name, Description: w.Description, Parameters: w.Parameters, Raw: raw}
	for _, sub := range w.Tools {
		st, err := decodeTool(sub)
		if err != nil {
			return Tool{}, err
		}
		t.Tools = append(t.Tools, st)
	}
	return t, nil
}

func decode(body []byte) (Request, error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return Request{}, fmt.Errorf("invalid JSON body: %w", err)
	}
	req := Request{Model: w.Model, Instructions: w.Instructions, Stream: w.Stream, Raw: json.RawMessage(body)}
	var items []json.RawMessage
	if in := bytes.TrimSpace(w.Input); len(in) > 0 && in[0] == '"' {
		var s string
		_ = json.Unmarshal(in, &s)
		req.Input = []Item{{Type: "message", Role: "user", Text: s, Raw: in}}
	} else if len(in) > 0 {
		if err := json.Unmarshal(in, &items); err != nil {
			return Request{}, fmt.Errorf("input: %w", err)
		}
	}
	for _, raw := range items {
		var wi wireItem
		if err := json.Unmarshal(raw, &wi); err != nil {
			return Request{}, fmt.Errorf("input item: %w", err)
		}
		if wi.Type == "" && wi.Role != "" {
			wi.Type = "message"
		}
		args := wi.Arguments
		if args == "" {
			args = wi.Input
		}
		req.Input = append(req.Input, Item{Type: wi.Type, Role: wi.Role, Text: texts(wi.Content), Name: wi.Name,
			Namespace: wi.Namespace, Arguments: args, CallID: wi.CallID, Output: texts(wi.Output), Raw: raw})
	}
	for _, raw := range w.Tools {
		t, err := decodeTool(raw)
		if err != nil {
			return Request{}, fmt.Errorf("tools: %w", err)
		}
		req.Tools = append(req.Tools, t)
	}
	return req, nil
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.Method != http.MethodPost || (r.URL.Path != "/v1/responses" && r.URL.Path != "/responses") {
		s.RecordOther(r)
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/models") {
			_, _ = w.Write([]byte(`{"object":"list","data":[]}`))
			return
		}
		_, _ = w.Write([]byte(`{}`))
		return
	}
	req, err := decode(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	req.Header = r.Header.Clone()
	s.Record(func(seq int) Request { req.Seq = seq; return req })

	rep := s.h(req)
	if rep.Hang {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		<-r.Context().Done()
		return
	}
	if rep.Delay > 0 {
		t := time.NewTimer(rep.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if rep.Status != 0 {
		msg := rep.ErrorMessage
		if msg == "" {
			msg = http.StatusText(rep.Status)
		}
		writeError(w, rep.Status, msg)
		return
	}
	id := fmt.Sprintf("resp_%d", req.Seq)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	send := func(typ string, v map[string]any) {
		v["type"] = typ
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	send("response.created", map[string]any{"response": map[string]any{"id": id}})
	for i, item := range rep.items(req.Seq) {
		send("response.output_item.added", map[string]any{"output_index": i, "item": item})
		send("response.output_item.done", map[string]any{"output_index": i, "item": item})
	}
	send("response.completed", map[string]any{"response": map[string]any{"id": id,
		"usage": map[string]any{"input_tokens": 50, "output_tokens": 5, "total_tokens": 55}}})
}

func (rep Reply) items(seq int) []map[string]any {
	var out []map[string]any
	if rep.Text != "" || len(rep.Calls) == 0 {
		out = append(out, map[string]any{"type": "message", "role": "assistant", "id": fmt.Sprintf("msg_%d", seq),
			"status": "completed", "content": []any{map[string]any{"type": "output_text", "text": rep.Text, "annotations": []any{}}}})
	}
	for i, c := range rep.Calls {
		id := c.CallID
		if id == "" {
			id = fmt.Sprintf("call_%d_%d", seq, i)
		}
		var args string
		switch v := c.Arguments.(type) {
		case nil:
			args = "{}"
		case string:
			args = v
		case json.RawMessage:
			args = string(v)
		default:
			b, _ := json.Marshal(v)
			args = string(b)
		}
		item := map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_%d_%d", seq, i), "status": "completed",
			"name": c.Name, "arguments": args, "call_id": id}
		if c.Namespace != "" {
			item["namespace"] = c.Namespace
		}
		out = append(out, item)
	}
	return out
}

func writeError(w http.ResponseWriter, status int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	typ := "invalid_request_error"
	if status >= 500 {
		typ = "server_error"
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": message, "type": typ}})
}
