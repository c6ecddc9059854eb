//go:build realcli

package e2e

// Real ACP agents as children of the acp provider, each on a fake model:
// qwen, opencode and copilot on internal/fakeopenai, claude-code-acp on
// internal/fakeanthropic. The config names only the command (and the
// model wiring in env): the provider's presets add the rest. Each test:
// a delegation completes; under the default permission policy the
// child's report reaches its parent; list_agents shows non-zero usage;
// an interrupt stops a long turn and leaves
// no process of the agent.
//
// The CLIs come from npm (.ci/run installs them into
// $MCP_SUBAGENT_NPM_PREFIX, default ~/.cache/mcp-subagent-npm); a missing
// one skips its test, or fails it with CI=true.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeanthropic"
	"github.com/mcp-subagent/mcp-subagent/internal/fakegemini"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
)

// acpTurnTimeout bounds one real agent's turn: CLIENTS.md measured 2–15 s,
// opencode and qwen slowest, more on a busy machine.
const acpTurnTimeout = 120 * time.Second

// realACP is one real ACP agent: its CLI, and its model wiring.
type realACP struct {
	cli string // the executable's name (its preset is chosen by it)
	// env is the child's environment besides PATH: HOME and the model
	// wiring, given the fake model's URL.
	env       func(t *testing.T, home, url string) map[string]string
	anthropic bool     // the agent speaks the Anthropic API
	gemini    bool     // the agent speaks the Gemini API (else chat completions)
	args      []string // beyond what the preset adds
}

var realACPAgents = map[string]realACP{
	"qwen": {cli: "qwen",
		env: func(t *testing.T, home, url string) map[string]string {
			return map[string]string{"OPENAI_BASE_URL": url, "OPENAI_API_KEY": "test-key", "OPENAI_MODEL": "fake-model"}
		}},
	"opencode": {cli: "opencode", env: func(t *testing.T, home, url string) map[string]string {
		cfg := map[string]any{"model": "fake/fake-model", "small_model": "fake/fake-model", "autoupdate": false, "share": "disabled",
			"provider": map[string]any{"fake": map[string]any{"npm": "@ai-sdk/openai-compatible", "name": "Fake",
				"options": map[string]any{"baseURL": url, "apiKey": "test-key"},
				"models":  map[string]any{"fake-model": map[string]any{"name": "Fake", "tool_call": true}}}}}
		b, _ := json.Marshal(cfg)
		dir := filepath.Join(home, ".config", "opencode")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "opencode.json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		return map[string]string{"OPENCODE_DISABLE_MODELS_FETCH": "1"}
	}},
	"copilot": {cli: "copilot", env: func(t *testing.T, home, url string) map[string]string {
		return map[string]string{"COPILOT_OFFLINE": "true", "COPILOT_PROVIDER_BASE_URL": url,
			"COPILOT_PROVIDER_API_KEY": "test-key", "COPILOT_MODEL": "fake-model"}
	}},
	"gemini": {cli: "gemini", gemini: true, args: []string{"-m", "fake-model"}, env: func(t *testing.T, home, url string) map[string]string {
		return map[string]string{"GEMINI_API_KEY": "test-key", "GOOGLE_GEMINI_BASE_URL": url}
	}},
	"claude-code-acp": {cli: "claude-code-acp", anthropic: true, env: func(t *testing.T, home, url string) map[string]string {
		return map[string]string{"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "test-key",
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "CLAUDE_CONFIG_DIR": filepath.Join(home, ".claude")}
	}},
}

func TestACPRealQwen(t *testing.T)          { runRealACP(t, "qwen") }
func TestACPRealOpencode(t *testing.T)      { runRealACP(t, "opencode") }
func TestACPRealCopilot(t *testing.T)       { runRealACP(t, "copilot") }
func TestACPRealClaudeCodeACP(t *testing.T) { runRealACP(t, "claude-code-acp") }
func TestACPRealGemini(t *testing.T)        { runRealACP(t, "gemini") }

