//go:build realcli

package e2e

// The harness of realclient_more_test.go: Qwen Code, opencode, gemini-cli
// and GitHub Copilot CLI as MCP clients of the built binary, each
// registered the way the README tells a user to, each parent's model a
// scripted fake (internal/fakeopenai for the three that speak chat
// completions, internal/fakegemini for gemini-cli), the server's spawn
// children on internal/fakeopenai (childModel).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/fakegemini"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
)

// ourTools are the tools our server lists, by their MCP names.
var ourTools = []string{"subagent", "list_agents", "send_message", "interrupt_agent"}

// moreClient is one of the four clients: how its model names our tools,
// how it hands a tool result to its model, and how to run it.
type moreClient struct {
	name string // the CLI's command name
	// toolName is the name the client's model calls our tool by.
	toolName func(tool string) string
	// shows says what of a result the client's model receives.
	shows resultShape
	// setup writes the client's configuration into home: the fake parent
	// model (parentURL) and our server (command, args, env).
	setup func(t *testing.T, home, parentURL string, args []string, env map[string]string)
	// env is the CLI's environment beyond PATH and HOME.
	env func(home, parentURL string) []string
	// run returns the CLI's arguments and standard input for a one-shot
	// prompt.
	run func(prompt string) (args []string, stdin string)
}

// resultShape is what of an MCP tool result a client's model receives.
type resultShape int

const (
	// jsonThenText: JSON.stringify(structuredContent), "\n", each text
	// block (Qwen Code).
	jsonThenText resultShape = iota
	// textThenJSON: the text blocks, "\n\n", JSON.stringify(structuredContent)
	// (Copilot CLI).
	textThenJSON
	// textOnly: the text blocks; structuredContent is dropped (opencode,
	// gemini-cli).
	textOnly
)

func (s resultShape) String() string {
	return [...]string{"the JSON of structuredContent, then the text", "the text, then the JSON of structuredContent", "the text only"}[s]
}

// decodeAs reads a tool result as a client's model received it: the JSON
// object of structuredContent where the client passes it on.
func decodeAs(shape resultShape, tool, text string) received {
	rec := received{tool: tool, text: text}
	switch shape {
	case jsonThenText:
		var obj map[string]any
		if json.NewDecoder(strings.NewReader(text)).Decode(&obj) == nil {
			rec.obj = obj
		}
	case textThenJSON:
		for i := strings.LastIndex(text, "\n\n{"); i >= 0; i = strings.LastIndex(text[:i], "\n\n{") {
			var obj map[string]any
			if json.Unmarshal([]byte(text[i+2:]), &obj) == nil {
				rec.obj = obj
				break
			}
		}
		if rec.obj == nil { // a result whose text is its JSON comes once
			_ = json.Unmarshal([]byte(strings.TrimSpace(text)), &rec.obj)
		}
	}
	return rec
}

// moreHome is one user's HOME with a client configured: the fake parent
// model and our server registered.
type moreHome struct {
	c       moreClient
	bin     string
	home    string
	url     string // the parent model's base URL
	dataDir string
}

func newMoreHome(t *testing.T, c moreClient, bin, parentURL, dataDir string, child *childModel) *moreHome {
	t.Helper()
	h := &moreHome{c: c, bin: bin, home: realDir(t), url: parentURL, dataDir: dataDir}
	args := []string{"serve", "--data-dir", dataDir, "--log-level", "debug"}
	c.setup(t, h.home, parentURL, args, serverEnvVars(child))
	return h
}

func (h *moreHome) env() []string {
	return append([]string{"PATH=" + cliPATH(h.bin), "HOME=" + h.home}, h.c.env(h.home, h.url)...)
}

// run starts the client with a one-shot prompt in workspace.
func (h *moreHome) run(t *testing.T, workspace, prompt string) *cliRun {
	t.Helper()
	args, stdin := h.c.run(prompt)
	cmd := exec.Command(h.bin, args...)
	cmd.Env, cmd.Dir = h.env(), workspace
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r := &cliRun{name: h.c.name, cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{}), dataDir: h.dataDir}
	cmd.Stdout, cmd.Stderr = r.stdout, r.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", h.c.name, err)
	}
	go func() { r.err = cmd.Wait(); close(r.done) }()
	endGroupAtCleanup(t, cmd, r.done)
	return r
}

func writeJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// ---- the four clients ----

// qwenClient: Qwen Code. ~/.qwen/settings.json names the OpenAI-compatible
// model and registers our server with trust (no approval prompt) and
// alwaysLoadTools (its tools declared to the model, not deferred behind
// tool_search/tool_call).
var qwenClient = moreClient{
	name:     "qwen",
	toolName: func(tool string) string { return "mcp__subagent__" + tool },
	shows:    jsonThenText,
	setup: func(t *testing.T, home, _ string, args []string, env map[string]string) {
		writeJSONFile(t, filepath.Join(home, ".qwen", "settings.json"), map[string]any{
			"security": map[string]any{"auth": map[string]any{"selectedType": "openai"}},
			"model":    map[string]any{"name": "fake-model"},
			"mcpServers": map[string]any{"subagent": map[string]any{
				"command": binary, "args": args, "env": env, "trust": true, "alwaysLoadTools": true,
			}},
		})
	},
	env: func(_, url string) []string {
		return []string{"OPENAI_BASE_URL=" + url, "OPENAI_API_KEY=test", "OPENAI_MODEL=fake-model"}
	},
	run: func(prompt string) ([]string, string) { return []string{"-o", "stream-json", prompt}, "" },
}

// opencodeClient: opencode. ~/.config/opencode/opencode.json declares the
// fake as an OpenAI-compatible provider, our server under "mcp" (command
// an array, env under "environment") and allows its tools. The prompt goes
// on stdin: a positional one with spaces reaches the model quoted.
var opencodeClient = moreClient{
	name:     "opencode",
	toolName: func(tool string) string { return "subagent_" + tool },
	shows:    textOnly,
	setup: func(t *testing.T, home, url string, args []string, env map[string]string) {
		writeJSONFile(t, filepath.Join(home, ".config", "opencode", "opencode.json"), map[string]any{
			"$schema": "https://opencode.ai/config.json",
			"model":   "fake/fake-model", "small_model": "fake/fake-model", "autoupdate": false, "share": "disabled",
			"provider": map[string]any{"fake": map[string]any{
				"npm": "@ai-sdk/openai-compatible", "name": "Fake",
				"options": map[string]any{"baseURL": url, "apiKey": "test"},
				"models":  map[string]any{"fake-model": map[string]any{"name": "Fake", "tool_call": true}},
			}},
			"permission": map[string]any{"subagent_*": "allow"},
			"mcp": map[string]any{"subagent": map[string]any{
				"type": "local", "command": append([]string{binary}, args...), "environment": env, "enabled": true, "timeout": 600000,
			}},
		})
	},
	env: func(home, _ string) []string {
		return append([]string{"OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_AUTOUPDATE=1"}, npmCacheEnv()...)
	},
	run: func(prompt string) ([]string, string) { return []string{"run", "--format", "json"}, prompt },
}

// npmCacheEnv points the npm that opencode runs at its first start (to
// install its plugin package into the temporary HOME) at the user's own
// npm cache, so a second run needs no registry. Offline, the install
// fails in the background and opencode goes on ("background dependency
// install failed" in its log).
func npmCacheEnv() []string {
	cache := os.Getenv("npm_config_cache")
	if cache == "" {
		if home, err := os.UserHomeDir(); err == nil {
			cache = filepath.Join(home, ".npm")
		}
	}
	if cache == "" {
		return nil
	}
	return []string{"npm_config_cache=" + cache, "npm_config_prefer_offline=true"}
}

