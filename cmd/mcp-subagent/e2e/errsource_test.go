//go:build e2e

package e2e

import (
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
)

// A failed model call names where its address, key and model came from
// (the key by its variable, never its value), so a user knows which
// setting to fix: a refused connection, a 401 and a 404 each.
func TestModelCallErrorsNameTheirSettings(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/v1"
	ln.Close() // nothing listens there now: the connection is refused
	status := func(code int) *fakeopenai.Server {
		f := fakeopenai.New(func(int, fakeopenai.Request) fakeopenai.Reply { return fakeopenai.Reply{Status: code} })
		t.Cleanup(f.Close)
		return f
	}
	unauthorized, notFound := status(http.StatusUnauthorized), status(http.StatusNotFound)
	const noRetry = `{"llm":{"max_retries":0}}`
	cases := []struct {
		name   string
		fake   *fakeopenai.Server
		env    []string
		config string
		want   []string
	}{
		{"connection refused, all from the environment", nil, []string{"OPENAI_BASE_URL=" + closed},
			noRetry, []string{`model "fake-model" (from MCP_SUBAGENT_MODEL)`, "at " + closed + " (from OPENAI_BASE_URL)", "key from OPENAI_API_KEY"}},
		{"401", unauthorized, nil, noRetry, []string{"401", "(from OPENAI_BASE_URL)", "key from OPENAI_API_KEY"}},
		{"404 from a models entry", nil, nil,
			`{"models":[{"name":"m","api":"openai","base_url":"` + notFound.URL() + `","api_key_env":"MY_KEY","model":"no-such-model"}],"llm":{"max_retries":0}}`,
			[]string{"404", `model "no-such-model" (from models[0].model)`, "(from models[0].base_url)", "no key is set: MY_KEY is empty (named by models[0].api_key_env)"}},
		{"no key at all", unauthorized, []string{"OPENAI_API_KEY="}, noRetry, []string{"no key is set: OPENAI_API_KEY is empty"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := start(t, tc.fake, serverOpts{env: tc.env, config: tc.config, args: []string{"--no-daemon"}})
			r := s.call(t, testCtx(t), "subagent", map[string]any{"description": "settings", "prompt": "hello"})
			got := text(r)
			if !r.IsError {
				t.Fatalf("a failed model call is not an error result: %s", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("result %q\nlacks %q", got, w)
				}
			}
			if strings.Contains(got, "test-key") {
				t.Errorf("the key's value is in the result: %q", got)
			}
		})
	}
}
