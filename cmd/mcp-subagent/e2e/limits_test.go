//go:build e2e

package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// The config's limits reach the server: over stdio a prompt over
// limits.prompt_bytes is refused naming the key; over HTTP a body over
// http.max_body_bytes gets 413.
func TestTheConfiguredLimitsHoldInTheBinary(t *testing.T) {
	cfg := `{"limits":{"prompt_bytes":16},"http":{"max_body_bytes":65536}}`
	s := start(t, nil, serverOpts{args: []string{"--ephemeral"}, config: cfg})
	res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "d", "prompt": strings.Repeat("p", 17)})
	if !res.IsError || !strings.Contains(text(res), "limits.prompt_bytes") {
		t.Errorf("stdio, 17-byte prompt over a 16-byte limit: %v %q", res.IsError, text(res))
	}
	h := start(t, nil, serverOpts{http: true, config: cfg})
	body := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"` + strings.Repeat("x", 70000) + `"}}`
	req, _ := http.NewRequest("POST", h.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+h.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(msg), "http.max_body_bytes") {
		t.Errorf("HTTP, 70 KB body over a 64 KiB limit: %d %q", resp.StatusCode, msg)
	}
}
