package acp

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The watch passes requests and answers through unchanged, to the
// callback's path, and signals only once a tools/list was answered.
func TestListWatchSignalsOnlyAnAnsweredToolsList(t *testing.T) {
	var paths []string
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		paths = append(paths, r.URL.Path+" "+r.Header.Get("Authorization"))
		if strings.Contains(string(b), "refuse") {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		_, _ = w.Write(append([]byte("echo:"), b...))
	}))
	defer backend.Close()
	w, err := watchListing(backend.URL + "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	post := func(body string) string {
		req, _ := http.NewRequest(http.MethodPost, w.url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	listed := func() bool {
		select {
		case <-w.listed:
			return true
		default:
			return false
		}
	}
	if got := post(`{"jsonrpc":"2.0","id":1,"method":"initialize"}`); got != `echo:{"jsonrpc":"2.0","id":1,"method":"initialize"}` || listed() {
		t.Fatalf("initialize: answer %q, listed %v", got, listed())
	}
	if post(`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"refuse":1}}`); listed() {
		t.Fatal("a refused tools/list counted as listed")
	}
	post(`{"jsonrpc":"2.0","id":3,"method":"tools/list"}`)
	if !listed() {
		t.Fatal("an answered tools/list was not signalled")
	}
	if paths[0] != "/mcp Bearer tok" {
		t.Errorf("the backend saw %q, want the callback's path and the agent's header", paths[0])
	}
}
