//go:build e2e || realcli || browser

package e2e

// The harness of realclient_test.go: the real Claude Code and Codex CLIs
// as MCP clients of the built binary, registered the way a user does it,
// each parent's model a scripted fake (internal/fakeanthropic,
// internal/fakeresponses) and the server's spawn children on
// internal/fakeopenai.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeanthropic"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeresponses"
)

// realCLITimeout bounds one real-client test.
const realCLITimeout = 3 * time.Minute

// skipOrFail skips a test whose CLI is missing, except in CI (CI=true),
// where a missing CLI is a broken install and fails the test.
func skipOrFail(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: a missing CLI fails instead of skipping)", msg)
	}
	t.Skip(msg)
}

func isExecutableFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// findCLI finds a CLI that runs (`NAME --version` succeeds): on PATH, then
// in $MCP_SUBAGENT_NPM_PREFIX/bin, then (Claude Code) the native binary of
// the npm platform package, used when the install script that copies it
// over bin/claude did not run.
func findCLI(t *testing.T, name string) string {
	t.Helper()
	var candidates []string
	if p, err := exec.LookPath(name); err == nil {
		candidates = append(candidates, p)
	}
	if prefix := os.Getenv("MCP_SUBAGENT_NPM_PREFIX"); prefix != "" {
		candidates = append(candidates, filepath.Join(prefix, "bin", name))
		if name == "claude" {
			pkg := filepath.Join(prefix, "lib", "node_modules", "@anthropic-ai", "claude-code", "node_modules", "@anthropic-ai")
			for _, plat := range []string{"claude-code-linux-x64", "claude-code-linux-x64-musl", "claude-code-linux-arm64"} {
				candidates = append(candidates, filepath.Join(pkg, plat, "claude"))
			}
		}
	}
	candidates = slices.DeleteFunc(candidates, func(p string) bool { return !isExecutableFile(p) })
	if len(candidates) == 0 {
		skipOrFail(t, fmt.Sprintf("%s CLI not installed (looked on PATH and in $MCP_SUBAGENT_NPM_PREFIX/bin; .ci/run installs it from npm)", name))
	}
	var failures []string
	for _, p := range candidates {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, p, "--version")
		home := t.TempDir()
		cmd.Env = []string{"PATH=" + cliPATH(p), "HOME=" + home, "CODEX_HOME=" + home, "CLAUDE_CONFIG_DIR=" + home}
		out, err := cmd.CombinedOutput()
		cancel()
		if err == nil {
			t.Logf("real CLI: %s (%s)", p, strings.TrimSpace(string(out)))
			return p
		}
		failures = append(failures, fmt.Sprintf("%s: %v: %s", p, err, bytes.TrimSpace(out)))
	}
	t.Fatalf("%s is installed but does not run:\n%s", name, strings.Join(failures, "\n"))
	return ""
}

// cliPATH is a PATH for a CLI: its own directory (the Codex launcher is a
// node script that finds its binary beside it), node's, and the system's.
func cliPATH(bin string) string {
	dirs := []string{filepath.Dir(bin)}
	if node, err := exec.LookPath("node"); err == nil {
		dirs = append(dirs, filepath.Dir(node))
	}
	return strings.Join(append(dirs, "/usr/local/bin", "/usr/bin", "/bin"), ":")
}

func realDir(t *testing.T) string {
	d := t.TempDir()
	if r, err := filepath.EvalSymlinks(d); err == nil {
		d = r
	}
	return d
}

// stopDaemonAtCleanup stops the data directory's daemon when the test
// ends: `mcp-subagent daemon stop --data-dir DIR`. Until the daemon exists
// the command is unknown; that is tolerated. Register it before starting
// any client, so it runs after their cleanups.
func stopDaemonAtCleanup(t *testing.T, dataDir string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, binary, "daemon", "stop", "--data-dir", dataDir).CombinedOutput()
		if err != nil && !strings.Contains(string(out), "unknown command") {
			t.Errorf("daemon stop --data-dir %s: %v: %s", dataDir, err, out)
		}
	})
}

