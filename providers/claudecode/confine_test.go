//go:build realcli

package claudecode

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/providers/internal/confinetest"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// TestRealClaudeRunsConfined runs the real Claude Code CLI under the
// provider's confinement and, with the same harness, unconfined: its Bash
// tool writes in the workspace either way, and tries to write outside it
// and read a secret under $HOME, which only the unconfined run manages.
// Permissions are bypassed so that what stops the command is the sandbox,
// not Claude Code. Its state is in the default places (~/.claude,
// ~/.claude.json), and a follow-up resumes the session from there.
func TestRealClaudeRunsConfined(t *testing.T) {
	path := realClaude(t)
	for _, mode := range []sandbox.Mode{sandbox.WorkspaceWrite, sandbox.Unconfined} {
		t.Run(string(mode), func(t *testing.T) {
			confined := confinetest.Confined(t, mode)
			probe := confinetest.New(t)
			api := probe.Anthropic(t, "second-turn-5521")
			opts := Options{Command: path, Model: "fake", PermissionMode: "bypassPermissions",
				Confine: sandbox.Agent{Mode: mode},
				Env: []string{
					"PATH=/usr/local/bin:/usr/bin:/bin",
					"HOME=" + probe.Home,
					"ANTHROPIC_BASE_URL=" + api.URL(),
					"ANTHROPIC_API_KEY=test",
					"ANTHROPIC_DEFAULT_HAIKU_MODEL=fake",
					"ANTHROPIC_SMALL_FAST_MODEL=fake",
					"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
					"DISABLE_AUTOUPDATER=1",
					"IS_SANDBOX=1", // bypassPermissions as root
				}}
			m := newManager(t, memstore.New(), opts, nil)
			f := &fake{cwd: t.TempDir()}
			id, res := startAndWait(t, m, f, seam.StartRequest{Prompt: "run the probe"})
			if res.StopReason != agent.StopCompleted || res.Output != "probe done" {
				t.Fatalf("turn: %s %q (%s)", res.StopReason, res.Output, res.Diagnostic)
			}
			output := confinetest.BashOutput(api)
			probe.Check(t, f.cwd, confined, output)
			if _, err := os.Stat(filepath.Join(probe.Home, ".claude", "projects")); err != nil {
				t.Errorf("Claude Code kept no session in ~/.claude: %v", err)
			}
			_, res = followup(t, m, id, "second-turn-5521")
			if res.StopReason != agent.StopCompleted || res.Output != "followup done" {
				t.Errorf("follow-up: %s %q (%s)", res.StopReason, res.Output, res.Diagnostic)
			}
		})
	}
}
