//go:build realcli

package codex

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// The real Codex CLI against a fake Responses API (REFERENCE §4). These
// tests skip only where the codex binary is absent, and fail then under CI=true.

// findCodex looks for the real CLI on PATH and under the npm prefix CI
// installs into.
func findCodex(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("codex"); err == nil {
		return p
	}
	if prefix := os.Getenv("MCP_SUBAGENT_NPM_PREFIX"); prefix != "" {
		p := filepath.Join(prefix, "bin", "codex")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	msg := "codex CLI not installed; .ci/run installs @openai/codex (looked on PATH and in $MCP_SUBAGENT_NPM_PREFIX/bin)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: a missing CLI fails instead of skipping)")
	}
	t.Skip(msg)
	return ""
}

// fakeResponses is a Responses API: POST /v1/responses answers with SSE,
// GET /v1/models with an empty list, anything else with an empty object.
type fakeResponses struct {
	mu       sync.Mutex
	bodies   []map[string]any // every POST /v1/responses, in order
	others   []string         // every other request, "METHOD /path"
	auth     []string         // the Authorization header of each POST
	nextResp int
}

func (f *fakeResponses) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.Method != http.MethodPost || r.URL.Path != "/v1/responses" {
		f.mu.Lock()
		f.others = append(f.others, r.Method+" "+r.URL.Path)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/models" {
			w.Write([]byte(`{"object":"list","data":[]}`))
			return
		}
		w.Write([]byte(`{}`))
		return
	}
	var req map[string]any
	_ = json.Unmarshal(body, &req)
	f.mu.Lock()
	f.bodies = append(f.bodies, req)
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	f.nextResp++
	id := fmt.Sprintf("resp_%d", f.nextResp)
	f.mu.Unlock()

	switch text := lastUserText(req["input"].([]any)); {
	case strings.Contains(text, "HANG"):
		// A model that never answers: hold the stream open until the
		// client goes away.
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return
	case strings.Contains(text, "FAIL500"):
		http.Error(w, `{"error":{"message":"the fake API is down","type":"server_error"}}`, http.StatusInternalServerError)
		return
	}
	item := f.answer(req)
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(typ string, v map[string]any) {
		v["type"] = typ
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, b)
	}
	send("response.created", map[string]any{"response": map[string]any{"id": id}})
	send("response.output_item.done", map[string]any{"item": item})
	send("response.completed", map[string]any{"response": map[string]any{"id": id,
		"usage": map[string]any{"input_tokens": 50, "output_tokens": 5, "total_tokens": 55}}})
}

// answer scripts the model: a tool's output is acknowledged; "CALLBACK"
// calls the report tool of this server's MCP endpoint; a request with a
// JSON schema gets an object; anything else an echo of the last user text.
func (f *fakeResponses) answer(req map[string]any) map[string]any {
	msg := func(text string) map[string]any {
		return map[string]any{"type": "message", "role": "assistant", "id": "msg_x",
			"content": []any{map[string]any{"type": "output_text", "text": text}}}
	}
	input, _ := req["input"].([]any)
	if n := len(input); n > 0 {
		if last, _ := input[n-1].(map[string]any); last["type"] == "function_call_output" {
			return msg("tool said: " + outputText(last["output"]))
		}
	}
	text := lastUserText(input)
	if strings.Contains(text, "CALLBACK") {
		if name := toolNamed(req, "report"); name != "" {
			call := map[string]any{"type": "function_call", "name": name, "call_id": "call_cb",
				"arguments": `{"output":"hello from the real codex"}`}
			// A namespaced tool (Codex puts each MCP server's tools in a
			// namespace) is called by its own name within the namespace.
			if ns, n, ok := strings.Cut(name, "."); ok {
				call["namespace"], call["name"] = ns, n
			}
			return call
		}
		return msg("no report tool among " + strings.Join(toolNames(req), ","))
	}
	if t, _ := req["text"].(map[string]any); t["format"] != nil {
		return msg(`{"answer":"42"}`)
	}
	return msg("real reply to: " + strings.TrimSpace(text))
}