// findACPCLI finds an agent's executable on PATH or in the npm prefix. It
// does not run it (an ACP agent may wait on stdin instead of printing a
// version).
func findACPCLI(t *testing.T, name string) string {
	t.Helper()
	prefix := os.Getenv("MCP_SUBAGENT_NPM_PREFIX")
	if prefix == "" {
		prefix = filepath.Join(os.Getenv("HOME"), ".cache", "mcp-subagent-npm")
	}
	for _, p := range []string{filepath.Join(prefix, "bin", name)} {
		if isExecutableFile(p) {
			return p
		}
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if p := filepath.Join(dir, name); isExecutableFile(p) {
			return p
		}
	}
	skipOrFail(t, fmt.Sprintf("%s not installed (looked in %s/bin and on PATH; .ci/run installs it from npm)", name, prefix))
	return ""
}

// acpModel scripts the child's model. A prompt with "ACP-REPORT <nonce>"
// makes it call the report tool, then close with "ACP-DONE <nonce>"; one
// with "ACP-HOLD" is held unanswered until the test ends (a long turn).
// Other requests (titles, memory extraction) get a short text.
type acpModel struct {
	nonce   string
	stop    chan struct{}
	held    chan struct{} // closed when a held request arrives
	once    sync.Once
	mu      sync.Mutex
	offered [][]string      // the tool names of each request, for failures
	named   map[string]bool // names of our tools the requests mention, for failures
	results []string        // the tool results the model got
}

var ourToolRE = regexp.MustCompile(`[A-Za-z_]*subagent[A-Za-z_-]*`)

func (m *acpModel) saw(names []string, raw string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.offered = append(m.offered, names)
	if m.named == nil {
		m.named = map[string]bool{}
	}
	for _, n := range ourToolRE.FindAllString(raw, -1) {
		m.named[n] = true
	}
}

var reportToolNames = []string{"mcp__subagent__report", "subagent_report", "subagent-report", "mcp_subagent_report"}

func (m *acpModel) hold() {
	m.once.Do(func() { close(m.held) })
	<-m.stop
}

func (m *acpModel) done(result string) string {
	if len(result) > 200 {
		result = result[:200]
	}
	return "ACP-DONE " + m.nonce + " (the tool said: " + result + ")"
}

func (m *acpModel) openai(n int, req fakeopenai.Request) fakeopenai.Reply {
	var names []string
	for _, tl := range req.Tools {
		names = append(names, tl.Name)
	}
	raw := string(req.Raw)
	m.saw(names, raw)
	switch {
	case len(req.Tools) == 0:
		return fakeopenai.Reply{Text: "A title"}
	case strings.Contains(req.LastUserText(), "ACP-HOLD"):
		m.hold()
		return fakeopenai.Reply{Status: 500, ErrorMessage: "the test ended"}
	case !strings.Contains(raw, "ACP-REPORT "+m.nonce):
		return fakeopenai.Reply{Text: "nothing to do"}
	}
	args := map[string]any{"output": "REPORTED " + m.nonce}
	if res, ok := req.LastToolResult(); ok {
		m.mu.Lock()
		m.results = append(m.results, res)
		m.mu.Unlock()
		// qwen offers MCP tools deferred: its model looks one up with
		// tool_search, then calls it through tool_call.
		if lastToolCall(req) == "tool_search" && strings.Contains(res, `"name":"mcp__subagent__report"`) {
			b, _ := json.Marshal(map[string]any{"name": "mcp__subagent__report", "arguments": args})
			return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "tool_call", Arguments: string(b)}}}
		}
		return fakeopenai.Reply{Text: m.done(res)}
	}
	for _, name := range reportToolNames {
		if req.HasTool(name) {
			b, _ := json.Marshal(args)
			return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: name, Arguments: string(b)}}}
		}
	}
	if req.HasTool("tool_search") { // qwen defers MCP tools behind tool_search and tool_call
		return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "tool_search", Arguments: `{"query":"select:mcp__subagent__report"}`}}}
	}
	return fakeopenai.Reply{Text: "NO REPORT TOOL among " + strings.Join(names, ",")}
}

