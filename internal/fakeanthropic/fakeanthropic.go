// Package fakeanthropic is a scriptable fake of the Anthropic Messages API
// as the Claude Code CLI uses it, for tests only.
//
// Point Claude Code at it with ANTHROPIC_BASE_URL=[Server.URL] (no /v1) and
// ANTHROPIC_API_KEY set to anything. It serves:
//
//   - POST /v1/messages (any query, e.g. ?beta=true): streamed (SSE:
//     message_start, content_block_start/delta/stop per block,
//     message_delta, message_stop) or, for "stream": false, one message.
//   - POST /v1/messages/count_tokens: {"input_tokens": N}.
//   - GET and HEAD on any path: 200 with an empty JSON object (the CLI's
//     connectivity probes).
//   - anything else: a 404 in the API's error shape.
//
// A [Handler] decides the answer to each /v1/messages request from the
// decoded [Request]: text, tool_use blocks, any stop_reason (with refusal
// stop_details), usage (cache counts included), an HTTP error in the API's
// shape (429 rate_limit_error, 529 overloaded_error, ...), an `error` event
// in the middle of the stream, a stream cut before message_stop, or a hang
// until the client goes away. [Script] answers requests in order.
//
// Besides the conversation, a Request records what a native client sends
// for caching and effort: every cache_control mark ([Request.CacheMarks]),
// output_config.effort and thinking, and the headers (x-api-key). Every request is recorded before its handler runs;
// [Server.Requests] lists them and [Server.Wait] blocks until one matching a
// predicate has arrived — a signal, not a poll.
//
// The CLI also sends requests of its own beside the agent loop (titles, a
// quota probe, the small fast model); [Request.IsAgentLoop] tells the agent
// loop's requests apart, and a Handler may answer the rest with
// [Generic].
//
// Claude Code 2.1.3xx defers MCP tools' schemas: the request offers a
// ToolSearch tool and names the deferred tools in the system prompt ("The
// following deferred tools are now available via ToolSearch. ... calling
// them directly will fail with InputValidationError"). A model calls
// ToolSearch {"query":"select:NAME"}; its tool_result is a tool_reference
// block, and from the next request on the tool is in "tools" with its
// schema and "defer_loading": true. [Request.Offers] and
// [Request.DeferredTools] tell which step a request is at; [Use] makes
// the right call for it.
//
// A Server is safe for concurrent use; handlers may be called concurrently.
package fakeanthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/record"
)

// Request is one decoded /v1/messages request.
type Request struct {
	// Seq is the request's 0-based index among the messages requests.
	Seq       int
	Path      string
	Model     string
	MaxTokens int
	Stream    bool
	System    []Block
	Messages  []Message
	Tools     []Tool
	Header    http.Header
	// Effort is output_config.effort ("" when absent).
	Effort string
	// Thinking is the thinking parameter as sent (nil when absent).
	Thinking json.RawMessage
	// Raw is the body exactly as received.
	Raw json.RawMessage
}

// Message is one conversation message; string content becomes one text
// block.
type Message struct {
	Role    string
	Content []Block
}

// Block is a content block: text, tool_use, tool_result, tool_reference,
// thinking, image...
type Block struct {
	Type string
	Text string
	// tool_use
	ID    string
	Name  string
	Input json.RawMessage
	// tool_result
	ToolUseID string
	IsError   bool
	Content   []Block
	// tool_reference
	ToolName string
	// CacheControl is the block's cache_control type ("ephemeral"), "" when
	// unmarked.
	CacheControl string
	Raw          json.RawMessage
}

// Tool is a tool offered in a request.
type Tool struct {
	Name         string
	Description  string
	InputSchema  json.RawMessage
	DeferLoading bool
	CacheControl string // cache_control type, "" when unmarked
	Raw          json.RawMessage
}

// ToolResult is a tool_result block of a request, with the tool_use it
// answers.
type ToolResult struct {
	ToolUseID string
	// Name is the tool the matching tool_use called ("" when not found).
	Name string
	// Input is the matching tool_use's input.
	Input json.RawMessage
	// Text is the result's content flattened: a string as is, blocks'
	// texts joined with newlines.
	Text    string
	IsError bool
	// Message is the index of the message that carries it.
	Message int
}