// outputText flattens a function_call_output's output: a string, or
// content parts whose texts are joined.
func outputText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	var texts []string
	parts, _ := v.([]any)
	for _, p := range parts {
		if pm, _ := p.(map[string]any); pm["text"] != nil {
			texts = append(texts, fmt.Sprint(pm["text"]))
		}
	}
	return strings.Join(texts, " | ")
}

func lastUserText(input []any) string {
	for i := len(input) - 1; i >= 0; i-- {
		m, _ := input[i].(map[string]any)
		if m["role"] != "user" {
			continue
		}
		parts, _ := m["content"].([]any)
		for _, p := range parts {
			if pm, _ := p.(map[string]any); pm["type"] == "input_text" {
				return fmt.Sprint(pm["text"])
			}
		}
	}
	return ""
}

// toolNames lists the function tools a request offers, namespaces
// flattened.
func toolNames(req map[string]any) []string {
	var names []string
	var walk func([]any, string)
	walk = func(tools []any, prefix string) {
		for _, t := range tools {
			m, _ := t.(map[string]any)
			name, _ := m["name"].(string)
			if sub, ok := m["tools"].([]any); ok {
				walk(sub, prefix+name+".")
				continue
			}
			if name == "" {
				name, _ = m["type"].(string)
			}
			names = append(names, prefix+name)
		}
	}
	tools, _ := req["tools"].([]any)
	walk(tools, "")
	return names
}

func toolNamed(req map[string]any, suffix string) string {
	for _, n := range toolNames(req) {
		if strings.HasSuffix(n, suffix) {
			return n
		}
	}
	return ""
}

func (f *fakeResponses) requests() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]any(nil), f.bodies...)
}

// turnRequests are the requests of agent turns (those whose last user
// message is a prompt of ours), leaving out Codex's background requests.
func (f *fakeResponses) turnRequests(marker string) []map[string]any {
	var out []map[string]any
	for _, r := range f.requests() {
		input, _ := r["input"].([]any)
		if strings.Contains(lastUserText(input), marker) {
			out = append(out, r)
		}
	}
	return out
}

// realFixture is a manager whose codex provider runs the real CLI against
// the fake Responses API, with its own CODEX_HOME.
func realFixture(t *testing.T, bin string, mopts ...func(*manager.Options)) (*fixture, *fakeResponses) {
	t.Helper()
	return realFixtureIn(t, bin, t.TempDir(), "", mopts...)
}

// fakeProviderConfig is the config.toml that points Codex at the fake
// Responses API at url.
func fakeProviderConfig(url string) string {
	return fmt.Sprintf(`model = "fake-model"
model_provider = "fake"
[model_providers.fake]
name = "fake"
base_url = "%s/v1"
env_key = "FAKE_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
`, url)
}

// realFixtureIn is realFixture with CODEX_HOME home, whose config.toml is
// cfg with {{API}} replaced by the fake API's URL and {{CWD}} by the
// child's cwd; "" means fakeProviderConfig.
func realFixtureIn(t *testing.T, bin, home string, cfg string, mopts ...func(*manager.Options)) (*fixture, *fakeResponses) {
	t.Helper()
	api := &fakeResponses{}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	f := &fixture{t: t, dir: t.TempDir(), cwd: t.TempDir()}
	if cfg == "" {
		cfg = fakeProviderConfig(srv.URL)
	}
	cfg = strings.NewReplacer("{{API}}", srv.URL, "{{CWD}}", f.cwd).Replace(cfg)
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	// The npm launcher is a node script: the child's PATH must find node.
	path := []string{filepath.Dir(bin)}
	if node, err := exec.LookPath("node"); err == nil {
		path = append(path, filepath.Dir(node))
	}
	path = append(path, "/usr/local/bin", "/usr/bin", "/bin")
	f.store = memstore.New()
	f.opts = Options{Command: bin, Timeout: 2 * time.Minute, Env: []string{
		"PATH=" + strings.Join(path, ":"), "HOME=" + home, "CODEX_HOME=" + home, "FAKE_API_KEY=test"}}
	f.parent = seam.ParentRef{Principal: "local", Cwd: f.cwd}
	f.m = f.newManager(mopts...)
	return f, api
}

