//go:build realcli

package acp

import (
	"path/filepath"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/providers/internal/confinetest"
)

// TestRealACPAgentRunsConfined runs the real claude-code-acp agent under
// the provider's confinement and, with the same harness, unconfined: the
// Bash command its model scripts writes in the workspace either way, and
// tries to write outside it and read a secret under $HOME, which only the
// unconfined run manages. Its state is the preset's (~/.claude).
func TestRealACPAgentRunsConfined(t *testing.T) {
	bin := confinetest.FindCLI(t, "claude-code-acp", "@zed-industries/claude-code-acp")
	for _, mode := range []sandbox.Mode{sandbox.WorkspaceWrite, sandbox.Unconfined} {
		t.Run(string(mode), func(t *testing.T) {
			confined := confinetest.Confined(t, mode)
			probe := confinetest.New(t)
			api := probe.Anthropic(t, "")
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
			output := confinetest.BashOutput(api)
			probe.Check(t, f.cwd, confined, output)
		})
	}
}