// Reply scripts the answer to one request.
type Reply struct {
	// Text is an assistant text block (before any tool use).
	Text string
	// ToolUses are tool_use blocks; an empty ID becomes toolu_<seq>_<i>.
	ToolUses []ToolUse
	// StopReason overrides the stop reason (default: tool_use when there
	// are ToolUses, else end_turn): max_tokens, refusal, stop_sequence...
	StopReason string
	// Refusal, when set, is the message_delta's stop_details.
	Refusal *Refusal
	// Usage overrides the default counts (25 input, 5 output).
	Usage *Usage
	// Status, when non-zero, answers this HTTP status with an API error
	// carrying ErrorMessage, of ErrorType (default: by status —
	// rate_limit_error for 429, overloaded_error for 529, api_error for
	// other 5xx, invalid_request_error otherwise).
	Status       int
	ErrorMessage string
	ErrorType    string
	// RetryAfter, when set, is sent as the Retry-After header of an error.
	RetryAfter string
	// StreamError, when set, ends the stream after the first content block
	// has begun with an SSE `error` event of this error type (such as
	// "overloaded_error") carrying ErrorMessage.
	StreamError string
	// CutBeforeStop ends a streamed answer after message_delta, without
	// message_stop: a stream broken just before its end.
	CutBeforeStop bool
	// Hang holds the request open, unanswered, until the client goes away.
	Hang bool
	// StallAfter, when positive, stops a streamed answer after this many
	// events (message_start is the first) without ending it: nothing more
	// is sent until the client goes away. The shape of a stalled server.
	StallAfter int
	// HoldOpen keeps a streamed answer's body open after message_stop
	// until the client goes away: a server (or proxy) that never ends it.
	HoldOpen bool
	// Repeat, when positive, streams the text block's text this many
	// times, each a text_delta of its own: a long answer (say 100 MB)
	// that the fake never holds whole.
	Repeat int
	// Delay is waited before answering.
	Delay time.Duration
}

// Refusal is the stop_details of a refusal.
type Refusal struct {
	Category    string // such as "cyber"
	Explanation string
}

// Usage is the token counts of an answer. InputTokens excludes the cache
// counts, as the API reports it.
type Usage struct {
	InputTokens              int
	OutputTokens             int
	CacheCreationInputTokens int
	CacheReadInputTokens     int
}

// ToolUse is one tool call of a Reply.
type ToolUse struct {
	ID    string
	Name  string
	Input any // marshalled to JSON; a json.RawMessage or string is sent as is
}

// Handler decides the Reply to a request.
type Handler func(req Request) Reply

// Script returns a Handler that answers the n-th request (by Seq) with
// replies[n], and every request after the last with the last reply. With
// no replies it answers Generic.
func Script(replies ...Reply) Handler {
	return func(r Request) Reply {
		if len(replies) == 0 {
			return Generic(r)
		}
		return replies[min(r.Seq, len(replies)-1)]
	}
}

// CacheMarks lists where the request put cache_control marks, in request
// order: "tools[i]", "system[i]", "messages[i].content[j]".
func (r Request) CacheMarks() []string {
	var out []string
	for i, t := range r.Tools {
		if t.CacheControl != "" {
			out = append(out, fmt.Sprintf("tools[%d]", i))
		}
	}
	for i, b := range r.System {
		if b.CacheControl != "" {
			out = append(out, fmt.Sprintf("system[%d]", i))
		}
	}
	for i, m := range r.Messages {
		for j, b := range m.Content {
			if b.CacheControl != "" {
				out = append(out, fmt.Sprintf("messages[%d].content[%d]", i, j))
			}
		}
	}
	return out
}

// Generic answers any request with a short text: the answer for the CLI's
// own background requests.
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

// URL is the base URL for ANTHROPIC_BASE_URL (http://127.0.0.1:PORT).
func (s *Server) URL() string { return s.BaseURL() }

// IsAgentLoop reports whether the request comes from the CLI's agent loop
// (it offers tools) rather than one of its background requests.
func (r Request) IsAgentLoop() bool { return len(r.Tools) > 0 }

// ToolNames lists the offered tools' names.
func (r Request) ToolNames() []string {
	var names []string
	for _, t := range r.Tools {
		names = append(names, t.Name)
	}
	return names
}

// Offers reports whether the request offers the tool by name with its
// schema: a built-in tool, or a deferred one that ToolSearch has loaded
// (Claude Code then sends it with its schema and defer_loading). A deferred
// tool not yet loaded is only named in the system prompt.
func (r Request) Offers(name string) bool {
	for _, t := range r.Tools {
		if t.Name == name && len(t.InputSchema) > 0 {
			return true
		}
	}
	return false
}

