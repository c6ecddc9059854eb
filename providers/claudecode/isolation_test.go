//go:build realcli

package claudecode

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// TestRealCLIChildSeesOnlyThisServer: the user's own Claude configuration
// registers MCP servers everywhere a user would — this server itself as
// "subagent" and "other" at user scope in .claude.json, "local" for the
// child's cwd (its projects entry there), "project" in the cwd's .mcp.json
// (approved by settings.json), and "settings" in settings.json — each a
// script that leaves a marker when it starts. The configuration is where
// the CLI looks with HOME alone ($HOME/.claude.json, ~/.claude/) and, in a
// second run, with CLAUDE_CONFIG_DIR (both files in that directory). Run
// plainly, the real CLI starts them; as a child it starts none, calls this
// server back as "subagent" without a clash, and resumes its session for a
// follow-up.
func TestRealCLIChildSeesOnlyThisServer(t *testing.T) {
	path := realClaude(t)
	t.Run("HOME", func(t *testing.T) { childSeesOnlyThisServer(t, path, false) })
	t.Run("CLAUDE_CONFIG_DIR", func(t *testing.T) { childSeesOnlyThisServer(t, path, true) })
}

func childSeesOnlyThisServer(t *testing.T, path string, configDir bool) {
	api := newFakeAnthropic(t)
	cb := newCallbackServer(t)
	home, cwd, markers := t.TempDir(), t.TempDir(), t.TempDir()
	// Where the CLI keeps .claude.json and settings.json.
	globalDir, settingsDir := home, filepath.Join(home, ".claude")
	if configDir {
		globalDir = filepath.Join(home, "claude-config")
		settingsDir = globalDir
	}
	script := func(name string) string {
		p := filepath.Join(home, name+".sh")
		body := fmt.Sprintf("#!/bin/sh\necho \"$0 $*\" > %s\nexit 0\n", filepath.Join(markers, name))
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stdio := func(name string) map[string]any {
		return map[string]any{"type": "stdio", "command": script(name), "args": []string{"--stdio"}}
	}
	writeJSON := func(p string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeJSON(filepath.Join(globalDir, ".claude.json"), map[string]any{
		"mcpServers": map[string]any{"subagent": stdio("subagent"), "other": stdio("other")},
		"projects": map[string]any{cwd: map[string]any{
			"mcpServers":             map[string]any{"local": stdio("local")},
			"hasTrustDialogAccepted": true,
			"enabledMcpjsonServers":  []string{"project"},
		}},
	})
	writeJSON(filepath.Join(settingsDir, "settings.json"), map[string]any{
		"enableAllProjectMcpServers": true,
		"mcpServers":                 map[string]any{"settings": stdio("settings")},
	})
	writeJSON(filepath.Join(cwd, ".mcp.json"), map[string]any{"mcpServers": map[string]any{"project": stdio("project")}})
	started := func() []string {
		ents, err := os.ReadDir(markers)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}

	opts := Options{Command: path, Model: "fake", Env: []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + home,
		"ANTHROPIC_BASE_URL=" + api.URL,
		"ANTHROPIC_API_KEY=test",
		"ANTHROPIC_DEFAULT_HAIKU_MODEL=fake",
		"ANTHROPIC_SMALL_FAST_MODEL=fake",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
	}}
	if configDir {
		opts.Env = append(opts.Env, "CLAUDE_CONFIG_DIR="+globalDir)
	}

	// The control: the same CLI, environment and cwd, without the
	// provider's flags.
	cmd := exec.Command(path, "-p", "--output-format", "stream-json", "--verbose", "--model=fake",
		"--permission-mode=dontAsk", "--no-session-persistence")
	cmd.Dir, cmd.Env, cmd.Stdin = cwd, opts.Env, strings.NewReader("REAL:hello control-7801")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the plain run failed: %v\n%s", err, truncate.Tail(string(out), 2000))
	}
	plain := started()
	t.Logf("run plainly, the CLI started %q", plain)
	for _, want := range []string{"local", "other", "project", "subagent"} {
		if !slices.Contains(plain, want) {
			t.Fatalf("run plainly, the CLI did not start %q (started %q): the test's premise does not hold", want, plain)
		}
	}
	for _, name := range plain { // the directory stays: the scripts write into it
		if err := os.Remove(filepath.Join(markers, name)); err != nil {
			t.Fatal(err)
		}
	}

	m := newManager(t, memstore.New(), opts, func(seam.ParentRef) (seam.Callback, func()) {
		return seam.Callback{URL: cb.URL + "/mcp", Token: cb.token}, nil
	})
	f := &fake{cwd: cwd}
	id, res := startAndWait(t, m, f, seam.StartRequest{Prompt: "REAL:report isolation-7802"})
	if res.StopReason != agent.StopCompleted {
		t.Fatalf("first turn: %s %q (%s)", res.StopReason, res.Output, res.Diagnostic)
	}
	cb.mu.Lock()
	reports, denied := slices.Clone(cb.reports), cb.denied
	cb.mu.Unlock()
	if !slices.Contains(reports, "progress from claude") || denied > 0 {
		t.Errorf("the callback as subagent: reports %q, %d unauthorised (output %q, %s)", reports, denied, res.Output, res.Diagnostic)
	}
	_, res = followup(t, m, id, "REAL:hello isolation-7803")
	if res.StopReason != agent.StopCompleted {
		t.Fatalf("follow-up: %s (%s)", res.StopReason, res.Diagnostic)
	}
	reqs := api.find("isolation-7803")
	if len(reqs) == 0 || !strings.Contains(reqs[0].raw, "isolation-7802") {
		t.Error("the follow-up did not resume the session")
	}
	// Both CLI processes have exited (the turn waits for its process
	// group), so nothing can start a server any more.
	if got := started(); len(got) != 0 {
		t.Errorf("the child started the user's MCP servers %q", got)
	}
	for _, r := range append(api.find("isolation-7802"), reqs...) {
		for _, n := range r.toolNames() {
			if strings.HasPrefix(n, "mcp__") && !strings.HasPrefix(n, "mcp__subagent__") {
				t.Errorf("the model was offered %q", n)
			}
		}
	}
}
