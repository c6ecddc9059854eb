package claudecode

// A fake `claude` made by re-executing the test binary: TestMain runs
// fakeClaude instead of the tests when FAKE_CLAUDE_MODE is set. It parses
// the flags the way the real CLI does (variadic lists end at the next
// flag; --flag=value works), keeps sessions per cwd like the real CLI (so
// --resume from another cwd fails), records every call (argv, stdin, cwd,
// environment, the MCP configuration it was given) in FAKE_CLAUDE_DIR,
// and prints real stream-json lines for the scenario named in the prompt
// ("SCENARIO:<name>").

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/subreaper"
)

const (
	envFakeMode = "FAKE_CLAUDE_MODE" // "claude": act as claude; "sleeper": a grandchild that sleeps
	envFakeDir  = "FAKE_CLAUDE_DIR"  // where calls are recorded and sessions kept
)

func TestMain(m *testing.M) {
	subreaper.Main() // a supervisor of the processes the tests start, when re-executed as one
	switch os.Getenv(envFakeMode) {
	case "claude":
		os.Exit(fakeClaude())
	case "sleeper":
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeCall is what the fake records of one invocation.
type fakeCall struct {
	Args      []string `json:"args"`
	Stdin     string   `json:"stdin"`
	Cwd       string   `json:"cwd"`
	Env       []string `json:"env"`
	MCPConfig string   `json:"mcp_config,omitempty"` // the --mcp-config file's content
	MCPMode   string   `json:"mcp_mode,omitempty"`   // ...and its permissions
	Session   string   `json:"session"`              // the session the call ran in
	Flags     fakeArgs `json:"flags"`
}

type fakeArgs struct {
	Print, Verbose, Strict, NoPersist                 bool
	OutputFormat, Model, PermissionMode               string
	SessionID, Resume, JSONSchema, AppendSystemPrompt string
	MaxBudget, Effort                                 string
	ToolsSet                                          bool
	Tools, Allowed, Disallowed, MCPConfigs            []string
}

// parseFakeArgs parses argv as commander.js does for the flags the
// provider uses; an unknown flag is an error, as in the real CLI.
func parseFakeArgs(argv []string) (fakeArgs, error) {
	var a fakeArgs
	bools := map[string]*bool{"-p": &a.Print, "--print": &a.Print, "--verbose": &a.Verbose,
		"--strict-mcp-config": &a.Strict, "--no-session-persistence": &a.NoPersist}
	values := map[string]*string{"--output-format": &a.OutputFormat, "--model": &a.Model, "--permission-mode": &a.PermissionMode,
		"--session-id": &a.SessionID, "--resume": &a.Resume, "-r": &a.Resume, "--json-schema": &a.JSONSchema,
		"--append-system-prompt": &a.AppendSystemPrompt, "--max-budget-usd": &a.MaxBudget,
		"--effort": &a.Effort}
	lists := map[string]*[]string{"--tools": &a.Tools, "--allowedTools": &a.Allowed, "--allowed-tools": &a.Allowed,
		"--disallowedTools": &a.Disallowed, "--disallowed-tools": &a.Disallowed, "--mcp-config": &a.MCPConfigs}
	for i := 0; i < len(argv); i++ {
		arg := argv[i]
		name, val, hasVal := strings.Cut(arg, "=")
		if !strings.HasPrefix(arg, "-") {
			return a, fmt.Errorf("unexpected argument %q (the prompt must come on stdin)", arg)
		}
		switch {
		case bools[name] != nil && !hasVal:
			*bools[name] = true
		case values[name] != nil:
			if !hasVal {
				if i+1 >= len(argv) || strings.HasPrefix(argv[i+1], "-") {
					return a, fmt.Errorf("option '%s' argument missing", name)
				}
				i++
				val = argv[i]
			}
			*values[name] = val
		case lists[name] != nil:
			if name == "--tools" {
				a.ToolsSet = true
			}
			if hasVal {
				*lists[name] = append(*lists[name], val)
				continue
			}
			n := 0
			for i+1 < len(argv) && !strings.HasPrefix(argv[i+1], "-") {
				i++
				n++
				*lists[name] = append(*lists[name], argv[i])
			}
			if n == 0 {
				return a, fmt.Errorf("option '%s' argument missing", name)
			}
		default:
			return a, fmt.Errorf("unknown option '%s'", arg)
		}
	}
	// The levels claude 2.1.332's --help lists.
	if a.Effort != "" && !slices.Contains([]string{"low", "medium", "high", "xhigh", "max"}, a.Effort) {
		return a, fmt.Errorf("option '--effort <level>' argument '%s' is invalid", a.Effort)
	}
	return a, nil
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func fakeClaude() int {
	dir := os.Getenv(envFakeDir)
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		return 1
	}
	flags, err := parseFakeArgs(os.Args[1:])
	if err != nil {
		return fail("error: %v", err)
	}
	if !flags.Print {
		return fail("fake claude: only -p is supported")
	}
	if flags.OutputFormat == "stream-json" && !flags.Verbose {
		return fail("Error: When using --print, --output-format=stream-json requires --verbose")
	}
	stdin, _ := io.ReadAll(os.Stdin)
	prompt := string(stdin)
	cwd, _ := os.Getwd()
	call := fakeCall{Args: os.Args[1:], Stdin: prompt, Cwd: cwd, Env: os.Environ(), Flags: flags}
	for _, c := range flags.MCPConfigs {
		b, err := os.ReadFile(c)
		if err != nil {
			return fail("Error: Invalid MCP configuration: %v", err)
		}
		call.MCPConfig = string(b)
		if fi, err := os.Stat(c); err == nil {
			call.MCPMode = fi.Mode().Perm().String()
		}
	}

	// Sessions live per cwd, as the real CLI keeps them under
	// projects/<cwd>/<id>.jsonl.
	sessDir := filepath.Join(dir, "sessions", strings.ReplaceAll(cwd, string(filepath.Separator), "-"))
	var history []string
	session := flags.SessionID
	switch {
	case flags.Resume != "":
		if flags.SessionID != "" {
			return fail("Error: --session-id cannot be used with --resume")
		}
		session = flags.Resume
		b, err := os.ReadFile(filepath.Join(sessDir, session+".json"))
		if err != nil {
			return fail("No conversation found with session ID: %s", session)
		}
		_ = json.Unmarshal(b, &history)
	case flags.SessionID != "":
		if !uuidRE.MatchString(flags.SessionID) {
			return fail("Error: Invalid session ID. Must be a valid UUID.")
		}
		if _, err := os.Stat(filepath.Join(sessDir, session+".json")); err == nil {
			return fail("Error: Session ID %s is already in use.", session)
		}
	default:
		session = "00000000-0000-4000-8000-" + fmt.Sprintf("%012d", os.Getpid())
	}
	call.Session = session
	recordCall(dir, call)
	if !flags.NoPersist {
		_ = os.MkdirAll(sessDir, 0o755)
		b, _ := json.Marshal(append(history, prompt))
		_ = os.WriteFile(filepath.Join(sessDir, session+".json"), b, 0o644)
	}

	out := json.NewEncoder(os.Stdout)
	emit := func(v map[string]any) { _ = out.Encode(v) }
	emit(map[string]any{"type": "system", "subtype": "init", "cwd": cwd, "session_id": session,
		"tools": []string{"Bash", "Read", "Edit"}, "mcp_servers": []any{}, "model": orText(flags.Model, "claude-fake"),
		"permissionMode": flags.PermissionMode, "apiKeySource": "ANTHROPIC_API_KEY", "claude_code_version": "2.1.197-fake",
		"uuid": "u-init"})
	msgID := 0
	assistant := func(content ...map[string]any) {
		msgID++
		emit(map[string]any{"type": "assistant", "message": map[string]any{"id": fmt.Sprintf("msg_%d", msgID), "type": "message",
			"role": "assistant", "model": "claude-fake", "content": content, "stop_reason": nil,
			"usage": map[string]any{"input_tokens": 100, "output_tokens": 7}},
			"parent_tool_use_id": nil, "session_id": session, "uuid": fmt.Sprintf("u-%d", msgID)})
	}
	toolResult := func(id, text string, isErr bool) {
		emit(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": []map[string]any{
			{"type": "tool_result", "tool_use_id": id, "content": text, "is_error": isErr}}},
			"parent_tool_use_id": nil, "session_id": session})
	}
	text := func(s string) map[string]any { return map[string]any{"type": "text", "text": s} }
	toolUse := func(id, name string, input any) map[string]any {
		return map[string]any{"type": "tool_use", "id": id, "name": name, "input": input}
	}
	result := func(subtype string, isErr bool, res string, extra map[string]any) {
		r := map[string]any{"type": "result", "subtype": subtype, "is_error": isErr, "duration_ms": 12, "num_turns": 1,
			"result": res, "session_id": session, "total_cost_usd": 0.0123,
			"usage":      map[string]any{"input_tokens": 100, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 30, "output_tokens": 7},
			"modelUsage": map[string]any{}, "permission_denials": []any{}, "uuid": "u-result"}
		if subtype != "success" {
			delete(r, "result")
		}
		for k, v := range extra {
			r[k] = v
		}
		emit(r)
	}

	scenario := "echo"
	if _, rest, ok := strings.Cut(prompt, "SCENARIO:"); ok {
		scenario = strings.Fields(rest)[0]
	}
	switch scenario {
	case "echo", "slow":
		if scenario == "slow" {
			time.Sleep(300 * time.Millisecond)
		}
		reply := fmt.Sprintf("turn %d: %s", len(history)+1, prompt)
		if len(history) > 0 {
			reply += " | history: " + strings.Join(history, " / ")
		}
		assistant(map[string]any{"type": "thinking", "thinking": "hmm"})
		assistant(text(reply))
		result("success", false, reply, nil)
	case "write": // writes claude.txt in its cwd, as its Write tool would
		_ = os.WriteFile(filepath.Join(cwd, "claude.txt"), []byte("by claude\n"), 0o644)
		assistant(text("wrote claude.txt"))
		result("success", false, "wrote claude.txt", nil)
	case "api-error":
		msg := "API Error: 529 {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}"
		emit(map[string]any{"type": "assistant", "message": map[string]any{"id": "synthetic-1", "model": "<synthetic>", "role": "assistant",
			"content": []map[string]any{text(msg)}, "usage": map[string]any{"input_tokens": 0, "output_tokens": 0}},
			"parent_tool_use_id": nil, "session_id": session, "error": "unknown"})
		result("success", true, msg, map[string]any{"total_cost_usd": 0, "usage": map[string]any{"input_tokens": 0, "output_tokens": 0}})
		return 1
	case "max-turns":
		assistant(text("Let me look."), toolUse("toolu_1", "Bash", map[string]any{"command": "ls"}))
		toolResult("toolu_1", "a b c", false)
		result("error_max_turns", true, "", map[string]any{"num_turns": 3})
		return 1
	case "during-execution":
		assistant(text("Starting."))
		result("error_during_execution", true, "", map[string]any{"errors": []string{"tool crashed: boom"}})
		return 1
	case "max-budget":
		result("error_max_budget_usd", true, "", map[string]any{"total_cost_usd": 0.5})
		return 1
	case "structured-retries":
		result("error_max_structured_output_retries", true, "", map[string]any{"errors": []string{"Failed to provide valid structured output after 5 attempts"}})
		return 1
	case "no-result":
		assistant(text("about to crash"))
		fmt.Fprintln(os.Stderr, "fatal: the fake crashed hard")
		return 3
	case "structured", "structured-missing", "structured-wrong":
		if flags.JSONSchema == "" {
			assistant(text("no schema given"))
			result("success", false, "no schema given", nil)
			return 0
		}
		obj := map[string]any{"answer": 42}
		if scenario == "structured-wrong" {
			obj = map[string]any{"answer": "forty-two"}
		}
		assistant(toolUse("toolu_s", "StructuredOutput", obj))
		toolResult("toolu_s", "Structured output provided successfully", false)
		b, _ := json.Marshal(obj)
		extra := map[string]any{"structured_output": obj}
		if scenario == "structured-missing" {
			extra = nil
		}
		result("success", false, string(b), extra)
	case "denied":
		assistant(toolUse("toolu_1", "Bash", map[string]any{"command": "rm -rf build"}))
		toolResult("toolu_1", "Permission to use Bash has been denied because Claude Code is running in don't ask mode.", true)
		assistant(toolUse("toolu_2", "Bash", map[string]any{"command": "rm -r build"}))
		toolResult("toolu_2", "Permission to use Bash has been denied because Claude Code is running in don't ask mode.", true)
		assistant(toolUse("toolu_3", "Write", map[string]any{"file_path": "x", "content": "y"}))
		toolResult("toolu_3", "Permission to use Write has been denied because Claude Code is running in don't ask mode.", true)
		assistant(text("I was not allowed to clean the build."))
		result("success", false, "I was not allowed to clean the build.", map[string]any{"permission_denials": []map[string]any{
			{"tool_name": "Bash", "tool_use_id": "toolu_1", "tool_input": map[string]any{"command": "rm -rf build"}},
			{"tool_name": "Bash", "tool_use_id": "toolu_2", "tool_input": map[string]any{"command": "rm -r build"}},
			{"tool_name": "Write", "tool_use_id": "toolu_3", "tool_input": map[string]any{"file_path": "x"}}}})
	case "sleep", "sleep-stubborn":
		if scenario == "sleep-stubborn" {
			signal.Ignore(syscall.SIGTERM)
		}
		exe, _ := os.Executable()
		gc := exec.Command(exe)
		gc.Env = []string{envFakeMode + "=sleeper"}
		if err := gc.Start(); err != nil {
			return fail("fake: %v", err)
		}
		_ = os.WriteFile(filepath.Join(dir, "pids"), fmt.Appendf(nil, "%d %d", os.Getpid(), gc.Process.Pid), 0o644)
		assistant(text("working on it"))
		time.Sleep(time.Minute)
		result("success", false, "woke up", nil)
	case "linger":
		assistant(text("done, but slow to exit"))
		result("success", false, "done, but slow to exit", nil)
		_ = os.WriteFile(filepath.Join(dir, "pids"), fmt.Appendf(nil, "%d", os.Getpid()), 0o644)
		time.Sleep(time.Minute)
	case "delegate":
		// Call this server back as the callback configuration says, the way
		// an MCP client would authenticate.
		var cfg struct {
			MCPServers map[string]struct {
				URL     string            `json:"url"`
				Headers map[string]string `json:"headers"`
			} `json:"mcpServers"`
		}
		if err := json.Unmarshal([]byte(call.MCPConfig), &cfg); err != nil {
			return fail("fake: no MCP configuration: %v", err)
		}
		srv := cfg.MCPServers["subagent"]
		req, _ := http.NewRequest("POST", srv.URL, bytes.NewBufferString("grandchild task"))
		for k, v := range srv.Headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fail("fake: callback: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assistant(toolUse("toolu_d", "mcp__subagent__subagent", map[string]any{"prompt": "grandchild task"}))
		toolResult("toolu_d", string(body), resp.StatusCode != 200)
		reply := "callback said: " + string(body)
		assistant(text(reply))
		result("success", false, reply, nil)
	default:
		return fail("fake: unknown scenario %q", scenario)
	}
	return 0
}

func recordCall(dir string, c fakeCall) {
	calls := filepath.Join(dir, "calls")
	_ = os.MkdirAll(calls, 0o755)
	b, _ := json.MarshalIndent(c, "", "  ")
	for i := 1; ; i++ {
		f, err := os.OpenFile(filepath.Join(calls, fmt.Sprintf("%03d.json", i)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			if os.IsExist(err) {
				continue
			}
			return
		}
		_, _ = f.Write(b)
		_ = f.Close()
		return
	}
}