// deferredHeads open the list of deferred tool names in the system prompt
// or a message (one name a line, up to a blank line), in the wordings of
// Claude Code 2.1.3xx.
var deferredHeads = []string{
	"The following deferred tools are now available via ToolSearch.",
	"<available-deferred-tools>",
}

// DeferredTools lists the tool names the request announces as deferred
// (their schemas load through ToolSearch).
func (r Request) DeferredTools() []string {
	var out []string
	seen := map[string]bool{}
	scan := func(text string) {
		for _, head := range deferredHeads {
			rest := text
			for {
				_, after, ok := strings.Cut(rest, head)
				if !ok {
					break
				}
				lines := strings.Split(after, "\n")
				// The heading's own line may go on after the marker.
				for _, line := range lines[1:] {
					line = strings.TrimSpace(line)
					if line == "" || strings.HasPrefix(line, "</") {
						break
					}
					if !strings.ContainsAny(line, " \t") && !seen[line] {
						seen[line] = true
						out = append(out, line)
					}
				}
				rest = after
			}
		}
	}
	for _, b := range r.System {
		scan(b.Text)
	}
	for _, m := range r.Messages {
		for _, b := range m.Content {
			scan(b.Text)
		}
	}
	return out
}

// SelectTool is the ToolSearch call that loads one deferred tool's schema.
func SelectTool(name string) ToolUse {
	return ToolUse{Name: "ToolSearch", Input: map[string]any{"query": "select:" + name, "max_results": 1}}
}

// Use is what a model does to call the tool name with input: the call
// itself when the request offers the tool, otherwise first the ToolSearch
// call that loads it — unless the last ToolSearch for it loaded nothing,
// in which case the call is made anyway and the CLI's error reaches the
// model (and the test's recordings).
func Use(r Request, name string, input any) ToolUse {
	if r.Offers(name) {
		return ToolUse{Name: name, Input: input}
	}
	for _, tr := range r.LastToolResults() {
		if tr.Name == "ToolSearch" && strings.Contains(string(tr.Input), name) {
			return ToolUse{Name: name, Input: input}
		}
	}
	return SelectTool(name)
}

// Text joins every text block of the conversation (tool results' texts
// included).
func (r Request) Text() string {
	var b strings.Builder
	var walk func([]Block)
	walk = func(bs []Block) {
		for _, bl := range bs {
			if bl.Text != "" {
				b.WriteString(bl.Text)
				b.WriteByte('\n')
			}
			walk(bl.Content)
		}
	}
	for _, m := range r.Messages {
		walk(m.Content)
	}
	return b.String()
}

// UserTexts lists the text blocks of user messages that are not tool
// results, in order.
func (r Request) UserTexts() []string {
	var out []string
	for _, m := range r.Messages {
		if m.Role != "user" {
			continue
		}
		for _, b := range m.Content {
			if b.Type == "text" {
				out = append(out, b.Text)
			}
		}
	}
	return out
}

// ToolResults lists every tool_result in the conversation, in order.
func (r Request) ToolResults() []ToolResult {
	uses := map[string]Block{}
	var out []ToolResult
	for i, m := range r.Messages {
		for _, b := range m.Content {
			switch b.Type {
			case "tool_use", "server_tool_use":
				uses[b.ID] = b
			case "tool_result":
				u := uses[b.ToolUseID]
				out = append(out, ToolResult{ToolUseID: b.ToolUseID, Name: u.Name, Input: u.Input,
					Text: flatten(b.Content), IsError: b.IsError, Message: i})
			}
		}
	}
	return out
}

// LastToolResults lists the tool results the last message carries: what the
// model is answering now. Empty when the last message is not a tool result.
func (r Request) LastToolResults() []ToolResult {
	var out []ToolResult
	for _, tr := range r.ToolResults() {
		if tr.Message == len(r.Messages)-1 {
			out = append(out, tr)
		}
	}
	return out
}

// ResultsOf lists the tool results of calls to the named tool.
func (r Request) ResultsOf(name string) []ToolResult {
	var out []ToolResult
	for _, tr := range r.ToolResults() {
		if tr.Name == name {
			out = append(out, tr)
		}
	}
	return out
}