func (m *acpModel) geminiReply(_ int, req fakegemini.Request) fakegemini.Reply {
	names := req.ToolNames()
	m.saw(names, string(req.Raw))
	text := func(s string) fakegemini.Reply { return fakegemini.Reply{Text: s} }
	switch {
	case len(names) == 0: // its side requests (next speaker, titles) want JSON
		return text(`{"next_speaker":"user","reasoning":"done"}`)
	case strings.Contains(req.LastUserText(), "ACP-HOLD"):
		m.hold()
		return fakegemini.Reply{Status: http.StatusInternalServerError, ErrorMessage: "the test ended"}
	case !strings.Contains(string(req.Raw), "ACP-REPORT "+m.nonce):
		return text("nothing to do")
	}
	if n := len(req.Contents); n > 0 {
		for _, p := range req.Contents[n-1].Parts {
			if p.FunctionResponse != nil {
				return text(m.done(string(p.FunctionResponse.Response)))
			}
		}
	}
	for _, n := range names {
		if n == "mcp_subagent_report" {
			return fakegemini.Reply{Calls: []fakegemini.FunctionCall{{Name: n, Args: json.RawMessage(`{"output":"REPORTED ` + m.nonce + `"}`)}}}
		}
	}
	return text("NO REPORT TOOL among " + strings.Join(names, ","))
}

// lastToolCall is the name of the last tool the conversation called.
func lastToolCall(req fakeopenai.Request) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if tc := req.Messages[i].ToolCalls; len(tc) > 0 {
			return tc[len(tc)-1].Name
		}
	}
	return ""
}

func (m *acpModel) anthropic(req fakeanthropic.Request) fakeanthropic.Reply {
	m.saw(req.ToolNames(), string(req.Raw))
	switch {
	case !req.IsAgentLoop():
		return fakeanthropic.Reply{Text: "A title"}
	case strings.Contains(lastUserText(req), "ACP-HOLD"):
		m.once.Do(func() { close(m.held) })
		return fakeanthropic.Reply{Hang: true}
	case !strings.Contains(req.Text(), "ACP-REPORT "+m.nonce):
		return fakeanthropic.Reply{Text: "nothing to do"}
	}
	if rs := req.ResultsOf("mcp__subagent__report"); len(rs) > 0 {
		return fakeanthropic.Reply{Text: m.done(rs[len(rs)-1].Text)}
	}
	return fakeanthropic.Reply{ToolUses: []fakeanthropic.ToolUse{fakeanthropic.Use(req, "mcp__subagent__report", map[string]any{"output": "REPORTED " + m.nonce})}}
}

// lastUserText is the text of the last user message with text.
func lastUserText(req fakeanthropic.Request) string {
	ts := req.UserTexts()
	if len(ts) == 0 {
		return ""
	}
	return ts[len(ts)-1]
}

