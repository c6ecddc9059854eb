//go:build realcli

package codex

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeresponses"
	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/providers/internal/confinetest"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// shellCall is a call to the shell tool the request offers, running
// command: Codex 0.17x offers exec_command (unified exec) or shell_command;
// older ones shell.
func shellCall(r fakeresponses.Request, command string) (fakeresponses.Call, bool) {
	names := r.ToolNames()
	switch {
	case slices.Contains(names, "exec_command"):
		return fakeresponses.Call{Name: "exec_command", Arguments: map[string]any{"cmd": command, "yield_time_ms": 10000}}, true
	case slices.Contains(names, "shell_command"):
		return fakeresponses.Call{Name: "shell_command", Arguments: map[string]any{"command": command}}, true
	case slices.Contains(names, "shell"):
		return fakeresponses.Call{Name: "shell", Arguments: map[string]any{"command": []string{"/bin/sh", "-c", command}}}, true
	}
	return fakeresponses.Call{}, false
}

// TestRealCodexRunsConfined runs the real Codex CLI under the provider's
// confinement and, with the same harness, unconfined: its shell writes in
// the workspace either way, and tries to write outside it and read a
// secret under $HOME, which only the unconfined run manages. Codex's own
// sandbox is off in the probe (the provider turns it off when it
// confines: it cannot run inside ours), so that what stops the command is
// ours. Codex keeps its session in its state directory, ~/.codex, and a
// follow-up resumes it from there.
func TestRealCodexRunsConfined(t *testing.T) {
	bin := findCodex(t)
	cases := []struct {
		name         string
		mode         sandbox.Mode
		codexSandbox string
		probe        bool
	}{
		// Confined, the provider turns Codex's own sandbox off.
		{"confined", sandbox.WorkspaceWrite, "", true},
		{"unconfined, codex's own sandbox off", sandbox.Unconfined, "danger-full-access", true},
		// Unconfined, Codex's own sandbox is the default, and works.
		{"unconfined, codex's own sandbox on", sandbox.Unconfined, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			confined := confinetest.Confined(t, c.mode)
			probe := confinetest.New(t)
			command := probe.Command()
			if !c.probe {
				command = "echo inside > " + confinetest.InsideName + "; echo probe-end"
			}
			api := fakeresponses.New(func(r fakeresponses.Request) fakeresponses.Reply {
				if !r.IsAgentTurn() {
					return fakeresponses.Generic(r)
				}
				if outs := r.LastOutputs(); len(outs) > 0 {
					return fakeresponses.Reply{Text: "probe done"}
				}
				call, ok := shellCall(r, command)
				if !ok {
					return fakeresponses.Reply{Text: "no shell tool among " + strings.Join(r.ToolNames(), ",")}
				}
				return fakeresponses.Reply{Calls: []fakeresponses.Call{call}}
			})
			t.Cleanup(api.Close)
			codexHome := filepath.Join(probe.Home, ".codex")
			if err := os.MkdirAll(codexHome, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(api.ProviderTOML("FAKE_API_KEY")), 0o600); err != nil {
				t.Fatal(err)
			}
			path := []string{filepath.Dir(bin)}
			if node, err := exec.LookPath("node"); err == nil {
				path = append(path, filepath.Dir(node))
			}
			path = append(path, "/usr/local/bin", "/usr/bin", "/bin")
			f := &fixture{t: t, dir: t.TempDir(), cwd: t.TempDir(), store: memstore.New()}
			f.opts = Options{Command: bin, Timeout: 2 * time.Minute, Sandbox: c.codexSandbox,
				Confine: sandbox.Agent{Mode: c.mode},
				Env:     []string{"PATH=" + strings.Join(path, ":"), "HOME=" + probe.Home, "FAKE_API_KEY=test"}}
			f.parent = seam.ParentRef{Principal: "local", Cwd: f.cwd}
			f.m = f.newManager()

			st, res := f.start("run the probe", nil)
			if res.StopReason != agent.StopCompleted || res.Output != "probe done" {
				t.Fatalf("turn: %s %q (%s)", res.StopReason, res.Output, res.Diagnostic)
			}
			var output string
			for _, r := range api.Requests() {
				for _, o := range r.Outputs() {
					output = o.Output
				}
			}
			if !c.probe {
				if _, err := os.Stat(filepath.Join(f.cwd, confinetest.InsideName)); err != nil || !strings.Contains(output, "probe-end") {
					t.Errorf("the command did not write the workspace: %v (tool output %q)", err, output)
				}
				return
			}
			probe.Check(t, f.cwd, confined, output)
			// A follow-up resumes the thread from Codex's state directory.
			if _, res := f.followup(f.m, st.ChildID, "again"); res.StopReason != agent.StopCompleted || res.Output != "probe done" {
				t.Errorf("follow-up: %s %q (%s)", res.StopReason, res.Output, res.Diagnostic)
			}
			// Codex kept its session in its own state directory.
			if sessions, _ := filepath.Glob(filepath.Join(codexHome, "sessions", "*")); len(sessions) == 0 {
				b, _ := json.Marshal(sessions)
				t.Errorf("no session under %s/sessions: %s", codexHome, b)
			}
		})
	}
}