// serverEnvVars is the environment our server needs: its children's chat
// API (the fake) and model.
func serverEnvVars(child *childModel) map[string]string {
	env := map[string]string{
		"OPENAI_BASE_URL":    child.URL(),
		"OPENAI_API_KEY":     "test-key",
		"MCP_SUBAGENT_MODEL": "fake-model",
	}
	if v, ok := os.LookupEnv("GORACE"); ok { // a -race binary's reports
		env["GORACE"] = v
	}
	return env
}

// childModel is the fake chat API of our server's spawn children. A child
// is told "CHILD-TASK <name>" and answers "CLOSING-MARKER <name> <nonce>"
// (its closing message). A held child does not answer until released:
// the test decides when it finishes, so it is provably still running when
// a call returns.
type childModel struct {
	*fakeopenai.Server
	stop  chan struct{} // closed at cleanup: held children give up
	nonce string

	mu      sync.Mutex
	gates   map[string]chan struct{}
	arrived map[string]chan struct{}
}

var childTaskRE = regexp.MustCompile(`CHILD-TASK (\S+)`)

func newChildModel(t *testing.T) *childModel {
	c := &childModel{stop: make(chan struct{}), nonce: fmt.Sprintf("%x", time.Now().UnixNano()),
		gates: map[string]chan struct{}{}, arrived: map[string]chan struct{}{}}
	c.Server = fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		m := childTaskRE.FindStringSubmatch(req.LastUserText())
		if m == nil {
			return fakeopenai.Reply{Text: "no task given"}
		}
		name := m[1]
		arrived, gate := c.channels(name)
		c.mu.Lock()
		select {
		case <-arrived:
		default:
			close(arrived)
		}
		c.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-c.stop:
				return fakeopenai.Reply{Status: 500, ErrorMessage: "the test ended before the child was released"}
			}
		}
		return fakeopenai.Reply{Text: c.Closing(name)}
	})
	t.Cleanup(func() { close(c.stop); c.Close() })
	return c
}

func (c *childModel) channels(name string) (arrived, gate chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.arrived[name] == nil {
		c.arrived[name] = make(chan struct{})
	}
	return c.arrived[name], c.gates[name]
}

// Task is the prompt that makes a child named name answer Closing(name).
func (c *childModel) Task(name string) string {
	return "CHILD-TASK " + name + " — answer with your closing marker."
}

// Closing is the closing message of the child named name.
func (c *childModel) Closing(name string) string {
	return "CLOSING-MARKER " + name + " " + c.nonce
}

// Hold makes the child named name wait for Release before it answers.
func (c *childModel) Hold(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gates[name] == nil {
		c.gates[name] = make(chan struct{})
	}
}

// Release lets a held child answer (idempotent).
func (c *childModel) Release(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if g := c.gates[name]; g != nil {
		select {
		case <-g:
		default:
			close(g)
		}
	}
}

// Arrived is closed when the child named name first calls its model.
func (c *childModel) Arrived(name string) <-chan struct{} {
	a, _ := c.channels(name)
	return a
}

// cliRun is one running CLI process: stdout lines (JSONL events),
// stderr, and its end.
type cliRun struct {
	name   string
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan struct{}
	err    error
	// logs returns the CLI's record of our server's stderr, if any.
	logs func() string
	// dataDir is our server's data directory; its daemon.log is quoted.
	dataDir string
}

func startCLI(t *testing.T, name, bin string, args, env []string, dir string) *cliRun {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Dir = env, dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r := &cliRun{name: name, cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = r.stdout, r.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { r.err = cmd.Wait(); close(r.done) }()
	endGroupAtCleanup(t, cmd, r.done)
	return r
}

// endGroupAtCleanup ends a CLI still running at the end of the test with
// its process group (our server included), then awaits it: done closes
// when cmd.Wait has returned.
func endGroupAtCleanup(t *testing.T, cmd *exec.Cmd, done <-chan struct{}) {
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
}

// wait waits for the process to end; it fails the test if ctx ends first
// or the CLI exits non-zero.
func (r *cliRun) wait(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-r.done:
	case <-ctx.Done():
		t.Fatalf("%s did not finish in time: %v\n%s", r.name, ctx.Err(), r.diag())
	}
	if r.err != nil {
		t.Fatalf("%s failed: %v\n%s", r.name, r.err, r.diag())
	}
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// diag is what a failure message quotes of the run: the tails of its
// stderr, its event stream and its record of our server's stderr.
func (r *cliRun) diag() string {
	var b strings.Builder
	fmt.Fprintf(&b, "--- %s stderr (tail):\n%s\n--- %s events (tail):\n%s\n", r.name, tail(r.stderr.String(), 2000), r.name, tail(r.stdout.String(), 3000))
	if r.logs != nil {
		fmt.Fprintf(&b, "--- our server's stderr as %s recorded it (tail):\n%s\n", r.name, tail(r.logs(), 3000))
	}
	if r.dataDir != "" {
		if log, err := os.ReadFile(filepath.Join(r.dataDir, "daemon.log")); err == nil {
			fmt.Fprintf(&b, "--- the daemon's log %s (tail):\n%s\n", filepath.Join(r.dataDir, "daemon.log"), tail(string(log), 3000))
		}
	}
	return b.String()
}

// events decodes the JSONL lines of stdout.
func (r *cliRun) events() []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(r.stdout.String()))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var ev map[string]any
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			out = append(out, ev)
		}
	}
	return out
}