// geminiClient: gemini-cli. ~/.gemini/settings.json picks API-key auth
// and registers our server with trust; the base URL comes from
// GOOGLE_GEMINI_BASE_URL. --skip-trust: headless, an untrusted folder
// loads no MCP server.
var geminiClient = moreClient{
	name:     "gemini",
	toolName: func(tool string) string { return "mcp_subagent_" + tool },
	shows:    textOnly,
	setup: func(t *testing.T, home, _ string, args []string, env map[string]string) {
		writeJSONFile(t, filepath.Join(home, ".gemini", "settings.json"), map[string]any{
			"security":  map[string]any{"auth": map[string]any{"selectedType": "gemini-api-key"}},
			"general":   map[string]any{"disableAutoUpdate": true},
			"privacy":   map[string]any{"usageStatisticsEnabled": false},
			"telemetry": map[string]any{"enabled": false},
			"mcpServers": map[string]any{"subagent": map[string]any{
				"command": binary, "args": args, "env": env, "trust": true, "timeout": 600000,
			}},
		})
	},
	env: func(_, url string) []string {
		return []string{"GEMINI_API_KEY=test", "GOOGLE_GEMINI_BASE_URL=" + url}
	},
	run: func(prompt string) ([]string, string) {
		return []string{"-p", prompt, "-o", "stream-json", "-m", "fake-model", "--skip-trust"}, ""
	},
}

// copilotClient: GitHub Copilot CLI, offline with a BYOK provider (no
// GitHub login). ~/.copilot/mcp-config.json registers our server;
// --allow-all-tools is what `copilot -p` requires.
var copilotClient = moreClient{
	name:     "copilot",
	toolName: func(tool string) string { return "subagent-" + tool },
	shows:    textThenJSON,
	setup: func(t *testing.T, home, _ string, args []string, env map[string]string) {
		writeJSONFile(t, filepath.Join(home, ".copilot", "mcp-config.json"), map[string]any{
			"mcpServers": map[string]any{"subagent": map[string]any{
				"type": "local", "command": binary, "args": args, "env": env, "tools": []string{"*"},
			}},
		})
	},
	env: func(_, url string) []string {
		return []string{"COPILOT_OFFLINE=true", "COPILOT_PROVIDER_BASE_URL=" + url, "COPILOT_PROVIDER_API_KEY=test", "COPILOT_MODEL=fake-model"}
	},
	run: func(prompt string) ([]string, string) {
		return []string{"-p", prompt, "--allow-all-tools", "--output-format", "json", "--no-auto-update"}, ""
	},
}

// ---- scripted parents ----

// moreStep is one call of a scripted parent to our tool (its MCP name).
type moreStep struct {
	tool   string
	args   any
	onCall func()
}

// script is a parent's plan: the steps' calls in order, then final. A
// request is the script's when a user message carries marker and it
// offers our subagent tool; any other (titles, memory extraction, next
// speaker checks) gets a short generic answer.
type script struct {
	c      moreClient
	marker string
	steps  []moreStep
	final  string

	mu     sync.Mutex
	called map[int]bool
}

// next is what the parent does once done of its steps have results: the
// step's tool name and arguments, or ok false to end with final. A step's
// onCall runs once, when its call is first handed out.
func (s *script) next(done int) (name string, args []byte, ok bool) {
	if done >= len(s.steps) {
		return "", nil, false
	}
	st := s.steps[done]
	args, _ = json.Marshal(st.args)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.called == nil {
		s.called = map[int]bool{}
	}
	if !s.called[done] && st.onCall != nil {
		st.onCall()
	}
	s.called[done] = true
	return s.c.toolName(st.tool), args, true
}

func (s *script) ours(userTexts []string, offers func(string) bool) bool {
	return offers(s.c.toolName("subagent")) && slices.ContainsFunc(userTexts, func(u string) bool { return strings.Contains(u, s.marker) })
}

// chatUserTexts lists the user messages of a chat request.
func chatUserTexts(r fakeopenai.Request) []string {
	var out []string
	for _, m := range r.Messages {
		if m.Role == "user" {
			out = append(out, m.Content)
		}
	}
	return out
}

