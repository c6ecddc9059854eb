//go:build realcli

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
)

// A real ACP agent (qwen --acp --approval-mode default, on a fake model
// that asks it to write a file) under permission "ask": its permission
// request reaches the principal as a question; "allow" lets the write
// happen and the child completes; "deny" leaves the file unwritten and
// the transcript records the person's decline.
func TestACPRealQwenAsksBeforeWriting(t *testing.T) {
	bin := findACPCLI(t, "qwen")
	for _, answer := range []string{"allow", "deny"} {
		t.Run(answer, func(t *testing.T) {
			var target string // the file the model asks to write, in the child's cwd
			model := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
				switch {
				case len(req.Tools) == 0:
					return fakeopenai.Reply{Text: "A title"}
				case !strings.Contains(string(req.Raw), "ASK-WRITE"):
					return fakeopenai.Reply{Text: "nothing to do"}
				}
				if res, ok := req.LastToolResult(); ok {
					if len(res) > 200 {
						res = res[:200]
					}
					return fakeopenai.Reply{Text: "WRITE-DONE (the tool said: " + res + ")"}
				}
				if !req.HasTool("write_file") {
					return fakeopenai.Reply{Text: "NO write_file TOOL"}
				}
				b, _ := json.Marshal(map[string]any{"file_path": target, "content": "hello from qwen\n"})
				return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "write_file", Arguments: string(b)}}}
			})
			t.Cleanup(model.Close)
			home := realDir(t)
			env := realACPAgents["qwen"].env(t, home, model.URL())
			env["HOME"], env["PATH"] = home, cliPATH(bin)
			pc := map[string]any{"name": "qwen", "kind": "acp", "command": []string{bin, "--approval-mode", "default"}, "env": env,
				"pass_env": []string{}, "timeout_seconds": acpTurnTimeout.Seconds(), "permission": "ask", "question_timeout_seconds": 120}
			cfg, _ := json.Marshal(map[string]any{"providers": []any{pc}})
			s := start(t, nil, serverOpts{config: string(cfg)})
			target = filepath.Join(s.workspace, "qwen-notes.txt")
			res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "write a file", "provider": "qwen",
				"prompt": "ASK-WRITE: write the file you are told to.", "run_in_background": true})
			var h handleSC
			decodeSC(t, res, &h)
			got := waitNoticeWithin(t, s, "subagent-question", 3*acpTurnTimeout)
			m := questionID.FindStringSubmatch(got)
			if m == nil {
				t.Fatalf("no question id in %s", got)
			}
			t.Logf("question notice: %s", got)
			if _, err := os.Stat(target); err == nil {
				t.Fatal("the file was written before anyone answered")
			}
			ans := s.call(t, testCtx(t), "send_message", map[string]any{"subagent_id": h.AgentID, "answer_to": m[1], "message": answer})
			if ans.IsError {
				t.Fatalf("answer: %s", text(ans))
			}
			settled := waitNoticeWithin(t, s, "subagent-settled", 2*acpTurnTimeout)
			t.Logf("settlement: %s", settled)
			_, err := os.Stat(target)
			tr := transcriptJSON(t, s, h.AgentID)
			if answer == "allow" {
				if err != nil || !strings.Contains(settled, "WRITE-DONE") {
					t.Errorf("allowed: file %v; settlement %s", err, settled)
				}
				if !strings.Contains(tr, "permission allowed by the person (allow)") {
					t.Errorf("the transcript does not record the person's allow: %s", tr)
				}
				return
			}
			if err == nil {
				t.Errorf("denied, yet %s was written", target)
			}
			if !strings.Contains(settled, "declined by the person") || !strings.Contains(tr, "permission declined by the person (deny)") {
				t.Errorf("the decline is not in the result and the transcript: %s\n%s", settled, tr)
			}
		})
	}
}