func flatten(bs []Block) string {
	var parts []string
	for _, b := range bs {
		switch {
		case b.Text != "":
			parts = append(parts, b.Text)
		case b.Type == "tool_reference":
			parts = append(parts, "tool_reference:"+b.ToolName)
		}
	}
	return strings.Join(parts, "\n")
}

// wire shapes

type wireRequest struct {
	Model     string          `json:"model"`
	MaxTokens int             `json:"max_tokens"`
	Stream    bool            `json:"stream"`
	System    json.RawMessage `json:"system"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools        []json.RawMessage `json:"tools"`
	OutputConfig struct {
		Effort string `json:"effort"`
	} `json:"output_config"`
	Thinking json.RawMessage `json:"thinking"`
}

type wireCacheControl struct {
	Type string `json:"type"`
}

type wireBlock struct {
	Type      string            `json:"type"`
	Text      string            `json:"text"`
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	Input     json.RawMessage   `json:"input"`
	ToolUseID string            `json:"tool_use_id"`
	IsError   bool              `json:"is_error"`
	Content   json.RawMessage   `json:"content"`
	ToolName  string            `json:"tool_name"`
	Cache     *wireCacheControl `json:"cache_control"`
}

// blocks decodes content: a string, null, or an array of blocks.
func blocks(raw json.RawMessage) ([]Block, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		return []Block{{Type: "text", Text: s}}, nil
	}
	var ws []json.RawMessage
	if err := json.Unmarshal(raw, &ws); err != nil {
		return nil, fmt.Errorf("content is neither a string nor blocks: %w", err)
	}
	out := make([]Block, 0, len(ws))
	for _, w := range ws {
		var wb wireBlock
		if err := json.Unmarshal(w, &wb); err != nil {
			return nil, err
		}
		b := Block{Type: wb.Type, Text: wb.Text, ID: wb.ID, Name: wb.Name, Input: wb.Input,
			ToolUseID: wb.ToolUseID, IsError: wb.IsError, ToolName: wb.ToolName, Raw: w}
		if wb.Cache != nil {
			b.CacheControl = wb.Cache.Type
		}
		if len(wb.Content) > 0 {
			inner, err := blocks(wb.Content)
			if err != nil {
				return nil, err
			}
			b.Content = inner
		}
		out = append(out, b)
	}
	return out, nil
}

func decode(body []byte) (Request, error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return Request{}, fmt.Errorf("invalid JSON body: %w", err)
	}
	req := Request{Model: w.Model, MaxTokens: w.MaxTokens, Stream: w.Stream, Raw: json.RawMessage(body),
		Effort: w.OutputConfig.Effort, Thinking: w.Thinking}
	var err error
	if req.System, err = blocks(w.System); err != nil {
		return Request{}, fmt.Errorf("system: %w", err)
	}
	for i, m := range w.Messages {
		content, err := blocks(m.Content)
		if err != nil {
			return Request{}, fmt.Errorf("messages[%d]: %w", i, err)
		}
		req.Messages = append(req.Messages, Message{Role: m.Role, Content: content})
	}
	for _, raw := range w.Tools {
		var t struct {
			Name         string            `json:"name"`
			Description  string            `json:"description"`
			InputSchema  json.RawMessage   `json:"input_schema"`
			DeferLoading bool              `json:"defer_loading"`
			Cache        *wireCacheControl `json:"cache_control"`
		}
		if err := json.Unmarshal(raw, &t); err != nil {
			return Request{}, fmt.Errorf("tools: %w", err)
		}
		tool := Tool{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema,
			DeferLoading: t.DeferLoading, Raw: raw}
		if t.Cache != nil {
			tool.CacheControl = t.Cache.Type
		}
		req.Tools = append(req.Tools, tool)
	}
	return req, nil
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	path := r.URL.Path
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		s.other(r)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
		return
	}
	if strings.HasSuffix(path, "/v1/messages/count_tokens") {
		s.other(r)
		writeJSON(w, http.StatusOK, map[string]any{"input_tokens": 1 + len(body)/4})
		return
	}
	if r.Method != http.MethodPost || !strings.HasSuffix(path, "/v1/messages") {
		s.other(r)
		writeError(w, http.StatusNotFound, "not_found_error", "no such endpoint: "+r.Method+" "+path)
		return
	}
	req, err := decode(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	req.Path, req.Header = path, r.Header.Clone()
	s.Record(func(seq int) Request { req.Seq = seq; return req })

	rep := s.h(req)
	if rep.Hang {
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
		if rep.RetryAfter != "" {
			w.Header().Set("Retry-After", rep.RetryAfter)
		}
		writeError(w, rep.Status, rep.errorType(), msg)
		return
	}
	content, stop := rep.content(req.Seq)
	model := req.Model
	if model == "" {
		model = "fake"
	}
	id := fmt.Sprintf("msg_fake_%d", req.Seq)
	usage := Usage{InputTokens: 25, OutputTokens: 5}
	if rep.Usage != nil {
		usage = *rep.Usage
	}
	inUsage := map[string]any{"input_tokens": usage.InputTokens, "output_tokens": 1,
		"cache_creation_input_tokens": usage.CacheCreationInputTokens, "cache_read_input_tokens": usage.CacheReadInputTokens}
	var details any
	if rep.Refusal != nil {
		details = map[string]any{"type": "refusal", "category": rep.Refusal.Category, "explanation": rep.Refusal.Explanation}
	}
	if !req.Stream {
		u := maps.Clone(inUsage)
		u["output_tokens"] = usage.OutputTokens
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "type": "message", "role": "assistant", "model": model,
			"content": content, "stop_reason": stop, "stop_sequence": nil, "stop_details": details, "usage": u})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	sent := 0
	ev := func(name string, v map[string]any) {
		if rep.StallAfter > 0 && sent == rep.StallAfter {
			<-r.Context().Done()
			panic(http.ErrAbortHandler) // the client left: end the handler, silently
		}
		sent++
		v["type"] = name
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	ev("message_start", map[string]any{"message": map[string]any{"id": id, "type": "message", "role": "assistant", "model": model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": inUsage}})
	for i, c := range content {
		switch c["type"] {
		case "text":
			ev("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			for range max(rep.Repeat, 1) {
				ev("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "text_delta", "text": c["text"]}})
			}
		case "tool_use":
			ev("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "tool_use", "id": c["id"], "name": c["name"], "input": map[string]any{}}})
			ev("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(c["input"].(json.RawMessage))}})
		}
		if rep.StreamError != "" {
			msg := rep.ErrorMessage
			if msg == "" {
				msg = "Overloaded"
			}
			ev("error", map[string]any{"error": map[string]any{"type": rep.StreamError, "message": msg}})
			return
		}
		ev("content_block_stop", map[string]any{"index": i})
	}
	delta := map[string]any{"stop_reason": stop, "stop_sequence": nil}
	if details != nil {
		delta["stop_details"] = details
	}
	ev("message_delta", map[string]any{"delta": delta, "usage": map[string]any{"output_tokens": usage.OutputTokens}})
	if rep.CutBeforeStop {
		return
	}
	ev("message_stop", map[string]any{})
	if rep.HoldOpen {
		<-r.Context().Done()
	}
}

// errorType is the API error type of an HTTP error Reply.
func (rep Reply) errorType() string {
	switch {
	case rep.ErrorType != "":
		return rep.ErrorType
	case rep.Status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case rep.Status == 529:
		return "overloaded_error"
	case rep.Status == http.StatusUnauthorized:
		return "authentication_error"
	case rep.Status >= 500:
		return "api_error"
	}
	return "invalid_request_error"
}

// content renders a Reply's blocks and stop reason.
func (rep Reply) content(seq int) ([]map[string]any, string) {
	var out []map[string]any
	if rep.Text != "" || len(rep.ToolUses) == 0 {
		out = append(out, map[string]any{"type": "text", "text": rep.Text})
	}
	for i, u := range rep.ToolUses {
		id := u.ID
		if id == "" {
			id = fmt.Sprintf("toolu_%d_%d", seq, i)
		}
		var input json.RawMessage
		switch v := u.Input.(type) {
		case nil:
			input = json.RawMessage(`{}`)
		case json.RawMessage:
			input = v
		case string:
			input = json.RawMessage(v)
		default:
			input, _ = json.Marshal(v)
		}
		out = append(out, map[string]any{"type": "tool_use", "id": id, "name": u.Name, "input": input})
	}
	stop := rep.StopReason
	if stop == "" {
		stop = "end_turn"
		if len(rep.ToolUses) > 0 {
			stop = "tool_use"
		}
	}
	return out, stop
}

func (s *Server) other(r *http.Request) {
	s.RecordOther(r)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, typ, message string) {
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": message}})
}
