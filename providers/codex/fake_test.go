package codex

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/mcp-subagent/mcp-subagent/internal/subreaper/leaktest"
)

// The fake Codex: TestMain runs it instead of the tests when FAKE_CODEX_DIR
// is set. It speaks `codex exec --json` the way the real CLI does (see
// REFERENCE §4): it parses `exec [options] [resume ID] -`, reads the prompt
// from stdin, records what it was given in FAKE_CODEX_DIR/calls.jsonl,
// keeps each thread's running token total in FAKE_CODEX_DIR/threads, and
// prints the JSONL of the scenario the prompt names:
//
//	CRASH      thread.started, turn.started, a line on stderr, exit 3
//	FAIL       an error event, then turn.failed, exit 1
//	HANG       writes its pid and a grandchild's pid, then sleeps
//	ESCAPE     starts 150 background processes (setsid, nohup, double
//	           fork) holding its stdout and stderr, then completes (with
//	           STAY: writes its pid and sleeps)
//	MIDERROR   a top-level error event mid-run, then completes
//	SCHEMA     answers {"answer":"42"} (BADSCHEMA: plain text)
//	DENIED     a command the sandbox refused, then completes
//	CALLBACK   calls the configured MCP server back with its bearer token
//	(default)  reasoning, a command, an answer "echo: <prompt> (turn N)"
//
// Like the real CLI, turn.completed reports the thread's running total, and
// unless it is given --ignore-user-config it loads the user's config.toml
// (CODEX_HOME, else HOME/.codex) and starts each of its stdio MCP servers
// before anything else, and fails as the real one does when a -c url lands
// on a stdio entry of the same name.

const fakeDirEnv = "FAKE_CODEX_DIR"

// call is what the fake records of one invocation.
type call struct {
	Argv   []string          `json:"argv"`
	Stdin  string            `json:"stdin"`
	Env    []string          `json:"env"`
	Cwd    string            `json:"cwd"`
	PID    int               `json:"pid"`
	Resume string            `json:"resume,omitempty"`
	Config map[string]string `json:"config"`
	Flags  map[string]string `json:"flags"`
	Schema string            `json:"schema,omitempty"`
}

