package main

import (
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/daemon"
)

// A child's settings record its key by name only; its value is looked up
// in the session that started the child while it is connected, else in
// the latest connected session of the same principal that sets it, else
// in the daemon's environment; with none, the model error says no key is
// set and where it was looked for.
func TestASecretIsLookedUpInItsSessionThenItsPrincipalsLatestThenTheDaemon(t *testing.T) {
	t.Setenv("SETTINGS_TEST_API_KEY", "")
	os.Unsetenv("SETTINGS_TEST_API_KEY")
	var r sessionSettings
	hello := func(key string) *daemon.Settings {
		s := &daemon.Settings{Names: []string{"SETTINGS_TEST_API_KEY", "OPENAI_BASE_URL"}, Env: map[string]string{"OPENAI_BASE_URL": "http://x/v1"}}
		if key != "" {
			s.Env["SETTINGS_TEST_API_KEY"] = key
		}
		return s
	}
	first, endFirst := r.opened("s1", "local", hello("k1"))
	if !slices.Equal(first.Secrets, []string{"SETTINGS_TEST_API_KEY"}) || first.Env["SETTINGS_TEST_API_KEY"] != "" || first.Env["OPENAI_BASE_URL"] != "http://x/v1" {
		t.Fatalf("recorded settings %+v: want the key by name only, the base URL by value", first)
	}
	_, endOther := r.opened("s2", "alice", hello("k-alice"))
	defer endOther()
	_, endSecond := r.opened("s3", "local", hello("k3"))
	_, endUnset := r.opened("s4", "local", hello(""))
	defer endUnset()

	look := func() (string, string, bool) { return r.secret("local", first, "SETTINGS_TEST_API_KEY") }
	if v, from, _ := look(); v != "k1" || !strings.Contains(from, "s1") {
		t.Errorf("with its session connected: %q %q; want its own key", v, from)
	}
	endFirst()
	if v, from, _ := look(); v != "k3" || !strings.Contains(from, "s3") {
		t.Errorf("its session gone: %q %q; want the latest session of its principal that sets it (not alice's)", v, from)
	}
	endSecond()
	if _, _, ok := look(); ok {
		t.Errorf("no session of its principal sets it, nor the daemon: found one")
	}
	t.Setenv("SETTINGS_TEST_API_KEY", "k-daemon")
	if v, from, _ := look(); v != "k-daemon" || !strings.Contains(from, "daemon's environment") {
		t.Errorf("then the daemon's environment: %q %q", v, from)
	}
	os.Unsetenv("SETTINGS_TEST_API_KEY")

	getenv, from := r.env("local", first)
	ms := buildModelsEnv([]ModelConfig{{Name: "default", API: apiOpenAI, BaseURL: getenv("OPENAI_BASE_URL"), APIKeyEnv: "SETTINGS_TEST_API_KEY", Model: "m"}},
		LLMConfig{}, getenv, from, slog.New(slog.NewTextHandler(io.Discard, nil)))
	where := ms[0].Client.(sourced).where()
	if !strings.Contains(where, "no key is set: SETTINGS_TEST_API_KEY (looked up in session s1") || !strings.Contains(where, "http://x/v1") {
		t.Errorf("the model error's source = %q; want no key is set, saying where it was looked for", where)
	}
}
