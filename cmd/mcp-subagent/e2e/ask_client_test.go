//go:build realcli

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeanthropic"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
)

// qwenAsker is a real ACP agent (qwen --acp --approval-mode default) under
// permission "ask", on a fake model that has it write the file target
// (set it before the child starts) and then say WRITE-DONE with what the
// tool said.
type qwenAsker struct {
	target string
	pc     map[string]any // the provider "qwen"
	config string         // the server's config: pc alone
}

func newQwenAsker(t *testing.T) *qwenAsker {
	t.Helper()
	bin := findACPCLI(t, "qwen")
	q := &qwenAsker{}
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
		b, _ := json.Marshal(map[string]any{"file_path": q.target, "content": "hello from qwen\n"})
		return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "write_file", Arguments: string(b)}}}
	})
	t.Cleanup(model.Close)
	home := realDir(t)
	env := realACPAgents["qwen"].env(t, home, model.URL())
	env["HOME"], env["PATH"] = home, cliPATH(bin)
	pc := map[string]any{"name": "qwen", "kind": "acp", "command": []string{bin, "--approval-mode", "default"}, "env": env,
		"pass_env": []string{}, "timeout_seconds": acpTurnTimeout.Seconds(), "permission": "ask", "question_timeout_seconds": 120}
	cfg, _ := json.Marshal(map[string]any{"providers": []any{pc}})
	q.pc, q.config = pc, string(cfg)
	return q
}

// dirs makes a server's data directory (its daemon stopped at cleanup),
// a workspace holding the target and the config file.
func (q *qwenAsker) dirs(t *testing.T) (dataDir, ws, cfgPath string) {
	t.Helper()
	dataDir, ws = realDir(t), realDir(t)
	stopDaemonAtCleanup(t, dataDir)
	q.target = filepath.Join(ws, "qwen-notes.txt")
	cfgPath = filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfgPath, []byte(q.config), 0o600); err != nil {
		t.Fatal(err)
	}
	return dataDir, ws, cfgPath
}

// tsElicitClient drives the official TypeScript SDK's client: it starts
// the server over stdio, declares elicitation (form), answers each
// elicitation/create with ACTION (accepting with the first choice that
// allows once), calls the subagent tool in the foreground, reads the
// child's transcript, and prints {asked, result, transcript} as JSON.
const tsElicitClient = `
const sdk = process.env.SDK;
const { Client } = await import(sdk + "/client/index.js");
const { StdioClientTransport } = await import(sdk + "/client/stdio.js");
const { ElicitRequestSchema } = await import(sdk + "/types.js");
const cfg = JSON.parse(process.env.CLIENT_CONFIG);
const client = new Client({ name: "ts-elicit", version: "1.0.0" }, { capabilities: { elicitation: {} } });
const asked = [];
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  asked.push(req.params);
  if (cfg.action !== "accept") return { action: cfg.action };
  const words = req.params.requestedSchema?.properties?.answer?.enum ?? ["allow"];
  const pick = words.find((w) => /allow/i.test(w) && !/always/i.test(w)) ?? words.find((w) => /allow/i.test(w)) ?? words[0];
  return { action: "accept", content: { answer: pick } };
});
const transport = new StdioClientTransport({ command: cfg.command, args: cfg.args, env: cfg.env, cwd: cfg.cwd, stderr: "inherit" });
await client.connect(transport);
const result = await client.callTool({ name: "subagent", arguments: cfg.arguments }, undefined, { timeout: 600000 });
let transcript = null;
const id = result.structuredContent?.agent_id;
if (id) {
  const r = await client.readResource({ uri: "subagent://agents/" + id + "/transcript" });
  transcript = r.contents?.[0]?.text ?? null;
}
console.log(JSON.stringify({ asked, result, transcript }));
await client.close();
`

// tsSDK is the installed @modelcontextprotocol/sdk's ESM directory.
func tsSDK(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(os.Getenv("MCP_SUBAGENT_NPM_PREFIX"), "lib", "node_modules", "@modelcontextprotocol", "sdk", "dist", "esm")
	if _, err := os.Stat(filepath.Join(dir, "client", "index.js")); err != nil || os.Getenv("MCP_SUBAGENT_NPM_PREFIX") == "" {
		skipOrFail(t, "@modelcontextprotocol/sdk not installed under $MCP_SUBAGENT_NPM_PREFIX (.ci/install installs it)")
	}
	return dir
}