// markedProcesses lists the pids whose environment holds mark: the agent
// and everything it started.
func markedProcesses(mark string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, kv := range strings.Split(string(b), "\x00") {
			if kv == mark {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

var tokensRE = regexp.MustCompile(`(\d+) in / (\d+) out tokens`)

func runRealACP(t *testing.T, name string) {
	a := realACPAgents[name]
	bin := findACPCLI(t, a.cli)
	nonce := fmt.Sprintf("%x", time.Now().UnixNano())
	m := &acpModel{nonce: nonce, stop: make(chan struct{}), held: make(chan struct{})}
	var url string
	switch {
	case a.gemini:
		fake := fakegemini.New(m.geminiReply)
		t.Cleanup(fake.Close)
		url = fake.URL()
	case a.anthropic:
		fake := fakeanthropic.New(m.anthropic)
		t.Cleanup(fake.Close)
		url = fake.URL()
	default:
		fake := fakeopenai.New(m.openai)
		t.Cleanup(fake.Close)
		url = fake.URL()
	}
	t.Cleanup(func() { close(m.stop) }) // runs first: held requests give up
	home := realDir(t)
	mark := "MCP_SUBAGENT_ACP_TEST=" + nonce
	env := a.env(t, home, url)
	env["HOME"], env["PATH"] = home, cliPATH(bin)
	env["MCP_SUBAGENT_ACP_TEST"] = nonce
	// The config form: kind, and the command as an array.
	pc := map[string]any{"name": name, "kind": "acp", "command": append([]string{bin}, a.args...), "env": env,
		"pass_env": []string{}, "timeout_seconds": acpTurnTimeout.Seconds()}
	cfg, _ := json.Marshal(map[string]any{"providers": []any{pc}})
	s := start(t, nil, serverOpts{config: string(cfg)})
	t.Cleanup(func() {
		{
			m.mu.Lock()
			t.Logf("tools offered per model request: %q; names of ours mentioned: %v", m.offered, m.named)
			for _, r := range m.results {
				if len(r) > 400 {
					r = r[:400]
				}
				t.Logf("a tool result: %q", r)
			}
			m.mu.Unlock()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*acpTurnTimeout)
	defer cancel()

	// A delegation completes, and the child's report reaches its parent
	// under the default (deny) policy.
	res := s.call(t, ctx, "subagent", map[string]any{"description": "report back", "provider": name,
		"prompt": "ACP-REPORT " + nonce + ": call the report tool, then say you are done."})
	got := text(res)
	if res.IsError || !strings.Contains(got, "ACP-DONE "+nonce) {
		t.Fatalf("the delegation did not complete: isError=%v %q\nserver log:\n%s", res.IsError, got, s.stderr)
	}
	if !strings.Contains(got, "[subagent-report from agent-") || !strings.Contains(got, "REPORTED "+nonce) {
		t.Errorf("the child's report did not reach its parent: %q\nserver log:\n%s", got, s.stderr)
	}
	// It ran confined: the default where the kernel has Landlock.
	if abi, _ := sandbox.ABI(); abi >= 1 && !strings.Contains(s.stderr.String(), `"msg":"external agent confined"`) {
		t.Errorf("the agent did not run confined by default\nserver log:\n%s", s.stderr)
	}
	fg := structured(t, res)
	for _, l := range strings.Split(s.stderr.String(), "\n") {
		if strings.Contains(l, "ACP permission request answered") {
			t.Logf("%s", l)
		}
	}

	// list_agents shows the child's usage.
	rows := text(s.call(t, ctx, "list_agents", map[string]any{}))
	var line string
	for _, l := range strings.Split(rows, "\n") {
		if strings.HasPrefix(l, fg.AgentID+" ") {
			line = l
		}
	}
	if mm := tokensRE.FindStringSubmatch(line); mm == nil || mm[1]+mm[2] == "00" {
		t.Errorf("list_agents shows no usage for %s: %q (all rows: %q)", fg.AgentID, line, rows)
	} else {
		t.Logf("list_agents: %s", line)
	}

	// An interrupt stops a long turn, and no process of the agent is left.
	bg := s.call(t, ctx, "subagent", map[string]any{"description": "long turn", "provider": name,
		"prompt": "ACP-HOLD " + nonce, "run_in_background": true})
	var h handleSC
	decodeSC(t, bg, &h)
	select {
	case <-m.held:
	case <-time.After(acpTurnTimeout):
		t.Fatalf("the held turn never reached the model\nserver log:\n%s", s.stderr)
	}
	if len(markedProcesses(mark)) == 0 {
		t.Fatal("no process of the agent found while its turn runs (the probe is broken)")
	}
	ir := s.call(t, ctx, "interrupt_agent", map[string]any{"agent_id": h.AgentID})
	if ir.IsError {
		t.Fatalf("interrupt_agent: %s", text(ir))
	}
	if !waitFor(30*time.Second, func() bool {
		rows := text(s.call(t, ctx, "list_agents", map[string]any{}))
		for _, l := range strings.Split(rows, "\n") {
			if strings.HasPrefix(l, h.AgentID+" ") {
				return !strings.Contains(l, "[running]") && strings.Contains(l, "last turn aborted")
			}
		}
		return false
	}) {
		t.Errorf("the interrupted child did not end its turn as aborted: %s", text(s.call(t, ctx, "list_agents", map[string]any{})))
	}
	if !waitFor(15*time.Second, func() bool { return len(markedProcesses(mark)) == 0 }) {
		t.Errorf("processes of the agent outlived the interrupt: %v", markedProcesses(mark))
	}
}
