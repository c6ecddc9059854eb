package main

// A minimal Gemini API route for gemini-cli as an ACP child
// (acp_real_test.go): streamGenerateContent over SSE, generateContent and
// countTokens, as CLIENTS.md describes them. internal/fakegemini (another
// branch) is the full fake; this one is only what the ACP test needs.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
)

// geminiPart is one part of a Gemini content.
type geminiPart struct {
	Text             string          `json:"text,omitempty"`
	FunctionCall     *geminiCall     `json:"functionCall,omitempty"`
	FunctionResponse json.RawMessage `json:"functionResponse,omitempty"`
}

type geminiCall struct {
	Name string         `json:"name"`
	Args map[string]any `json:"args"`
}

type geminiContent struct {
	Role  string       `json:"role"`
	Parts []geminiPart `json:"parts"`
}

type geminiRequest struct {
	Contents []geminiContent `json:"contents"`
	Tools    []struct {
		FunctionDeclarations []struct {
			Name string `json:"name"`
		} `json:"functionDeclarations"`
	} `json:"tools"`
	Stream bool   `json:"-"`
	Raw    string `json:"-"`
}

func (r geminiRequest) toolNames() []string {
	var out []string
	for _, t := range r.Tools {
		for _, f := range t.FunctionDeclarations {
			out = append(out, f.Name)
		}
	}
	return out
}

// lastUserText is the text of the newest user content with text.
func (r geminiRequest) lastUserText() string {
	for i := len(r.Contents) - 1; i >= 0; i-- {
		c := r.Contents[i]
		if c.Role != "user" {
			continue
		}
		var b strings.Builder
		for _, p := range c.Parts {
			b.WriteString(p.Text)
		}
		if b.Len() > 0 {
			return b.String()
		}
	}
	return ""
}

// lastFunctionResponse is the newest functionResponse part, if the newest
// content is one.
func (r geminiRequest) lastFunctionResponse() (string, bool) {
	if len(r.Contents) == 0 {
		return "", false
	}
	for _, p := range r.Contents[len(r.Contents)-1].Parts {
		if len(p.FunctionResponse) > 0 {
			return string(p.FunctionResponse), true
		}
	}
	return "", false
}

// newGeminiFake serves h's parts on the Gemini routes; its URL is for
// GOOGLE_GEMINI_BASE_URL.
func newGeminiFake(h func(geminiRequest) []geminiPart) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		path := r.URL.Path
		switch {
		case strings.HasSuffix(path, ":countTokens"):
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"totalTokens": %d}`, len(body)/4+1)
			return
		case strings.HasSuffix(path, ":generateContent"), strings.HasSuffix(path, ":streamGenerateContent"):
		default:
			http.Error(w, `{"error":{"code":404,"message":"not found","status":"NOT_FOUND"}}`, http.StatusNotFound)
			return
		}
		var req geminiRequest
		_ = json.Unmarshal(body, &req)
		req.Stream, req.Raw = strings.HasSuffix(path, ":streamGenerateContent"), string(body)
		parts := h(req)
		if parts == nil {
			http.Error(w, `{"error":{"code":500,"message":"the test ended","status":"INTERNAL"}}`, http.StatusInternalServerError)
			return
		}
		resp, _ := json.Marshal(map[string]any{
			"candidates":    []any{map[string]any{"content": geminiContent{Role: "model", Parts: parts}, "finishReason": "STOP", "index": 0}},
			"usageMetadata": map[string]any{"promptTokenCount": 12, "candidatesTokenCount": 3, "totalTokenCount": 15},
			"modelVersion":  "fake-model",
		})
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			w.Write(resp)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: %s\r\n\r\n", resp)
	}))
}
