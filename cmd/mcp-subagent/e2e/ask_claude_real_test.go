//go:build realcli

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeanthropic"
)

// A real Claude Code child (on a fake model that asks it to write a file)
// under permission "ask": the CLI asks through the callback's permission
// prompt, the question reaches the principal as a notice and list_agents
// shows it; "allow" lets the write happen, "deny" leaves the file
// unwritten and the child's result says the person declined. Without
// permission "ask" nothing is asked: the permission mode denies the write.
func TestClaudeCodeRealAsksBeforeWriting(t *testing.T) {
	bin := findCLI(t, "claude")
	for _, answer := range []string{"allow", "deny", "unasked"} {
		t.Run(answer, func(t *testing.T) {
			var target string // the file the model asks to write, in the child's cwd
			model := fakeanthropic.New(func(req fakeanthropic.Request) fakeanthropic.Reply {
				if !req.IsAgentLoop() || !strings.Contains(req.Text(), "ASK-WRITE") {
					return fakeanthropic.Generic(req)
				}
				if rs := req.ResultsOf("Write"); len(rs) > 0 {
					return fakeanthropic.Reply{Text: "WRITE-DONE (the tool said: " + rs[len(rs)-1].Text + ")"}
				}
				return fakeanthropic.Reply{ToolUses: []fakeanthropic.ToolUse{fakeanthropic.Use(req, "Write",
					map[string]any{"file_path": target, "content": "hello from claude\n"})}}
			})
			t.Cleanup(model.Close)
			home := realDir(t)
			env := map[string]string{"HOME": home, "PATH": cliPATH(bin), "ANTHROPIC_BASE_URL": model.URL(), "ANTHROPIC_API_KEY": "test-key",
				"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "CLAUDE_CONFIG_DIR": filepath.Join(home, ".claude")}
			pc := map[string]any{"name": "claude", "kind": "claude-code", "command": bin, "env": env, "pass_env": []string{}, "timeout_seconds": 240}
			if answer != "unasked" {
				pc["permission"], pc["question_timeout_seconds"] = "ask", 120
			}
			s, h := startWriter(t, pc, "claude-notes.txt", &target)
			if answer == "unasked" {
				settled := waitNoticeWithin(t, s, "subagent-settled", 4*time.Minute)
				if strings.Contains(settled, "subagent-question") || !strings.Contains(settled, "denied: Write") {
					t.Errorf("without permission \"ask\" the write is not denied by the permission mode, unasked: %s", settled)
				}
				if _, err := os.Stat(target); err == nil {
					t.Errorf("the write ran without anyone allowing it")
				}
				return
			}
			askAndAnswer(t, s, h.AgentID, answer, target, 4*time.Minute, func(notice string) {
				if !strings.Contains(notice, "Claude Code asks to use Write") {
					t.Errorf("the question is not about Write: %s", notice)
				}
				if rows := text(s.call(t, testCtx(t), "list_agents", map[string]any{})); !strings.Contains(rows, h.AgentID+" [input_required]") {
					t.Errorf("list_agents does not show the child input_required: %s", rows)
				}
			})
			// The prompt tool is the CLI's permission check, never offered to the model.
			for _, r := range model.Requests() {
				if strings.Contains(strings.Join(append(r.ToolNames(), r.DeferredTools()...), " "), "permission_prompt") {
					t.Errorf("the model was offered the permission prompt: %v %v", r.ToolNames(), r.DeferredTools())
					break
				}
			}
		})
	}
}