func codexVersion(t *testing.T, bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return strings.TrimSpace(string(out))
}

func TestRealCodexCompletesAFollowupAndAColdResumeOnOneThread(t *testing.T) {
	bin := findCodex(t)
	t.Logf("codex: %s (%s)", bin, codexVersion(t, bin))
	f, api := realFixture(t, bin)
	const persona = "PERSONA-MARKER: answer tersely."

	st, res := f.start("first prompt", func(r *seam.StartRequest) { r.Persona = persona })
	if res.StopReason != agent.StopCompleted || res.Output != "real reply to: first prompt" {
		t.Fatalf("first turn: %q %q (%s)", res.StopReason, res.Output, res.Diagnostic)
	}
	if res.Usage.InputTokens != 50 || res.Usage.OutputTokens != 5 {
		t.Errorf("first turn usage = %+v", res.Usage)
	}
	thread := agent.LastSession(f.events(st.ChildID))
	if thread == "" {
		t.Fatal("no thread id recorded")
	}
	reqs := api.turnRequests("first prompt")
	if len(reqs) == 0 {
		t.Fatalf("the fake API saw no turn request; others: %v", api.others)
	}
	first := reqs[0]
	if b, _ := json.Marshal(first["input"]); !strings.Contains(string(b), persona) {
		t.Errorf("the persona did not reach the model as developer instructions: %s", b)
	}
	for _, n := range toolNames(first) {
		if strings.Contains(n, "agent") {
			t.Errorf("Codex offered its own sub-agent tool %q despite features.multi_agent=false", n)
		}
	}

	_, res = f.followup(f.m, st.ChildID, "second prompt")
	if res.StopReason != agent.StopCompleted || res.Output != "real reply to: second prompt" {
		t.Fatalf("follow-up: %q %q (%s)", res.StopReason, res.Output, res.Diagnostic)
	}
	// Codex reports the thread's running total; the turn's share is its own.
	if res.Usage.InputTokens != 50 || res.Usage.OutputTokens != 5 {
		t.Errorf("follow-up usage = %+v", res.Usage)
	}
	second := api.turnRequests("second prompt")
	if len(second) == 0 {
		t.Fatal("the fake API saw no follow-up request")
	}
	if b, _ := json.Marshal(second[0]["input"]); !strings.Contains(string(b), "real reply to: first prompt") {
		t.Errorf("the follow-up did not continue the thread: %s", b)
	}

	// A restarted server resumes the same thread cold.
	if err := f.m.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	m2 := f.newManager()
	sent, res := f.followup(m2, st.ChildID, "third prompt")
	if sent.Route != manager.RouteResumed || res.StopReason != agent.StopCompleted || res.Output != "real reply to: third prompt" {
		t.Fatalf("cold resume: %q %q %q (%s)", sent.Route, res.StopReason, res.Output, res.Diagnostic)
	}
	third := api.turnRequests("third prompt")
	if len(third) == 0 {
		t.Fatal("the fake API saw no cold-resume request")
	}
	if b, _ := json.Marshal(third[0]["input"]); !strings.Contains(string(b), "real reply to: second prompt") {
		t.Errorf("the cold resume did not continue the thread: %s", b)
	}
	if got := agent.LastSession(f.events(st.ChildID)); got != thread {
		t.Errorf("thread changed from %s to %s", thread, got)
	}
}