// ---- Claude Code ----

// claudeHome is one user's Claude Code installation state: a temporary
// HOME (and CLAUDE_CONFIG_DIR in it) with our server registered.
type claudeHome struct {
	bin     string
	home    string
	api     *fakeanthropic.Server
	dataDir string
	serve   []string // more arguments of our server's command line (register)
}

func newClaudeHome(t *testing.T, bin string, api *fakeanthropic.Server) *claudeHome {
	return &claudeHome{bin: bin, home: realDir(t), api: api}
}

func (h *claudeHome) env() []string {
	return []string{
		"PATH=" + cliPATH(h.bin),
		"HOME=" + h.home,
		"CLAUDE_CONFIG_DIR=" + filepath.Join(h.home, ".claude"),
		"ANTHROPIC_BASE_URL=" + h.api.URL(),
		"ANTHROPIC_API_KEY=test",
		"ANTHROPIC_DEFAULT_HAIKU_MODEL=fake",
		"ANTHROPIC_SMALL_FAST_MODEL=fake",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
	}
}

// register is the user's recipe:
//
//	claude mcp add -s user subagent -e K=V... -- mcp-subagent serve --data-dir DIR
//
// and, in the user settings ($CLAUDE_CONFIG_DIR/settings.json), a
// permission that pre-approves the server's tools: {"permissions":
// {"allow": ["mcp__subagent"]}}.
func (h *claudeHome) register(t *testing.T, dataDir string, child *childModel) {
	t.Helper()
	h.dataDir = dataDir
	// -e takes several values: it goes after the server's name.
	args := []string{"mcp", "add", "-s", "user", "subagent"}
	vars := serverEnvVars(child)
	for _, k := range slices.Sorted(mapKeys(vars)) {
		args = append(args, "-e", k+"="+vars[k])
	}
	args = append(append(args, "--", binary, "serve", "--data-dir", dataDir, "--log-level", "debug"), h.serve...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.bin, args...)
	cmd.Env, cmd.Dir = h.env(), h.home
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("claude mcp add: %v\n%s", err, out)
	}
	h.allowOurTools(t)
}