type threadState struct {
	Turns        int   `json:"turns"`
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

func fakeCodex(args []string) int {
	dir := os.Getenv(fakeDirEnv)
	out := func(v any) {
		b, _ := json.Marshal(v)
		os.Stdout.Write(append(b, '\n'))
	}
	if len(args) == 0 || args[0] != "exec" {
		fmt.Fprintln(os.Stderr, "fake codex: expected exec")
		return 2
	}
	c := call{Argv: args, Env: os.Environ(), PID: os.Getpid(), Config: map[string]string{}, Flags: map[string]string{}}
	c.Cwd, _ = os.Getwd()
	prompt := ""
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch a {
		case "--json", "--skip-git-repo-check", "--ephemeral", ignoreUserConfig:
			c.Flags[a] = "true"
		case "-s", "-C", "-m", "--output-schema":
			if i+1 >= len(args) {
				fmt.Fprintf(os.Stderr, "error: %s needs a value\n", a)
				return 2
			}
			c.Flags[a] = args[i+1]
			i++
		case "-c":
			k, v, _ := strings.Cut(args[i+1], "=")
			c.Config[k] = v
			i++
		case "resume":
			c.Resume = args[i+1]
			i++
		case "-":
			b, _ := io.ReadAll(os.Stdin)
			prompt = string(b)
		default:
			fmt.Fprintf(os.Stderr, "error: unexpected argument '%s' found\n", a)
			return 2
		}
	}
	c.Stdin = prompt
	if f := c.Flags["--output-schema"]; f != "" {
		b, _ := os.ReadFile(f)
		c.Schema = string(b)
	}
	if rec, err := os.OpenFile(filepath.Join(dir, "calls.jsonl"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
		b, _ := json.Marshal(c)
		rec.Write(append(b, '\n'))
		rec.Close()
	}
	if c.Flags["--json"] == "" {
		fmt.Fprintln(os.Stderr, "fake codex: expected --json")
		return 2
	}
	if c.Flags[ignoreUserConfig] == "" {
		if code := loadUserMCPServers(c); code != 0 {
			return code
		}
	}

	_ = os.MkdirAll(filepath.Join(dir, "threads"), 0o755)
	var st threadState
	id := c.Resume
	if id != "" {
		b, err := os.ReadFile(filepath.Join(dir, "threads", id))
		if err != nil {
			fmt.Fprintf(os.Stderr, "Error: thread %s not found\n", id)
			return 1
		}
		_ = json.Unmarshal(b, &st)
	} else {
		var r [6]byte
		_, _ = rand.Read(r[:])
		id = "019a0000-fake-" + hex.EncodeToString(r[:])
	}
	save := func() {
		b, _ := json.Marshal(st)
		_ = os.WriteFile(filepath.Join(dir, "threads", id), b, 0o644)
	}
	st.Turns++
	save()
	out(map[string]any{"type": "thread.started", "thread_id": id})
	out(map[string]any{"type": "turn.started"})
	complete := func(text string) int {
		out(map[string]any{"type": "item.completed", "item": map[string]any{"id": "item_9", "type": "agent_message", "text": text}})
		st.InputTokens += 100
		st.OutputTokens += 10
		save()
		out(map[string]any{"type": "turn.completed", "usage": map[string]any{
			"input_tokens": st.InputTokens, "cached_input_tokens": 0, "output_tokens": st.OutputTokens}})
		return 0
	}
	switch {
	case strings.Contains(prompt, "CRASH"):
		fmt.Fprintln(os.Stderr, "thread 'main' panicked: fake codex lost its mind")
		return 3
	case strings.Contains(prompt, "FAIL"):
		out(map[string]any{"type": "error", "message": "Reconnecting... 1/1"})
		out(map[string]any{"type": "turn.failed", "error": map[string]any{"message": "model overloaded (fake)"}})
		return 1
	case strings.Contains(prompt, "ESCAPE"):
		// Background processes that leave the group or outlive their
		// parent, holding Codex's stdout and stderr.
		sh := exec.Command("/bin/sh", "-c", leaktest.Escapes(50))
		sh.Stdout, sh.Stderr = os.Stdout, os.Stderr
		if err := sh.Run(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if strings.Contains(prompt, "STAY") {
			_ = os.WriteFile(filepath.Join(dir, "pid"), []byte(fmt.Sprint(os.Getpid())), 0o644)
			time.Sleep(time.Hour)
		}
		return complete("escaped")
	case strings.Contains(prompt, "HANG"):
		gc := exec.Command("/bin/sleep", "60") // stays in our process group
		if err := gc.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		_ = os.WriteFile(filepath.Join(dir, "grandchild"), []byte(fmt.Sprint(gc.Process.Pid)), 0o644)
		_ = os.WriteFile(filepath.Join(dir, "pid"), []byte(fmt.Sprint(os.Getpid())), 0o644)
		time.Sleep(time.Hour)
		return 0
	case strings.Contains(prompt, "MIDERROR"):
		out(map[string]any{"type": "error", "message": "Reconnecting... 2/5 (stream disconnected before completion)"})
		return complete("recovered")
	case strings.Contains(prompt, "BADSCHEMA"):
		return complete("not JSON at all")
	case strings.Contains(prompt, "SCHEMA"):
		if c.Schema == "" {
			return complete("no schema was given")
		}
		return complete(`{"answer":"42"}`)
	case strings.Contains(prompt, "DENIED"):
		out(map[string]any{"type": "item.completed", "item": map[string]any{"id": "item_1", "type": "command_execution",
			"command": "/bin/bash -lc 'touch /etc/x'", "aggregated_output": "touch: cannot touch '/etc/x': Read-only file system\n",
			"exit_code": 1, "status": "failed"}})
		return complete("could not write /etc/x")
	case strings.Contains(prompt, "CALLBACK"):
		return complete(callBack(c, out))
	case strings.Contains(prompt, "WRITE"): // writes codex.txt in its working root (-C, else its cwd)
		_ = os.WriteFile(filepath.Join(cmp.Or(c.Flags["-C"], c.Cwd), "codex.txt"), []byte("by codex\n"), 0o644)
		return complete("wrote codex.txt")
	}
	out(map[string]any{"type": "item.completed", "item": map[string]any{"id": "item_0", "type": "reasoning", "text": "**Thinking**"}})
	out(map[string]any{"type": "item.started", "item": map[string]any{"id": "item_1", "type": "command_execution", "command": "ls", "status": "in_progress"}})
	out(map[string]any{"type": "item.completed", "item": map[string]any{"id": "item_1", "type": "command_execution",
		"command": "ls", "aggregated_output": "a.txt\n", "exit_code": 0, "status": "completed"}})
	first, _, _ := strings.Cut(strings.TrimSpace(prompt), "\n")
	return complete(fmt.Sprintf("echo: %s (turn %d)", first, st.Turns))
}

// callBack does what Codex does with a streamable HTTP MCP server
// configured by url and bearer_token_env_var: POST with the bearer token.
func callBack(c call, out func(any)) string {
	url := unquote(c.Config["mcp_servers.subagent.url"])
	tokenVar := unquote(c.Config["mcp_servers.subagent.bearer_token_env_var"])
	if url == "" || tokenVar == "" {
		return "no callback configured"
	}
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"report","arguments":{"output":"hello from codex"}}}`
	req, _ := http.NewRequest("POST", url, bytes.NewBufferString(body))
	req.Header.Set("Authorization", "Bearer "+os.Getenv(tokenVar))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	item := map[string]any{"id": "item_2", "type": "mcp_tool_call", "server": "subagent", "tool": "report", "status": "completed"}
	if err != nil {
		item["status"], item["error"] = "failed", map[string]any{"message": err.Error()}
		out(map[string]any{"type": "item.completed", "item": item})
		return "callback failed"
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out(map[string]any{"type": "item.completed", "item": item})
	return fmt.Sprintf("called back: %d %s", resp.StatusCode, strings.TrimSpace(string(b)))
}

func unquote(s string) string {
	var v string
	if json.Unmarshal([]byte(s), &v) == nil {
		return v
	}
	return s
}

// loadUserMCPServers does what the real CLI does with the user's
// config.toml: a -c mcp_servers.NAME.url merged into a stdio entry NAME is
// a config error (exit 1); otherwise every stdio server's command is run.
func loadUserMCPServers(c call) int {
	path := userConfigPath(os.Environ(), c.Cwd)
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var cfg struct {
		MCPServers map[string]struct {
			Command string `toml:"command"`
		} `toml:"mcp_servers"`
	}
	if _, err := toml.Decode(string(b), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "Error loading config.toml: %v\n", err)
		return 1
	}
	names := slices.Sorted(maps.Keys(cfg.MCPServers))
	for _, name := range names {
		if cfg.MCPServers[name].Command == "" {
			continue
		}
		if _, ok := c.Config["mcp_servers."+name+".url"]; ok {
			fmt.Fprintf(os.Stderr, "Error loading config.toml: url is not supported for stdio\nin `mcp_servers.%s`\n", name)
			return 1
		}
	}
	for _, name := range names {
		if command := cfg.MCPServers[name].Command; command != "" {
			_ = exec.Command(command).Run()
		}
	}
	return 0
}