func TestRealCodexHonoursTheOutputSchema(t *testing.T) {
	bin := findCodex(t)
	f, api := realFixture(t, bin)
	_, res := f.start("structured please", func(r *seam.StartRequest) { r.OutputSchema = json.RawMessage(testSchema) })
	if res.StopReason != agent.StopCompleted || string(res.Structured) != `{"answer":"42"}` {
		t.Fatalf("stop %q, structured %s (%s)", res.StopReason, res.Structured, res.Diagnostic)
	}
	reqs := api.turnRequests("structured please")
	if len(reqs) == 0 {
		t.Fatal("no turn request")
	}
	format, _ := reqs[0]["text"].(map[string]any)["format"].(map[string]any)
	if format["type"] != "json_schema" || format["strict"] != true {
		t.Errorf("text.format = %v", format)
	}
}

// reportServer is a stand-in for this server's MCP endpoint: a report
// tool behind a bearer token, over streamable HTTP.
type reportServer struct {
	*httptest.Server
	mu      sync.Mutex
	reports []string
	auths   []string
}

func newReportServer(t *testing.T, token string) *reportServer {
	rs := &reportServer{}
	s := server.NewMCPServer("fake-subagent", "1.0.0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("report", mcp.WithDescription("Report progress to your parent."),
		mcp.WithString("output", mcp.Required()), mcp.WithDestructiveHintAnnotation(false)),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			rs.mu.Lock()
			rs.reports = append(rs.reports, req.GetString("output", ""))
			rs.mu.Unlock()
			return mcp.NewToolResultText("delivered"), nil
		})
	h := server.NewStreamableHTTPServer(s)
	rs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rs.mu.Lock()
		rs.auths = append(rs.auths, r.Header.Get("Authorization"))
		rs.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(rs.Close)
	return rs
}

func (rs *reportServer) callback(token string) func(o *manager.Options) {
	return func(o *manager.Options) {
		o.Callback = func(seam.ParentRef) (seam.Callback, func()) {
			return seam.Callback{URL: rs.URL + "/mcp", Token: token}, nil
		}
	}
}

func TestRealCodexCallsThisServerBackOverMCPWithoutAnApproval(t *testing.T) {
	bin := findCodex(t)
	const token = "real-token-1"
	cb := newReportServer(t, token)
	f, api := realFixture(t, bin, cb.callback(token))
	_, res := f.start("CALLBACK now", nil)
	cb.mu.Lock()
	defer cb.mu.Unlock()
	if res.StopReason != agent.StopCompleted || !strings.HasSuffix(res.Output, "delivered") || len(cb.reports) != 1 {
		var names []string
		if reqs := api.turnRequests("CALLBACK"); len(reqs) > 0 {
			names = toolNames(reqs[0])
		}
		t.Fatalf("stop %q, output %q (%s); reports %q; auth headers %q; tools %q",
			res.StopReason, res.Output, res.Diagnostic, cb.reports, cb.auths, names)
	}
	if cb.reports[0] != "hello from the real codex" {
		t.Errorf("report = %q", cb.reports[0])
	}
	for _, a := range cb.auths {
		if a != "Bearer "+token {
			t.Errorf("an MCP request came with Authorization %q", a)
		}
	}
}

