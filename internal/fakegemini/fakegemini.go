// Package fakegemini is a scriptable fake of the Gemini API
// (generativelanguage.googleapis.com) as gemini-cli uses it, for tests
// only.
//
// Point gemini-cli at it with GOOGLE_GEMINI_BASE_URL=[Server.URL] and
// GEMINI_API_KEY set to anything (plain http is allowed for 127.0.0.1
// only). It serves:
//
//   - POST /v1beta/models/{model}:generateContent: one
//     GenerateContentResponse.
//   - POST /v1beta/models/{model}:streamGenerateContent?alt=sse: the same
//     answer as server-sent events, "data: {GenerateContentResponse}" per
//     chunk: the text in a few chunks, then the function calls, the last
//     chunk carrying finishReason STOP and usageMetadata.
//   - POST /v1beta/models/{model}:countTokens: {"totalTokens": N}, about a
//     token per four bytes of the body.
//   - anything else: 404 with a Gemini-shaped error, recorded in
//     [Server.Others].
//
// /v1 works as /v1beta does. A request is contents[].parts[] (text,
// functionCall, functionResponse), tools[].functionDeclarations[] and a
// systemInstruction; the key arrives in the x-goog-api-key header.
//
// A [Handler] decides the answer to each generateContent or
// streamGenerateContent request from its 0-based index and the decoded
// [Request]. Every such request is recorded before its handler runs, so
// [Server.Requests] shows what the client sent, including requests whose
// answer was an error.
//
// A Server is safe for concurrent use; handlers may be called concurrently.
package fakegemini

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// Request is one decoded generateContent or streamGenerateContent body.
type Request struct {
	// Model is the model named in the path ("fake-model").
	Model string
	// Stream is true for streamGenerateContent.
	Stream bool
	// System joins the text parts of systemInstruction.
	System   string
	Contents []Content
	Tools    []Tool
	// Header holds the HTTP request headers (x-goog-api-key among them).
	Header http.Header
	// Raw is the body exactly as received.
	Raw json.RawMessage
}

// Content is one turn of the conversation: role "user" or "model".
type Content struct {
	Role  string
	Parts []Part
}

// Part is one part of a Content; exactly one of its fields is set, except
// Thought, which marks a text part as the model's thinking.
type Part struct {
	Text             string
	Thought          bool
	FunctionCall     *FunctionCall
	FunctionResponse *FunctionResponse
}

// FunctionCall is a call the model made (in a request's history) or makes
// (in a Reply).
type FunctionCall struct {
	// ID is optional; clients make their own when it is empty.
	ID   string
	Name string
	// Args is the JSON object of arguments. In a Reply, nil means {}.
	Args json.RawMessage
}

// FunctionResponse is what the client sent back for a call.
type FunctionResponse struct {
	ID       string
	Name     string
	Response json.RawMessage
}

// Tool is one function declaration offered in a request. Parameters is
// parametersJsonSchema when the client sent that, else parameters.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage
}

// Reply scripts the answer to one request.
type Reply struct {
	// Text is the model's text; streamed in a few chunks.
	Text string
	// Calls are the function calls the model makes.
	Calls []FunctionCall
	// FinishReason is the wire finishReason. Empty: STOP.
	FinishReason string
	// Status, when non-zero, answers this HTTP error status instead, with
	// ErrorMessage (empty: the status text).
	Status       int
	ErrorMessage string
	// Usage is reported to the client. Nil: 10 prompt and 5 candidate
	// tokens.
	Usage *Usage
}

// Usage is the token count reported in a Reply.
type Usage struct {
	PromptTokens, CandidatesTokens int64
}

// Handler decides the Reply to the n-th (0-based) content request.
type Handler func(n int, req Request) Reply

// Script returns a Handler that answers the n-th request with replies[n],
// and every request after the last with the last reply. With no replies
// it answers an empty text.
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
	others []string
}

// New starts a fake answering content requests with h. A nil h answers
// every request with an empty text.
func New(h Handler) *Server {
	if h == nil {
		h = Script()
	}
	s := &Server{h: h}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1beta/models/{call}", s.models)
	mux.HandleFunc("POST /v1/models/{call}", s.models)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.other(r)
		writeError(w, http.StatusNotFound, "unknown endpoint "+r.Method+" "+r.URL.Path)
	})
	s.ts = httptest.NewServer(mux)
	return s
}

