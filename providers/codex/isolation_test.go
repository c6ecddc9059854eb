package codex

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// userMCPConfig is a user's Codex home whose config.toml registers this
// server itself as the stdio MCP server "subagent" beside another server
// "other"; each server's command is a script that leaves a marker file
// when it is started, and then exits. extra is appended to config.toml.
type userMCPConfig struct {
	home    string // CODEX_HOME
	markers string // where the scripts leave their markers
	config  string // config.toml's text
	// script writes a marker script for a server called name and returns
	// its path.
	script func(name string) string
}

func newUserMCPConfig(t *testing.T, head, extra string) userMCPConfig {
	t.Helper()
	u := userMCPConfig{home: t.TempDir(), markers: t.TempDir()}
	u.script = func(name string) string {
		path := filepath.Join(u.home, name+".sh")
		body := fmt.Sprintf("#!/bin/sh\necho \"$0 $*\" > %s\nexit 0\n", filepath.Join(u.markers, name))
		if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	u.config = head + fmt.Sprintf(`
[mcp_servers.subagent]
command = %s
args = ["--stdio"]

[mcp_servers.other]
command = %s
`, tomlString(u.script("subagent")), tomlString(u.script("other"))) + extra
	if err := os.WriteFile(filepath.Join(u.home, "config.toml"), []byte(u.config), 0o600); err != nil {
		t.Fatal(err)
	}
	return u
}

// started lists the markers left: the user's servers that were started.
func (u userMCPConfig) started(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(u.markers)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestTheFakeStartsTheUsersServersAndClashesWithoutIsolation checks the
// fake against what the real CLI does (TestRealCodexChildSeesOnlyThisServer
// shows the same with the real one): without --ignore-user-config the
// user's servers start, and a callback url on "subagent" is a config error.
// The isolation tests below would fail against this fake if the provider
// did not isolate.
func TestTheFakeStartsTheUsersServersAndClashesWithoutIsolation(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	u := newUserMCPConfig(t, "", "")
	run := func(args ...string) (string, error) {
		cmd := exec.Command(self, append([]string{"exec", "--json"}, args...)...)
		cmd.Env = []string{fakeDirEnv + "=" + t.TempDir(), "CODEX_HOME=" + u.home, "PATH=/usr/bin:/bin", "GORACE=atexit_sleep_ms=0"}
		cmd.Stdin = strings.NewReader("hi")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("-c", `mcp_servers.subagent.url="http://127.0.0.1:9/mcp"`, "-")
	if err == nil || !strings.Contains(out, "url is not supported for stdio") {
		t.Errorf("a url on the user's stdio subagent: %v %s", err, out)
	}
	if got := u.started(t); len(got) != 0 {
		t.Errorf("started %q before failing", got)
	}
	if out, err := run("-"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	if got := u.started(t); !slices.Equal(got, []string{"other", "subagent"}) {
		t.Errorf("without isolation the fake started %q", got)
	}
}

// The child's Codex loads none of the user's config.toml, so neither the
// user's "subagent" (this server over stdio) nor "other" starts and the
// callback cannot clash with them; the user's model settings come along
// as -c overrides before the provider's own; a follow-up resumes the same
// thread the same way.
func TestAChildStartsNoneOfTheUsersMCPServersAndKeepsTheirModelSettings(t *testing.T) {
	const token = "tok-iso"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		w.Write([]byte("reported"))
	}))
	defer srv.Close()
	u := newUserMCPConfig(t, `model = "user-model"
model_provider = "corp"
approval_policy = "on-request"
[model_providers.corp]
name = "Corp"
base_url = "http://127.0.0.1:1/v1"
env_key = "CORP_KEY"
`, `
[projects."/somewhere"]
trust_level = "trusted"
`)
	f := newFixture(t, func(o *Options) {
		o.Env = append(o.Env, "CODEX_HOME="+u.home, "CORP_KEY=k")
		o.Config = []string{`model_reasoning_effort="low"`}
	}, func(o *manager.Options) {
		o.Callback = func(seam.ParentRef) (seam.Callback, func()) {
			return seam.Callback{URL: srv.URL + "/mcp", Token: token}, nil
		}
	})
	st, res := f.start("CALLBACK", nil)
	if res.StopReason != agent.StopCompleted || res.Output != "called back: 200 reported" {
		t.Fatalf("first turn: %q %q (%s)", res.StopReason, res.Output, res.Diagnostic)
	}
	_, res = f.followup(f.m, st.ChildID, "again")
	if res.StopReason != agent.StopCompleted || res.Output != "echo: again (turn 2)" {
		t.Fatalf("follow-up: %q %q (%s)", res.StopReason, res.Output, res.Diagnostic)
	}
	// Both processes have exited: nothing can start a server any more.
	if got := u.started(t); len(got) != 0 {
		t.Errorf("the user's MCP servers %q were started", got)
	}
	calls := f.calls()
	if len(calls) != 2 || calls[1].Resume == "" || calls[1].Resume != agent.LastSession(f.events(st.ChildID)) {
		t.Fatalf("calls: %+v", calls)
	}
	for i, c := range calls {
		argv := c.Argv
		at := func(s string) int { return slices.Index(argv, s) }
		ignore, sandbox := at(ignoreUserConfig), at("-s")
		if ignore < 0 || ignore > sandbox {
			t.Errorf("call %d: --ignore-user-config missing or not among the exec options: %q", i, argv)
		}
		if i == 1 && at("resume") < ignore {
			t.Errorf("call %d: --ignore-user-config after resume: %q", i, argv)
		}
		// The -c overrides in order: the user's model settings, the
		// provider's own, the callback, then Options.Config.
		var cs []string
		for j := 0; j+1 < len(argv); j++ {
			if argv[j] == "-c" {
				cs = append(cs, argv[j+1])
			}
		}
		want := []string{
			`model="user-model"`,
			`model_provider="corp"`,
			`model_providers={corp = {base_url = "http://127.0.0.1:1/v1", env_key = "CORP_KEY", name = "Corp"}}`,
			`approval_policy="never"`,
			"features.multi_agent=false",
			"features.multi_agent_v2=false",
			"mcp_servers.subagent.url=" + tomlString(srv.URL+"/mcp"),
			"mcp_servers.subagent.bearer_token_env_var=" + tomlString(TokenEnv),
			`mcp_servers.subagent.default_tools_approval_mode="approve"`,
			`model_reasoning_effort="low"`,
		}
		if !slices.Equal(cs, want) {
			t.Errorf("call %d: -c overrides\n%s\nwant\n%s", i, strings.Join(cs, "\n"), strings.Join(want, "\n"))
		}
		if slices.ContainsFunc(argv, func(a string) bool {
			return strings.Contains(a, "mcp_servers.other") || strings.Contains(a, u.home) || strings.Contains(a, "trust")
		}) {
			t.Errorf("call %d: something of the user's servers or trust is on the command line: %q", i, argv)
		}
		if argv[len(argv)-1] != "-" {
			t.Errorf("call %d: argv does not end with the stdin prompt: %q", i, argv)
		}
	}
}

// An operator who passes --ignore-user-config in Options.Args keeps Codex
// off the user's config entirely: the flag is not doubled and nothing of
// the config is carried.
func TestIgnoreUserConfigInArgsCarriesNothing(t *testing.T) {
	u := newUserMCPConfig(t, "model = \"user-model\"\n", "")
	f := newFixture(t, func(o *Options) {
		o.Args = []string{ignoreUserConfig}
		o.Env = append(o.Env, "CODEX_HOME="+u.home)
	})
	_, res := f.start("hi", nil)
	if res.StopReason != agent.StopCompleted {
		t.Fatalf("%q (%s)", res.StopReason, res.Diagnostic)
	}
	argv := f.calls()[0].Argv
	n := 0
	for _, a := range argv {
		if a == ignoreUserConfig {
			n++
		}
	}
	if n != 1 || slices.Contains(argv, `model="user-model"`) {
		t.Errorf("argv = %q", argv)
	}
	if got := u.started(t); len(got) != 0 {
		t.Errorf("started %q", got)
	}
}

// A user config the provider cannot read is the turn's error, naming the
// file; Codex is not run on a guess.
func TestAnUnreadableUserConfigFailsTheTurn(t *testing.T) {
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte("model = \"x\"\n[broken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(o *Options) { o.Env = append(o.Env, "CODEX_HOME="+home) })
	_, res := f.start("hi", nil)
	if res.StopReason != agent.StopError || !strings.Contains(res.Diagnostic, "reading the user's Codex config "+filepath.Join(home, "config.toml")+" failed: toml: line ") {
		t.Errorf("%q (%s)", res.StopReason, res.Diagnostic)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "calls.jsonl")); err == nil {
		t.Error("codex ran")
	}
}