// chatParent is the parent's model on chat completions: each step is
// called once the previous ones have their tool messages.
func (s *script) chatParent() fakeopenai.Handler {
	return func(n int, r fakeopenai.Request) fakeopenai.Reply {
		if !s.ours(chatUserTexts(r), r.HasTool) {
			return fakeopenai.Reply{Text: "ok"}
		}
		done := 0
		for _, m := range r.Messages {
			if m.Role == "tool" {
				done++
			}
		}
		name, args, ok := s.next(done)
		if !ok {
			return fakeopenai.Reply{Text: s.final}
		}
		return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: name, Arguments: string(args)}}}
	}
}

// geminiParent is the parent's model on the Gemini API.
func (s *script) geminiParent() fakegemini.Handler {
	return func(n int, r fakegemini.Request) fakegemini.Reply {
		if !s.ours(r.UserTexts(), r.HasTool) {
			return fakegemini.Reply{Text: "ok"}
		}
		name, args, ok := s.next(len(r.FunctionResponses()))
		if !ok {
			return fakegemini.Reply{Text: s.final}
		}
		return fakegemini.Reply{Calls: []fakegemini.FunctionCall{{Name: name, Args: args}}}
	}
}

// ---- what the model received ----

// modelView is what the parent's model was shown in the fullest request
// of the script's session: the tools offered and our tools' results.
type modelView struct {
	tools   []string
	results []received
}

// bareTool is our tool's MCP name from the client's name for it, or "".
func bareTool(c moreClient, name string) string {
	for _, t := range ourTools {
		if c.toolName(t) == name {
			return t
		}
	}
	return ""
}

func chatView(s *script, api *fakeopenai.Server) modelView {
	var last *fakeopenai.Request
	for _, r := range api.Requests() {
		if s.ours(chatUserTexts(r), r.HasTool) && (last == nil || len(r.Messages) >= len(last.Messages)) {
			r := r
			last = &r
		}
	}
	if last == nil {
		return modelView{}
	}
	v := modelView{}
	for _, t := range last.Tools {
		v.tools = append(v.tools, t.Name)
	}
	names := map[string]string{} // tool_call_id → name
	for _, m := range last.Messages {
		for _, tc := range m.ToolCalls {
			names[tc.ID] = tc.Name
		}
		if m.Role == "tool" {
			name := names[m.ToolCallID]
			if b := bareTool(s.c, name); b != "" {
				name = b
			}
			v.results = append(v.results, decodeAs(s.c.shows, name, m.Content))
		}
	}
	return v
}

func geminiView(s *script, api *fakegemini.Server) modelView {
	var last *fakegemini.Request
	for _, r := range api.Requests() {
		if s.ours(r.UserTexts(), r.HasTool) && (last == nil || len(r.Contents) >= len(last.Contents)) {
			r := r
			last = &r
		}
	}
	if last == nil {
		return modelView{}
	}
	v := modelView{tools: last.ToolNames()}
	for _, fr := range last.FunctionResponses() {
		name := fr.Name
		if b := bareTool(s.c, name); b != "" {
			name = b
		}
		v.results = append(v.results, decodeAs(s.c.shows, name, functionResponseText(fr.Response)))
	}
	return v
}

// functionResponseText is what gemini-cli put in a functionResponse: its
// "output" (or "error") string, else the raw JSON.
func functionResponseText(raw json.RawMessage) string {
	var m map[string]any
	if json.Unmarshal(raw, &m) == nil {
		for _, k := range []string{"output", "error"} {
			if s, ok := m[k].(string); ok {
				return s
			}
		}
	}
	return string(bytes.TrimSpace(raw))
}

// backgroundIDRE finds the handle in a background start's text.
var backgroundIDRE = regexp.MustCompile(`started subagent (\S+) in the background`)

// textNotice reports whether the model read the settlement notice of id,
// with closing, in a result's text: "[subagent-settled from ID]\n…".
func textNotice(rs []received, id, closing string) bool {
	head := fmt.Sprintf("[subagent-settled from %s]", id)
	for _, r := range rs {
		if _, after, ok := strings.Cut(r.text, head); ok && strings.Contains(after, closing) {
			return true
		}
	}
	return false
}
