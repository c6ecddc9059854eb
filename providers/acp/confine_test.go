package acp

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeanthropic"
	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/providers/internal/confinetest"
)

// realClaudeCodeACP finds the claude-code-acp agent on PATH or under the
// npm prefix CI installs into; it skips without one, and fails under CI=true.
func realClaudeCodeACP(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("claude-code-acp"); err == nil {
		return p
	}
	if prefix := os.Getenv("MCP_SUBAGENT_NPM_PREFIX"); prefix != "" {
		if p := filepath.Join(prefix, "bin", "claude-code-acp"); fileExists(p) {
			return p
		}
	}
	msg := "claude-code-acp not installed; .ci/run installs @zed-industries/claude-code-acp (looked on PATH and in $MCP_SUBAGENT_NPM_PREFIX/bin)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: a missing agent fails instead of skipping)")
	}
	t.Skip(msg)
	return ""
}

// TestRealACPAgentRunsConfined runs the real claude-code-acp agent under
// the provider's confinement and, with the same harness, unconfined: the
// Bash command its model scripts writes in the workspace either way, and
// tries to write outside it and read a secret under $HOME, which only the
// unconfined run manages. Its state is the preset's (~/.claude).
func TestRealACPAgentRunsConfined(t *testing.T) {
	bin := realClaudeCodeACP(t)
	for _, mode := range []sandbox.Mode{sandbox.WorkspaceWrite, sandbox.Unconfined} {
		t.Run(string(mode), func(t *testing.T) {
			confined := confinetest.Confined(t, mode)
			probe := confinetest.New(t)
			api := fakeanthropic.New(func(r fakeanthropic.Request) fakeanthropic.Reply {
				if !r.IsAgentLoop() {
					return fakeanthropic.Generic(r)
				}
				if len(r.ResultsOf("Bash")) > 0 {
					return fakeanthropic.Reply{Text: "probe done"}
				}
				return fakeanthropic.Reply{ToolUses: []fakeanthropic.ToolUse{{Name: "Bash",
					Input: map[string]any{"command": probe.Command(), "description": "run the probe"}}}}
			})
			t.Cleanup(api.Close)
			f := &fixture{t: t, cwd: t.TempDir()}
			f.opts = Options{Command: bin, Permission: PermissionAllow, Confine: sandbox.Agent{Mode: mode}, Env: []string{
				"PATH=" + filepath.Dir(bin) + ":/usr/local/bin:/usr/bin:/bin",
				"HOME=" + probe.Home,
				"ANTHROPIC_BASE_URL=" + api.URL(),
				"ANTHROPIC_API_KEY=test",
				"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
			}}
			m := f.manager(memstore.New(), nil)
			_, res := f.start(m, "run the probe")
			if res.StopReason != agent.StopCompleted {
				t.Fatalf("turn: %s %q (%s)", res.StopReason, res.Output, res.Diagnostic)
			}
			var output string
			for _, r := range api.Requests() {
				for _, tr := range r.ResultsOf("Bash") {
					output = tr.Text
				}
			}
			probe.Check(t, f.cwd, confined, output)
		})
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