// The user's CODEX_HOME config.toml registers this server itself as the
// stdio MCP server "subagent" beside another one, "other", and trusts the
// child's cwd, whose .codex/config.toml adds a third, "project"; each
// server's command leaves a marker when it starts. Run plainly, the real
// CLI starts all three, and a callback url on "subagent" is a config
// error. A child calls back this server over its callback, takes a
// follow-up on the same thread, and none of the three ever starts.
func TestRealCodexChildSeesOnlyThisServer(t *testing.T) {
	bin := findCodex(t)
	const token = "real-token-iso"
	cb := newReportServer(t, token)
	// The model provider's id has a dot: it reaches the child quoted.
	u := newUserMCPConfig(t, `model = "fake-model"
model_provider = "fake.local"
[model_providers."fake.local"]
name = "fake"
base_url = "{{API}}/v1"
env_key = "FAKE_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
`, `
[projects."{{CWD}}"]
trust_level = "trusted"
`)
	f, api := realFixtureIn(t, bin, u.home, u.config, cb.callback(token))
	if err := os.MkdirAll(filepath.Join(f.cwd, ".codex"), 0o755); err != nil {
		t.Fatal(err)
	}
	project := fmt.Sprintf("[mcp_servers.project]\ncommand = %s\n", tomlString(u.script("project")))
	if err := os.WriteFile(filepath.Join(f.cwd, ".codex", "config.toml"), []byte(project), 0o600); err != nil {
		t.Fatal(err)
	}

	// The control: the same CLI, environment and config, run plainly.
	plain := func(args ...string) (string, error) {
		cmd := exec.Command(bin, append(append([]string{"exec", "--json", "--skip-git-repo-check", "-s", "read-only", "-C", f.cwd}, args...), "-")...)
		cmd.Env = f.opts.Env
		cmd.Stdin = strings.NewReader("control prompt")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := plain("-c", `mcp_servers.subagent.url="http://127.0.0.1:9/mcp"`); err == nil || !strings.Contains(out, "url is not supported for stdio") {
		t.Errorf("a url on the user's stdio subagent: %v\n%s", err, out)
	}
	if out, err := plain(); err != nil {
		t.Fatalf("the plain run failed: %v\n%s", err, out)
	}
	if got := u.started(t); !slices.Equal(got, []string{"other", "project", "subagent"}) {
		t.Fatalf("run plainly, the CLI started %q of the user's servers; the test's premise does not hold", got)
	}
	u.clear(t)

	st, res := f.start("CALLBACK now", nil)
	if res.StopReason != agent.StopCompleted || !strings.HasSuffix(res.Output, "delivered") {
		t.Fatalf("first turn: %q %q (%s)", res.StopReason, res.Output, res.Diagnostic)
	}
	cb.mu.Lock()
	reports := slices.Clone(cb.reports)
	cb.mu.Unlock()
	if !slices.Equal(reports, []string{"hello from the real codex"}) {
		t.Errorf("reports = %q", reports)
	}
	thread := agent.LastSession(f.events(st.ChildID))
	_, res = f.followup(f.m, st.ChildID, "second prompt")
	if res.StopReason != agent.StopCompleted || res.Output != "real reply to: second prompt" {
		t.Fatalf("follow-up: %q %q (%s)", res.StopReason, res.Output, res.Diagnostic)
	}
	if got := agent.LastSession(f.events(st.ChildID)); thread == "" || got != thread {
		t.Errorf("thread %q, then %q", thread, got)
	}
	second := api.turnRequests("second prompt")
	if len(second) == 0 {
		t.Fatal("the fake API saw no follow-up request")
	}
	if b, _ := json.Marshal(second[0]["input"]); !strings.Contains(string(b), "tool said") {
		t.Errorf("the follow-up did not continue the thread: %s", b)
	}
	// Both Codex processes have exited (and been reaped), so nothing can
	// start a server any more: no marker now means none ever.
	if got := u.started(t); len(got) != 0 {
		t.Errorf("the child started the user's MCP servers %q", got)
	}
	for _, r := range append(api.turnRequests("CALLBACK"), second...) {
		for _, n := range toolNames(r) {
			if strings.Contains(n, "other") || strings.Contains(n, "project") {
				t.Errorf("the model was offered %q", n)
			}
		}
	}
}

// A child keeps what of the user's setup lives in CODEX_HOME beside
// config.toml, and the model settings carried from it: here an API-key
// login in auth.json, used by a provider that requires_openai_auth (as the
// built-in one does), and AGENTS.md. The user's MCP servers do not start.
func TestRealCodexChildKeepsTheUsersLoginAndInstructions(t *testing.T) {
	bin := findCodex(t)
	u := newUserMCPConfig(t, `model = "fake-model"
model_provider = "login"
[model_providers.login]
name = "login"
base_url = "{{API}}/v1"
wire_api = "responses"
requires_openai_auth = true
request_max_retries = 0
stream_max_retries = 0
`, "")
	if err := os.WriteFile(filepath.Join(u.home, "auth.json"), []byte(`{"OPENAI_API_KEY":"sk-user-login-1"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(u.home, "AGENTS.md"), []byte("AGENTS-MARKER-4471: the user's own instructions.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, api := realFixtureIn(t, bin, u.home, u.config)
	_, res := f.start("login prompt", nil)
	if res.StopReason != agent.StopCompleted || res.Output != "real reply to: login prompt" {
		t.Fatalf("%q %q (%s)", res.StopReason, res.Output, res.Diagnostic)
	}
	reqs := api.turnRequests("login prompt")
	if len(reqs) == 0 {
		t.Fatal("the fake API saw no turn request")
	}
	if b, _ := json.Marshal(reqs[0]); !strings.Contains(string(b), "AGENTS-MARKER-4471") {
		t.Error("CODEX_HOME/AGENTS.md did not reach the model")
	}
	api.mu.Lock()
	auths := slices.Clone(api.auth)
	api.mu.Unlock()
	if !slices.Contains(auths, "Bearer sk-user-login-1") {
		t.Errorf("the model requests came with Authorization %q, not the login in auth.json", auths)
	}
	if got := u.started(t); len(got) != 0 {
		t.Errorf("the child started the user's MCP servers %q", got)
	}
}

func TestRealCodexReportsAFailedTurnAsAnError(t *testing.T) {
	bin := findCodex(t)
	f, _ := realFixture(t, bin)
	_, res := f.start("FAIL500 please", nil)
	if res.StopReason != agent.StopError || !strings.HasPrefix(res.Diagnostic, "Codex reported the turn failed: ") {
		t.Fatalf("stop %q (%s)", res.StopReason, res.Diagnostic)
	}
	t.Logf("diagnostic: %s", res.Diagnostic)
}

// codexProcesses lists the running (non-zombie) processes whose command
// line names dir: the Codex launcher and binary run with -C dir.
func codexProcesses(dir string) []string {
	ents, _ := os.ReadDir("/proc")
	var found []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmd), dir) {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		s := string(stat)
		if fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(fields) > 0 && fields[0] == "Z" {
			continue
		}
		found = append(found, e.Name()+": "+strings.ReplaceAll(string(cmd), "\x00", " "))
	}
	return found
}

func TestRealCodexIsInterruptedWithinASecondAndLeavesNoProcess(t *testing.T) {
	bin := findCodex(t)
	f, api := realFixture(t, bin)
	st, err := f.m.StartContinuable(ctxT(t), "codex", seam.StartRequest{Label: "hang", Prompt: "HANG", Parent: f.parent}, true)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(api.turnRequests("HANG")) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if len(api.turnRequests("HANG")) == 0 {
		t.Fatal("Codex never asked the model")
	}
	if len(codexProcesses(f.cwd)) == 0 {
		t.Fatal("no Codex process found while the turn runs")
	}
	t0 := time.Now()
	if err := f.m.Interrupt(f.parent, st.ChildID); err != nil {
		t.Fatal(err)
	}
	res, ok := st.Wait(ctxT(t))
	elapsed := time.Since(t0)
	if !ok || res.StopReason != agent.StopAborted {
		t.Fatalf("stop %q (%s)", res.StopReason, res.Diagnostic)
	}
	if elapsed > time.Second {
		t.Errorf("the interrupt took %v", elapsed)
	}
	if left := codexProcesses(f.cwd); len(left) > 0 {
		t.Errorf("Codex processes outlived the interrupt: %q", left)
	}
	// The interrupted thread takes a follow-up.
	_, res = f.followup(f.m, st.ChildID, "after the interrupt")
	if res.StopReason != agent.StopCompleted || res.Output != "real reply to: after the interrupt" {
		t.Errorf("after the interrupt: %q %q (%s)", res.StopReason, res.Output, res.Diagnostic)
	}
	t.Logf("interrupt took %v", elapsed)
}

// clear removes the markers left so far; the directory stays, for the
// scripts write into it.
func (u userMCPConfig) clear(t *testing.T) {
	t.Helper()
	for _, name := range u.started(t) {
		if err := os.Remove(filepath.Join(u.markers, name)); err != nil {
			t.Fatal(err)
		}
	}
}
