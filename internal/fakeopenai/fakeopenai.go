package fakeopenai

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// Request is the decoded body of one chat request.
type Request struct {
	Model    string
	Messages []Message
	Tools    []Tool
	Stream   bool
	// Header holds the HTTP request headers (for example Authorization).
	Header http.Header
	// Raw is the request body exactly as received.
	Raw json.RawMessage
}

// Message is one chat message of a Request. Content sent as an array of parts
// is flattened: the parts' text concatenated.
type Message struct {
	Role       string
	Content    string
	ToolCalls  []ToolCall
	ToolCallID string
}

// ToolCall is one function call, in an assistant message of a Request or in a
// Reply.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// Tool is a function tool offered in a Request.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage
}

// Reply scripts the answer to one chat request.
type Reply struct {
	// Text is the assistant content; streamed in a few chunks.
	Text string
	// ToolCalls are the function calls the assistant makes. An empty ID
	// becomes "call_<n>_<i>".
	ToolCalls []ToolCall
	// Refusal is the assistant's refusal text.
	Refusal string
	// FinishReason is the wire finish_reason. Empty: "tool_calls" when
	// ToolCalls is set, else "stop".
	FinishReason string
	// Status, when non-zero, answers this HTTP error status instead, with
	// ErrorMessage (empty: the status text).
	Status       int
	ErrorMessage string
	// Delay is waited before answering; a request cancelled meanwhile gets no
	// answer.
	Delay time.Duration
	// ChunkDelay is waited between streamed chunks.
	ChunkDelay time.Duration
	// Truncate, for streamed answers, ends the response cleanly right after
	// the content chunks: no finish_reason, no usage, no [DONE]. It is the
	// shape of a stream cut short by a proxy.
	Truncate bool
	// Usage is reported to the client. Nil: {PromptTokens: 10,
	// CompletionTokens: 5}.
	Usage *Usage
	// StallAfter, when positive, stops a streamed answer after this many
	// frames (the role chunk is the first) without ending it: nothing more
	// is sent until the client goes away. The shape of a stalled server.
	StallAfter int
	// Repeat, when positive, streams Text this many times, each a content
	// chunk of its own, rather than in a few pieces: a long answer (say
	// 100 MB) that the fake never holds whole.
	Repeat int
}

// Usage is the token count reported in a Reply.
type Usage struct {
	PromptTokens, CompletionTokens int64
}

// Handler decides the Reply to the n-th (0-based) chat request on a Server.
type Handler func(n int, req Request) Reply

// Script returns a Handler that answers the n-th request with replies[n], and
// every request after the last with the last reply. With no replies it
// answers an empty text.
func Script(replies ...Reply) Handler {
	return func(n int, _ Request) Reply {
		if len(replies) == 0 {
			return Reply{}
		}
		return replies[min(n, len(replies)-1)]
	}
}

// Server is a running fake. Create it with New and Close it when done.
type Server struct {
	ts *httptest.Server
	h  Handler

	mu     sync.Mutex
	reqs   []Request
	served []time.Duration
}

// New starts a fake server answering chat requests with h. A nil h answers
// every request with an empty text.
func New(h Handler) *Server { return start(h, false) }

// NewTLS is New served over HTTPS with HTTP/2, as hosted APIs are: many
// concurrent calls share one connection. Certificate is what a client
// must trust.
func NewTLS(h Handler) *Server { return start(h, true) }

func start(h Handler, tls bool) *Server {
	if h == nil {
		h = Script()
	}
	s := &Server{h: h}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("POST /chat/completions", s.chat)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /models", s.models)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "unknown endpoint "+r.Method+" "+r.URL.Path)
	})
	if !tls {
		s.ts = httptest.NewServer(mux)
		return s
	}
	s.ts = httptest.NewUnstartedServer(mux)
	s.ts.EnableHTTP2 = true
	s.ts.StartTLS()
	return s
}

// Certificate is the certificate of a server started with NewTLS.
func (s *Server) Certificate() *x509.Certificate { return s.ts.Certificate() }

// URL returns the base URL clients should use, ending in /v1 (for example
// http://127.0.0.1:PORT/v1).
func (s *Server) URL() string { return s.ts.URL + "/v1" }

// Requests returns a copy of every chat request received so far, in order of
// arrival.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.reqs))
	copy(out, s.reqs)
	return out
}

// Served returns, for every chat request answered so far, the time the
// fake spent in its handler (reading the body to writing the last byte):
// the model's own time, which benchmarks subtract from round trips.
func (s *Server) Served() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.served...)
}