// URL is the base URL for GOOGLE_GEMINI_BASE_URL: http://127.0.0.1:PORT,
// without /v1beta (the client adds it).
func (s *Server) URL() string { return s.ts.URL }

// Close shuts the server down, cutting open connections.
func (s *Server) Close() {
	s.ts.CloseClientConnections()
	s.ts.Close()
}

// Requests returns a copy of every content request received so far, in
// order of arrival.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Others lists the requests ("METHOD /path") that were not content or
// countTokens requests.
func (s *Server) Others() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.others...)
}

func (s *Server) other(r *http.Request) {
	s.mu.Lock()
	s.others = append(s.others, r.Method+" "+r.URL.Path)
	s.mu.Unlock()
}

// ToolNames lists the names of the functions the request offers.
func (r Request) ToolNames() []string {
	out := make([]string, len(r.Tools))
	for i, t := range r.Tools {
		out[i] = t.Name
	}
	return out
}

// HasTool reports whether the request offers a function with this name.
func (r Request) HasTool(name string) bool {
	for _, t := range r.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// Texts joins the non-thought text parts of a content.
func (c Content) Texts() string {
	var b strings.Builder
	for _, p := range c.Parts {
		if !p.Thought {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// UserTexts lists the text of every user content that has text (function
// responses travel in user contents too; those without text are left out).
func (r Request) UserTexts() []string {
	var out []string
	for _, c := range r.Contents {
		if c.Role == "user" {
			if t := c.Texts(); t != "" {
				out = append(out, t)
			}
		}
	}
	return out
}

// LastUserText is the text of the newest user content that has text, or
// "".
func (r Request) LastUserText() string {
	ts := r.UserTexts()
	if len(ts) == 0 {
		return ""
	}
	return ts[len(ts)-1]
}

// FunctionResponses lists every function response in the conversation, in
// order.
func (r Request) FunctionResponses() []FunctionResponse {
	var out []FunctionResponse
	for _, c := range r.Contents {
		for _, p := range c.Parts {
			if p.FunctionResponse != nil {
				out = append(out, *p.FunctionResponse)
			}
		}
	}
	return out
}

// ---- wire ----

type wirePart struct {
	Text         string `json:"text,omitempty"`
	Thought      bool   `json:"thought,omitempty"`
	FunctionCall *struct {
		ID   string          `json:"id,omitempty"`
		Name string          `json:"name"`
		Args json.RawMessage `json:"args,omitempty"`
	} `json:"functionCall,omitempty"`
	FunctionResponse *struct {
		ID       string          `json:"id,omitempty"`
		Name     string          `json:"name"`
		Response json.RawMessage `json:"response,omitempty"`
	} `json:"functionResponse,omitempty"`
}

type wireContent struct {
	Role  string     `json:"role"`
	Parts []wirePart `json:"parts"`
}

type wireRequest struct {
	Contents          []wireContent `json:"contents"`
	SystemInstruction *wireContent  `json:"systemInstruction"`
	Tools             []struct {
		FunctionDeclarations []struct {
			Name                 string          `json:"name"`
			Description          string          `json:"description"`
			Parameters           json.RawMessage `json:"parameters"`
			ParametersJSONSchema json.RawMessage `json:"parametersJsonSchema"`
		} `json:"functionDeclarations"`
	} `json:"tools"`
}

func decodeParts(ws []wirePart) []Part {
	out := make([]Part, 0, len(ws))
	for _, w := range ws {
		p := Part{Text: w.Text, Thought: w.Thought}
		if fc := w.FunctionCall; fc != nil {
			p.FunctionCall = &FunctionCall{ID: fc.ID, Name: fc.Name, Args: fc.Args}
		}
		if fr := w.FunctionResponse; fr != nil {
			p.FunctionResponse = &FunctionResponse{ID: fr.ID, Name: fr.Name, Response: fr.Response}
		}
		out = append(out, p)
	}
	return out
}

func decode(body []byte) (Request, error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return Request{}, fmt.Errorf("invalid JSON body: %w", err)
	}
	req := Request{Raw: json.RawMessage(body)}
	if si := w.SystemInstruction; si != nil {
		req.System = Content{Parts: decodeParts(si.Parts)}.Texts()
	}
	for _, c := range w.Contents {
		req.Contents = append(req.Contents, Content{Role: c.Role, Parts: decodeParts(c.Parts)})
	}
	for _, t := range w.Tools {
		for _, d := range t.FunctionDeclarations {
			params := d.ParametersJSONSchema
			if len(params) == 0 {
				params = d.Parameters
			}
			req.Tools = append(req.Tools, Tool{Name: d.Name, Description: d.Description, Parameters: params})
		}
	}
	return req, nil
}

// models serves /v1beta/models/{model}:{method}.
func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	model, method, ok := strings.Cut(r.PathValue("call"), ":")
	if !ok {
		s.other(r)
		writeError(w, http.StatusNotFound, "no method in "+r.URL.Path+": want models/{model}:generateContent")
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "reading body: "+err.Error())
		return
	}
	switch method {
	case "countTokens":
		writeJSON(w, http.StatusOK, map[string]any{"totalTokens": max(1, len(body)/4)})
		return
	case "generateContent", "streamGenerateContent":
	default:
		s.other(r)
		writeError(w, http.StatusNotFound, "unknown method "+method)
		return
	}
	req, err := decode(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	req.Model, req.Stream, req.Header = model, method == "streamGenerateContent", r.Header.Clone()

	s.mu.Lock()
	n := len(s.reqs)
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()

	reply := s.h(n, req)
	if reply.Status != 0 {
		msg := reply.ErrorMessage
		if msg == "" {
			msg = http.StatusText(reply.Status)
		}
		writeError(w, reply.Status, msg)
		return
	}
	chunks := reply.chunks(n, model, req.Stream)
	if !req.Stream {
		writeJSON(w, http.StatusOK, chunks[0])
		return
	}
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	for _, c := range chunks {
		b, _ := json.Marshal(c)
		if _, err := fmt.Fprintf(w, "data: %s\r\n\r\n", b); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}

// chunks is the answer as GenerateContentResponse objects: one when not
// streaming; else the text in up to three pieces, then the calls, the last
// one carrying finishReason and usageMetadata.
func (rep Reply) chunks(n int, model string, stream bool) []map[string]any {
	var parts [][]map[string]any
	texts := []string{rep.Text}
	if stream {
		texts = split(rep.Text, 3)
	}
	for _, t := range texts {
		if t != "" {
			parts = append(parts, []map[string]any{{"text": t}})
		}
	}
	var calls []map[string]any
	for _, c := range rep.Calls {
		args := c.Args
		if len(bytes.TrimSpace(args)) == 0 {
			args = json.RawMessage("{}")
		}
		fc := map[string]any{"name": c.Name, "args": args}
		if c.ID != "" {
			fc["id"] = c.ID
		}
		calls = append(calls, map[string]any{"functionCall": fc})
	}
	if len(calls) > 0 {
		parts = append(parts, calls)
	}
	if len(parts) == 0 {
		parts = [][]map[string]any{{{"text": ""}}}
	}
	if !stream { // one response with every part
		var all []map[string]any
		for _, p := range parts {
			all = append(all, p...)
		}
		parts = [][]map[string]any{all}
	}
	finish := rep.FinishReason
	if finish == "" {
		finish = "STOP"
	}
	u := Usage{PromptTokens: 10, CandidatesTokens: 5}
	if rep.Usage != nil {
		u = *rep.Usage
	}
	out := make([]map[string]any, len(parts))
	for i, p := range parts {
		cand := map[string]any{"content": map[string]any{"role": "model", "parts": p}, "index": 0}
		c := map[string]any{"candidates": []any{cand}, "modelVersion": model, "responseId": fmt.Sprintf("fake-%d", n)}
		if i == len(parts)-1 {
			cand["finishReason"] = finish
			c["usageMetadata"] = map[string]any{"promptTokenCount": u.PromptTokens, "candidatesTokenCount": u.CandidatesTokens,
				"totalTokenCount": u.PromptTokens + u.CandidatesTokens}
		}
		out[i] = c
	}
	return out
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

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers a Gemini-shaped error: {"error": {code, message,
// status}}.
func writeError(w http.ResponseWriter, status int, message string) {
	st := "INVALID_ARGUMENT"
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		st = "PERMISSION_DENIED"
	case status == http.StatusNotFound:
		st = "NOT_FOUND"
	case status == http.StatusTooManyRequests:
		st = "RESOURCE_EXHAUSTED"
	case status >= 500:
		st = "INTERNAL"
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": status, "message": message, "status": st}})
}