// allowOurTools pre-approves our server's tools in the user settings.
func (h *claudeHome) allowOurTools(t *testing.T) {
	t.Helper()
	settings := filepath.Join(h.home, ".claude", "settings.json")
	if err := os.WriteFile(settings, []byte(`{"permissions":{"allow":["mcp__subagent"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// run starts `claude -p PROMPT --output-format stream-json --verbose` in
// workspace.
func (h *claudeHome) run(t *testing.T, workspace, prompt string) *cliRun {
	t.Helper()
	r := startCLI(t, "claude", h.bin, []string{"-p", prompt, "--model", "fake", "--output-format", "stream-json", "--verbose"},
		h.env(), workspace)
	r.logs = func() string { return claudeMCPLog(h.home, workspace) }
	r.dataDir = h.dataDir
	return r
}

var nonAlnum = regexp.MustCompile(`[^A-Za-z0-9]`)

// claudeMCPLog is what Claude Code logged of our server (its stderr
// included) for the project workspace, under
// $HOME/.cache/claude-cli-nodejs/<project>/mcp-logs-subagent (the project
// named by its path, non-alphanumerics as dashes).
func claudeMCPLog(home, workspace string) string {
	files, _ := filepath.Glob(filepath.Join(home, ".cache", "claude-cli-nodejs", nonAlnum.ReplaceAllString(workspace, "-"), "mcp-logs-subagent", "*"))
	if len(files) == 0 {
		files, _ = filepath.Glob(filepath.Join(home, ".cache", "claude-cli-nodejs", "*", "mcp-logs-subagent", "*"))
	}
	var b strings.Builder
	for _, f := range files {
		data, _ := os.ReadFile(f)
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			for _, k := range []string{"error", "debug", "info"} {
				if v, ok := line[k].(string); ok {
					fmt.Fprintf(&b, "%s: %s\n", k, v)
				}
			}
		}
	}
	return b.String()
}

// mcpStatus is the status Claude Code's init event gives our server
// ("connected", "failed", ...), or "" before the init event.
func (r *cliRun) mcpStatus() string {
	for _, ev := range r.events() {
		if ev["type"] != "system" || ev["subtype"] != "init" {
			continue
		}
		servers, _ := ev["mcp_servers"].([]any)
		for _, s := range servers {
			if m, _ := s.(map[string]any); m["name"] == "subagent" {
				st, _ := m["status"].(string)
				return st
			}
		}
		return "absent"
	}
	return ""
}

// claudeStep is one tool call of a scripted Claude parent. onCall runs
// when the fake model makes the call (hands it to the CLI).
type claudeStep struct {
	tool   string
	input  any
	onCall func()
	// inputOf, when set, makes the input from the request the step answers
	// (to pass on what an earlier result carried, as a model would).
	inputOf func(r fakeanthropic.Request) any
}

// claudeParent scripts a parent model: it makes the steps' calls in order
// (loading each deferred tool through ToolSearch first, as a real model
// must), then ends its turn with final. Requests outside the agent loop
// get a generic answer; a request whose conversation does not carry the
// session's marker (when set) is not this script's.
func claudeParent(steps []claudeStep, final string) fakeanthropic.Handler {
	var mu sync.Mutex
	return func(r fakeanthropic.Request) fakeanthropic.Reply {
		if !r.IsAgentLoop() {
			return fakeanthropic.Generic(r)
		}
		done := 0
		for _, tr := range r.ToolResults() {
			if tr.Name != "ToolSearch" {
				done++
			}
		}
		if done >= len(steps) {
			return fakeanthropic.Reply{Text: final}
		}
		s := steps[done]
		input := s.input
		if s.inputOf != nil {
			input = s.inputOf(r)
		}
		use := fakeanthropic.Use(r, s.tool, input)
		if use.Name == s.tool && s.onCall != nil {
			mu.Lock()
			s.onCall()
			mu.Unlock()
		}
		return fakeanthropic.Reply{ToolUses: []fakeanthropic.ToolUse{use}}
	}
}

// bySession routes each agent-loop request to the handler of the session
// whose marker its user messages carry.
func bySession(handlers map[string]fakeanthropic.Handler) fakeanthropic.Handler {
	return func(r fakeanthropic.Request) fakeanthropic.Reply {
		for _, u := range r.UserTexts() {
			for marker, h := range handlers {
				if strings.Contains(u, marker) {
					return h(r)
				}
			}
		}
		return fakeanthropic.Generic(r)
	}
}

// ---- Codex ----

// codexHome is one user's $CODEX_HOME with the fake model provider and our
// server registered.
type codexHome struct {
	bin     string
	home    string
	api     *fakeresponses.Server
	vars    map[string]string
	dataDir string
}

func newCodexHome(t *testing.T, bin string, api *fakeresponses.Server) *codexHome {
	return &codexHome{bin: bin, home: realDir(t), api: api}
}

// register writes $CODEX_HOME/config.toml: the fake model provider and
// the user's recipe for our server (keys come from the environment
// through env_vars, never the file).
func (h *codexHome) register(t *testing.T, dataDir string, child *childModel) {
	t.Helper()
	h.vars, h.dataDir = serverEnvVars(child), dataDir
	toml := h.api.ProviderTOML("FAKE_API_KEY") + fmt.Sprintf(`
[mcp_servers.subagent]
command = %q
args = ["serve", "--data-dir", %q, "--log-level", "debug"]
env_vars = ["OPENAI_BASE_URL", "OPENAI_API_KEY", "MCP_SUBAGENT_MODEL"]
default_tools_approval_mode = "approve"
tool_timeout_sec = 60
`, binary, dataDir)
	if err := os.WriteFile(filepath.Join(h.home, "config.toml"), []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (h *codexHome) env() []string {
	env := []string{"PATH=" + cliPATH(h.bin), "HOME=" + h.home, "CODEX_HOME=" + h.home, "FAKE_API_KEY=test",
		// On stderr: MCP server startup failures and what the MCP client
		// logs, nothing of the fake model's unknown metadata.
		"RUST_LOG=error,codex_mcp=info,codex_rmcp_client=info"}
	for k, v := range h.vars {
		env = append(env, k+"="+v)
	}
	return env
}

// run starts `codex exec --json --skip-git-repo-check PROMPT` in
// workspace.
func (h *codexHome) run(t *testing.T, workspace, prompt string) *cliRun {
	t.Helper()
	r := startCLI(t, "codex", h.bin, []string{"exec", "--json", "--skip-git-repo-check", "-C", workspace, prompt}, h.env(), workspace)
	r.dataDir = h.dataDir
	return r
}

// codexStep is one MCP tool call of a scripted Codex parent.
type codexStep struct {
	tool   string
	args   any
	onCall func()
}

// codexParent scripts a Codex parent's model: it calls our server's
// tools in order, then ends with final. When the request offers no such
// tool it says so in its answer (which the test then quotes).
func codexParent(steps []codexStep, final string) fakeresponses.Handler {
	var mu sync.Mutex
	return func(r fakeresponses.Request) fakeresponses.Reply {
		if !r.IsAgentTurn() {
			return fakeresponses.Generic(r)
		}
		done := len(r.Outputs())
		if done >= len(steps) {
			return fakeresponses.Reply{Text: final}
		}
		s := steps[done]
		c, ok := r.Call("subagent", s.tool, s.args)
		if !ok {
			return fakeresponses.Reply{Text: "NO-TOOL: the subagent server's " + s.tool + " is not among my tools " + strings.Join(r.ToolNames(), ", ")}
		}
		if s.onCall != nil {
			mu.Lock()
			s.onCall()
			mu.Unlock()
		}
		return fakeresponses.Reply{Calls: []fakeresponses.Call{c}}
	}
}

// ---- what the model received ----

// received is one tool result as the parent's model got it.
type received struct {
	tool string // our tool's bare name: subagent, list_agents...
	text string // exactly what the model got
	// obj is the JSON object in it (Claude: the whole text; Codex: after
	// "Output:\n"); nil when it is not JSON.
	obj map[string]any
}

func (r received) String() string { return fmt.Sprintf("%s → %s", r.tool, tail(r.text, 1500)) }

func decodeReceived(tool, text string) received {
	rec := received{tool: tool, text: text}
	body := text
	if _, after, ok := strings.Cut(text, "Output:\n"); ok {
		body = after
	}
	var obj map[string]any
	if json.Unmarshal([]byte(strings.TrimSpace(body)), &obj) == nil {
		rec.obj = obj
	}
	return rec
}

// claudeReceived lists our tools' results in the fullest agent-loop
// request whose conversation carries marker (the last request of that
// session holds every earlier result).
func claudeReceived(api *fakeanthropic.Server, marker string) []received {
	var last *fakeanthropic.Request
	for _, r := range api.Requests() {
		if r.IsAgentLoop() && slices.ContainsFunc(r.UserTexts(), func(u string) bool { return strings.Contains(u, marker) }) {
			if last == nil || len(r.Messages) >= len(last.Messages) {
				r := r
				last = &r
			}
		}
	}
	if last == nil {
		return nil
	}
	var out []received
	for _, tr := range last.ToolResults() {
		if tool, ok := strings.CutPrefix(tr.Name, "mcp__subagent__"); ok {
			out = append(out, decodeReceived(tool, tr.Text))
		} else if tr.Name != "ToolSearch" || tr.IsError {
			out = append(out, decodeReceived(tr.Name, tr.Text))
		}
	}
	return out
}

// codexReceived lists our tools' outputs in the fullest turn request that
// carries marker, plus the model's own final words when it found no tool.
func codexReceived(api *fakeresponses.Server, marker string) []received {
	var last *fakeresponses.Request
	for _, r := range api.Requests() {
		if r.IsAgentTurn() && slices.ContainsFunc(r.UserTexts(), func(u string) bool { return strings.Contains(u, marker) }) {
			if last == nil || len(r.Input) >= len(last.Input) {
				r := r
				last = &r
			}
		}
	}
	if last == nil {
		return nil
	}
	var out []received
	for _, o := range last.Outputs() {
		out = append(out, decodeReceived(o.Name, o.Output))
	}
	return out
}

func quote(rs []received) string {
	if len(rs) == 0 {
		return "  (no tool results at all)"
	}
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "  %s\n", r)
	}
	return b.String()
}

// notice is the contract for in-band notices in structuredContent.
type notice struct {
	SourceKind string `json:"source_kind"`
	AgentID    string `json:"agent_id"`
	StopReason string `json:"stop_reason"`
	Text       string `json:"text"`
}

func (r received) notices() []notice {
	raw, ok := r.obj["notices"]
	if !ok {
		return nil
	}
	b, _ := json.Marshal(raw)
	var ns []notice
	_ = json.Unmarshal(b, &ns)
	return ns
}

// handle is the agent id a subagent result handed out ("" when none).
func (r received) agentID() string {
	id, _ := r.obj["agent_id"].(string)
	return id
}

// settlementOf finds, among what the model received, the settlement
// notice of agentID. It returns an error that quotes everything received
// when there is none, or when the closing message is not in it, or (with
// wantStop) its stop reason differs.
func settlementOf(rs []received, agentID, closing, wantStop string) (notice, error) {
	var markerSeen bool
	for _, r := range rs {
		markerSeen = markerSeen || strings.Contains(r.text, closing)
		for _, n := range r.notices() {
			if n.SourceKind != "subagent-settled" || n.AgentID != agentID {
				continue
			}
			if wantStop != "" && n.StopReason != wantStop {
				return n, fmt.Errorf("the settlement notice of %s has stop_reason %q, want %q: %+v\nwhat the model received:\n%s", agentID, n.StopReason, wantStop, n, quote(rs))
			}
			if !strings.Contains(n.Text, closing) {
				return n, fmt.Errorf("the settlement notice of %s lacks its closing message %q: %+v\nwhat the model received:\n%s", agentID, closing, n, quote(rs))
			}
			return n, nil
		}
	}
	why := "never received the child's closing message"
	if markerSeen {
		why = "received the closing message, but not as a structuredContent notice {source_kind: subagent-settled, agent_id: " + agentID + "}"
	}
	return notice{}, errors.New("the parent's model " + why + " (" + closing + ").\nwhat the model received:\n" + quote(rs))
}

// listedOutcome checks the list_agents rows the model received last for
// agentID: a settled child's row carries last_stop_reason and
// last_message (its closing message), so a model that missed a notice
// still learns how the child ended.
func listedOutcome(rs []received, agentID, closing, wantStop string) error {
	for i := len(rs) - 1; i >= 0; i-- {
		if rs[i].tool != "list_agents" {
			continue
		}
		agents, _ := rs[i].obj["agents"].([]any)
		for _, a := range agents {
			row, _ := a.(map[string]any)
			if row["id"] != agentID {
				continue
			}
			msg, _ := row["last_message"].(string)
			if row["last_stop_reason"] != wantStop || !strings.Contains(msg, closing) {
				return fmt.Errorf("the list_agents row of %s = %v, want last_stop_reason %q and last_message with %q", agentID, row, wantStop, closing)
			}
			return nil
		}
		return fmt.Errorf("the last list_agents result has no row for %s:\n%s", agentID, rs[i])
	}
	return fmt.Errorf("the model received no list_agents result:\n%s", quote(rs))
}

// result returns the first received result of tool, or fails.
func resultOf(t *testing.T, rs []received, tool, what string, run *cliRun) received {
	t.Helper()
	for _, r := range rs {
		if r.tool == tool {
			return r
		}
	}
	t.Fatalf("%s: the model never received a %s result.\nwhat it received:\n%s\n%s", what, tool, quote(rs), run.diag())
	return received{}
}

// testContext bounds a test; it ends before the test's cleanups run.
func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