// Close shuts the server down, cutting open connections.
func (s *Server) Close() {
	s.ts.CloseClientConnections()
	s.ts.Close()
}

// LastUserText returns the content of the last user message, or "".
func (r Request) LastUserText() string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i].Content
		}
	}
	return ""
}

// HasTool reports whether the request offers a tool with this name.
func (r Request) HasTool(name string) bool {
	for _, t := range r.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// LastToolResult returns the content of the last tool message that comes
// after the last user message, that is, the latest tool result of the current
// turn. ok is false when the turn has no tool result yet.
func (r Request) LastToolResult() (content string, ok bool) {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		switch r.Messages[i].Role {
		case "tool":
			return r.Messages[i].Content, true
		case "user":
			return "", false
		}
	}
	return "", false
}

// wire shapes of the request body.
type wireRequest struct {
	Model         string        `json:"model"`
	Messages      []wireMessage `json:"messages"`
	Tools         []wireTool    `json:"tools"`
	Stream        bool          `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []wireToolCall  `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

type wireToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type wireTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// flattenContent turns a content field (string, null, or array of parts) into
// text.
func flattenContent(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var parts []struct {
		Type    string `json:"type"`
		Text    string `json:"text"`
		Refusal string `json:"refusal"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("content is neither a string nor an array of parts: %w", err)
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
		b.WriteString(p.Refusal)
	}
	return b.String(), nil
}

func decodeRequest(body []byte) (Request, bool, error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return Request{}, false, fmt.Errorf("invalid JSON body: %w", err)
	}
	req := Request{Model: w.Model, Stream: w.Stream, Raw: json.RawMessage(body)}
	for i, m := range w.Messages {
		content, err := flattenContent(m.Content)
		if err != nil {
			return Request{}, false, fmt.Errorf("messages[%d]: %w", i, err)
		}
		msg := Message{Role: m.Role, Content: content, ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		req.Messages = append(req.Messages, msg)
	}
	for _, t := range w.Tools {
		req.Tools = append(req.Tools, Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	includeUsage := w.StreamOptions != nil && w.StreamOptions.IncludeUsage
	return req, includeUsage, nil
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	t0 := time.Now()
	defer func() {
		s.mu.Lock()
		s.served = append(s.served, time.Since(t0))
		s.mu.Unlock()
	}()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "reading body: "+err.Error())
		return
	}
	req, includeUsage, err := decodeRequest(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	req.Header = r.Header.Clone()

	s.mu.Lock()
	n := len(s.reqs)
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()

	reply := s.h(n, req)
	if !sleep(r.Context(), reply.Delay) {
		return
	}
	if reply.Status != 0 {
		msg := reply.ErrorMessage
		if msg == "" {
			msg = http.StatusText(reply.Status)
		}
		writeError(w, reply.Status, msg)
		return
	}

	a := answer{
		id:      fmt.Sprintf("chatcmpl-fake-%d", n),
		created: time.Now().Unix(),
		model:   req.Model,
		reply:   reply,
		calls:   make([]ToolCall, len(reply.ToolCalls)),
	}
	if a.model == "" {
		a.model = "fake-model"
	}
	for i, tc := range reply.ToolCalls {
		if tc.ID == "" {
			tc.ID = fmt.Sprintf("call_%d_%d", n, i)
		}
		a.calls[i] = tc
	}
	a.finish = reply.FinishReason
	if a.finish == "" {
		a.finish = "stop"
		if len(a.calls) > 0 {
			a.finish = "tool_calls"
		}
	}
	a.usage = Usage{PromptTokens: 10, CompletionTokens: 5}
	if reply.Usage != nil {
		a.usage = *reply.Usage
	}

	if req.Stream {
		a.stream(r.Context(), w, includeUsage)
	} else {
		a.complete(w)
	}
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []any{map[string]any{
			"id": "fake-model", "object": "model", "created": 0, "owned_by": "fakeopenai",
		}},
	})
}

// answer is one resolved Reply, ready to write.
type answer struct {
	id      string
	created int64
	model   string
	reply   Reply
	calls   []ToolCall
	finish  string
	usage   Usage
}

func (a *answer) usageJSON() map[string]any {
	return map[string]any{
		"prompt_tokens":     a.usage.PromptTokens,
		"completion_tokens": a.usage.CompletionTokens,
		"total_tokens":      a.usage.PromptTokens + a.usage.CompletionTokens,
	}
}

// nullable returns s, or nil (JSON null) when s is empty.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (a *answer) complete(w http.ResponseWriter) {
	msg := map[string]any{
		"role":    "assistant",
		"content": nullable(a.reply.Text),
		"refusal": nullable(a.reply.Refusal),
	}
	if len(a.calls) > 0 {
		calls := make([]any, len(a.calls))
		for i, tc := range a.calls {
			calls[i] = map[string]any{
				"id":       tc.ID,
				"type":     "function",
				"function": map[string]any{"name": tc.Name, "arguments": tc.Arguments},
			}
		}
		msg["tool_calls"] = calls
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id":      a.id,
		"object":  "chat.completion",
		"created": a.created,
		"model":   a.model,
		"choices": []any{map[string]any{
			"index":         0,
			"message":       msg,
			"finish_reason": a.finish,
			"logprobs":      nil,
		}},
		"usage": a.usageJSON(),
	})
}

func (a *answer) stream(ctx context.Context, w http.ResponseWriter, includeUsage bool) {
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)

	first, sent := true, 0
	send := func(frame []byte) bool {
		if !first && !sleep(ctx, a.reply.ChunkDelay) {
			return false
		}
		first = false
		if a.reply.StallAfter > 0 && sent == a.reply.StallAfter {
			<-ctx.Done()
			return false
		}
		sent++
		if _, err := fmt.Fprintf(w, "data: %s\n\n", frame); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	chunk := func(delta map[string]any, finish any) []byte {
		c := map[string]any{
			"id":                 a.id,
			"object":             "chat.completion.chunk",
			"created":            a.created,
			"model":              a.model,
			"system_fingerprint": "fp_fake",
			"choices": []any{map[string]any{
				"index":         0,
				"delta":         delta,
				"logprobs":      nil,
				"finish_reason": finish,
			}},
		}
		if includeUsage {
			c["usage"] = nil
		}
		b, _ := json.Marshal(c)
		return b
	}

	if !send(chunk(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil)) {
		return
	}
	parts := split(a.reply.Text, 4)
	if a.reply.Repeat > 0 {
		parts = nil
		frame := chunk(map[string]any{"content": a.reply.Text}, nil)
		for range a.reply.Repeat {
			if !send(frame) {
				return
			}
		}
	}
	for _, part := range parts {
		if !send(chunk(map[string]any{"content": part}, nil)) {
			return
		}
	}
	for _, part := range split(a.reply.Refusal, 3) {
		if !send(chunk(map[string]any{"refusal": part}, nil)) {
			return
		}
	}
	for i, tc := range a.calls {
		head := map[string]any{
			"index":    i,
			"id":       tc.ID,
			"type":     "function",
			"function": map[string]any{"name": tc.Name, "arguments": ""},
		}
		if !send(chunk(map[string]any{"tool_calls": []any{head}}, nil)) {
			return
		}
		for _, part := range split(tc.Arguments, 3) {
			piece := map[string]any{"index": i, "function": map[string]any{"arguments": part}}
			if !send(chunk(map[string]any{"tool_calls": []any{piece}}, nil)) {
				return
			}
		}
	}
	if a.reply.Truncate {
		return
	}
	if !send(chunk(map[string]any{}, a.finish)) {
		return
	}
	if includeUsage {
		b, _ := json.Marshal(map[string]any{
			"id":                 a.id,
			"object":             "chat.completion.chunk",
			"created":            a.created,
			"model":              a.model,
			"system_fingerprint": "fp_fake",
			"choices":            []any{},
			"usage":              a.usageJSON(),
		})
		if !send(b) {
			return
		}
	}
	send([]byte("[DONE]"))
}

// split cuts s into at most n non-empty pieces of about equal rune count.
func split(s string, n int) []string {
	runes := []rune(s)
	if len(runes) == 0 {
		return nil
	}
	size := (len(runes) + n - 1) / n
	var out []string
	for len(runes) > 0 {
		k := min(size, len(runes))
		out = append(out, string(runes[:k]))
		runes = runes[k:]
	}
	return out
}

// sleep waits d, returning false if ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers an OpenAI-shaped error.
func writeError(w http.ResponseWriter, status int, message string) {
	typ, code := "invalid_request_error", any(nil)
	switch {
	case status == http.StatusUnauthorized:
		typ, code = "authentication_error", "invalid_api_key"
	case status == http.StatusNotFound:
		code = "not_found"
	case status == http.StatusTooManyRequests:
		typ, code = "rate_limit_error", "rate_limit_exceeded"
	case status >= 500:
		typ, code = "server_error", "server_error"
	}
	writeJSON(w, status, map[string]any{
		"error": map[string]any{"message": message, "type": typ, "param": nil, "code": code},
	})
}