// The official TypeScript client, declaring elicitation, calls subagent
// in the foreground; the child, a real qwen --acp under permission "ask",
// asks before writing a file, and the question reaches the client's
// person as elicitation/create during the call. Accepted: the file is
// written and the call completes with the child's answer. Declined: the
// file is not written, the child's result says the person declined, and
// the transcript records the person's decline.
func TestTypeScriptClientAnswersAChildsQuestion(t *testing.T) {
	sdk := tsSDK(t)
	node, err := exec.LookPath("node")
	if err != nil {
		skipOrFail(t, "node not found")
	}
	for _, action := range []string{"accept", "decline"} {
		t.Run(action, func(t *testing.T) {
			q := newQwenAsker(t)
			dataDir, ws, cfgPath := q.dirs(t)
			env := map[string]string{}
			for _, kv := range serverEnv(nil, nil) {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			cc, _ := json.Marshal(map[string]any{"action": action, "command": binary, "cwd": ws, "env": env,
				"args":      []string{"serve", "--data-dir", dataDir, "--config", cfgPath, "--log-level", "debug"},
				"arguments": map[string]any{"description": "write a file", "provider": "qwen", "prompt": "ASK-WRITE: write the file you are told to."}})
			script := filepath.Join(t.TempDir(), "client.mjs")
			if err := os.WriteFile(script, []byte(tsElicitClient), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 4*acpTurnTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, script)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "SDK=" + sdk, "CLIENT_CONFIG=" + string(cc)}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("the TypeScript client: %v\nstdout: %s\nstderr: %s", err, out, tail(stderr.String(), 8000))
			}
			var got struct {
				Asked  []map[string]any `json:"asked"`
				Result struct {
					IsError bool `json:"isError"`
					Content []struct {
						Text string `json:"text"`
					} `json:"content"`
					Structured struct {
						Diagnostic string `json:"diagnostic"`
					} `json:"structuredContent"`
				} `json:"result"`
				Transcript string `json:"transcript"`
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("client output %q: %v", out, err)
			}
			var text strings.Builder
			for _, c := range got.Result.Content {
				text.WriteString(c.Text + "\n")
			}
			t.Logf("asked %v; result (error %v): %s", got.Asked, got.Result.IsError, text.String())
			if len(got.Asked) != 1 || !strings.Contains(got.Asked[0]["message"].(string), "asks") {
				t.Fatalf("the person was asked %v, want the child's question once\nstderr: %s", got.Asked, tail(stderr.String(), 8000))
			}
			_, statErr := os.Stat(q.target)
			if action == "accept" {
				if statErr != nil || got.Result.IsError || !strings.Contains(text.String(), "WRITE-DONE") {
					t.Errorf("accepted: file %v; result (error %v) %s", statErr, got.Result.IsError, text.String())
				}
				if !strings.Contains(got.Transcript, "permission allowed by the person") {
					t.Errorf("the transcript does not record the person's allow: %s", got.Transcript)
				}
				return
			}
			if statErr == nil {
				t.Errorf("declined, yet %s was written", q.target)
			}
			if d := got.Result.Structured.Diagnostic; !strings.Contains(text.String()+d, "declined by the person") {
				t.Errorf("the child's result does not say the person declined: %s (diagnostic %q)", text.String(), d)
			}
			if !strings.Contains(got.Transcript, "permission declined by the person (deny)") {
				t.Errorf("the transcript does not record the person's decline: %s", got.Transcript)
			}
		})
	}
}

// The real Claude Code CLI, headless in stream-json mode, is the client
// (on protocol 2026-07-28 it gets the question as input_required): its
// model delegates in the foreground to a real qwen --acp child that asks
// before writing a file; Claude Code forwards the question to its
// controlling program as a control_request of subtype elicitation; the
// test accepts it; the file is written and the child's result reaches
// Claude's model.
func TestClaudeCodeForwardsAChildsQuestion(t *testing.T) {
	bin := findCLI(t, "claude")
	q := newQwenAsker(t)
	ctx := testContext(t, realCLITimeout)
	const marker = "ELICIT-E2E"
	api := fakeanthropic.New(claudeParent([]claudeStep{{tool: "mcp__subagent__subagent", input: map[string]any{
		"description": "write a file", "provider": "qwen", "prompt": "ASK-WRITE: write the file you are told to."}}}, "PARENT-SAW-THE-RESULT"))
	t.Cleanup(api.Close)
	dataDir, ws, cfgPath := q.dirs(t)
	h := newClaudeHome(t, bin, api)
	h.serve = []string{"--config", cfgPath}
	h.register(t, dataDir, newChildModel(t))
	cl := h.runStream(t, ws)
	cl.say(t, marker+": delegate the write to a subagent")
	ev := cl.await(t, ctx, "the question as a control_request", func(ev map[string]any) bool {
		req, _ := ev["request"].(map[string]any)
		return ev["type"] == "control_request" && req["subtype"] == "elicitation"
	})
	req := ev["request"].(map[string]any)
	t.Logf("claude forwarded: %v", req)
	if msg, _ := req["message"].(string); !strings.Contains(msg, "asks") || req["mcp_server_name"] != "subagent" {
		t.Fatalf("the forwarded question: %v", req)
	}
	if _, err := os.Stat(q.target); err == nil {
		t.Fatal("the file was written before anyone answered")
	}
	// The form offers qwen's options; "allow" is always an approval's word.
	answer := "allow"
	cl.send(t, map[string]any{"type": "control_response", "response": map[string]any{"subtype": "success", "request_id": ev["request_id"],
		"response": map[string]any{"action": "accept", "content": map[string]any{"answer": answer}}}})
	cl.await(t, ctx, "the turn's result", isResult)
	if _, err := os.Stat(q.target); err != nil {
		t.Errorf("accepted, yet the file was not written: %v\n%s", err, cl.diag())
	}
	// Claude Code speaks 2026-07-28: the question went as input_required.
	if log, _ := os.ReadFile(filepath.Join(dataDir, "daemon.log")); !strings.Contains(string(log), "goes to the client as input_required") {
		t.Errorf("the daemon did not send the question as input_required:\n%s", tail(string(log), 3000))
	}
	var got []string
	for _, r := range claudeReceived(api, marker) {
		got = append(got, r.tool+": "+r.text)
	}
	if !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "subagent: ") && strings.Contains(s, "WRITE-DONE") }) {
		t.Errorf("Claude's model did not get the child's result; it got %q\n%s", got, cl.diag())
	}
}
