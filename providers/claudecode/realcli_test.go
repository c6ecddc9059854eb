//go:build realcli

package claudecode

// The real Claude Code CLI against a fake Anthropic Messages API (and, for
// the callback, a small MCP server): skipped only where no claude binary
// is installed.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/managertest"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// realClaude finds a claude binary that runs: on PATH, or where `npm
// install -g --prefix $MCP_SUBAGENT_NPM_PREFIX @anthropic-ai/claude-code`
// put it — its bin/claude, or the native binary of the platform package
// when the install script that copies it over bin/claude did not run (the
// npm package's own bin is then a placeholder).
func realClaude(t *testing.T) string {
	t.Helper()
	var candidates []string
	if p, err := exec.LookPath("claude"); err == nil {
		candidates = append(candidates, p)
	}
	if prefix := os.Getenv("MCP_SUBAGENT_NPM_PREFIX"); prefix != "" {
		pkg := filepath.Join(prefix, "lib", "node_modules", "@anthropic-ai", "claude-code")
		for _, p := range []string{filepath.Join(prefix, "bin", "claude"),
			filepath.Join(pkg, "node_modules", "@anthropic-ai", "claude-code-linux-x64", "claude"),
			filepath.Join(pkg, "node_modules", "@anthropic-ai", "claude-code-linux-x64-musl", "claude"),
			filepath.Join(pkg, "node_modules", "@anthropic-ai", "claude-code-linux-arm64", "claude")} {
			if isExecutable(p) {
				candidates = append(candidates, p)
			}
		}
	}
	if len(candidates) == 0 {
		msg := "claude CLI not installed; .ci/run installs @anthropic-ai/claude-code (looked on PATH and in $MCP_SUBAGENT_NPM_PREFIX/bin)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " (CI=true: a missing CLI fails instead of skipping)")
		}
		t.Skip(msg)
	}
	var failures []string
	for _, path := range candidates {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
		cancel()
		if err == nil {
			t.Logf("real CLI: %s %s", path, strings.TrimSpace(string(out)))
			return path
		}
		failures = append(failures, fmt.Sprintf("%s: %v: %s", path, err, bytes.TrimSpace(out)))
	}
	t.Fatalf("claude is installed but does not run:\n%s", strings.Join(failures, "\n"))
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// apiRequest is what the fake Messages API keeps of a request.
type apiRequest struct {
	Model    string            `json:"model"`
	Stream   bool              `json:"stream"`
	System   json.RawMessage   `json:"system"`
	Messages []json.RawMessage `json:"messages"`
	Tools    []struct {
		Name string `json:"name"`
	} `json:"tools"`
	raw string
}

func (r apiRequest) toolNames() []string {
	var names []string
	for _, t := range r.Tools {
		names = append(names, t.Name)
	}
	return names
}

// lastHasToolResult reports whether the last message answers a tool call.
func (r apiRequest) lastHasToolResult() bool {
	return len(r.Messages) > 0 && strings.Contains(string(r.Messages[len(r.Messages)-1]), `"tool_result"`)
}

// fakeAnthropic is a scripted Anthropic Messages API. The script looks for
// a marker in the conversation ("REAL:<name>") and answers with text or a
// tool call, as SSE or, for stream:false, one message.
type fakeAnthropic struct {
	*httptest.Server
	mu       sync.Mutex
	requests []apiRequest
	hanging  chan struct{} // receives when a REAL:hang request arrives
}

func newFakeAnthropic(t *testing.T) *fakeAnthropic {
	f := &fakeAnthropic{hanging: make(chan struct{}, 4)}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

// find returns the requests whose body contains marker.
func (f *fakeAnthropic) find(marker string) []apiRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []apiRequest
	for _, r := range f.requests {
		if strings.Contains(r.raw, marker) {
			out = append(out, r)
		}
	}
	return out
}

type reply struct {
	text      string
	toolName  string
	toolInput string
}

var scenarioRE = regexp.MustCompile(`REAL:([a-z-]+)`)

// scenario is the newest marker in the conversation: a resumed one carries
// the earlier turns' markers too.
func (r apiRequest) scenario() string {
	all := scenarioRE.FindAllStringSubmatch(r.raw, -1)
	if len(all) == 0 {
		return ""
	}
	return all[len(all)-1][1]
}

func (f *fakeAnthropic) script(r apiRequest) reply {
	scenario := r.scenario()
	answered := r.lastHasToolResult()
	switch scenario {
	case "structured":
		if !answered && slices.Contains(r.toolNames(), "StructuredOutput") {
			return reply{toolName: "StructuredOutput", toolInput: `{"answer":42}`}
		}
		return reply{text: "structured done"}
	case "denied":
		if !answered {
			return reply{toolName: "Bash", toolInput: `{"command":"touch denied.txt","description":"create a file"}`}
		}
		return reply{text: "I could not run Bash."}
	case "read":
		if !answered {
			path := regexp.MustCompile(`READ-PATH=([^ "\\]+)`).FindStringSubmatch(r.raw)
			if path != nil {
				return reply{toolName: "Read", toolInput: fmt.Sprintf(`{"file_path":%q}`, path[1])}
			}
		}
		return reply{text: "read done"}
	case "report":
		if !answered {
			return reply{toolName: "mcp__subagent__report", toolInput: `{"output":"progress from claude"}`}
		}
		return reply{text: "reported"}
	}
	return reply{text: fmt.Sprintf("hello from the fake model (%d messages)", len(r.Messages))}
}

func (f *fakeAnthropic) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead || r.Method == http.MethodGet {
		w.WriteHeader(http.StatusOK)
		return
	}
	body, _ := io.ReadAll(r.Body)
	if strings.HasSuffix(r.URL.Path, "/count_tokens") {
		_, _ = w.Write([]byte(`{"input_tokens":10}`))
		return
	}
	if !strings.HasSuffix(r.URL.Path, "/v1/messages") {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"type":"error","error":{"type":"not_found_error","message":"no such endpoint"}}`))
		return
	}
	var req apiRequest
	if err := json.Unmarshal(body, &req); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"type":"error","error":{"type":"invalid_request_error","message":"bad json"}}`))
		return
	}
	req.raw = string(body)
	f.mu.Lock()
	f.requests = append(f.requests, req)
	f.mu.Unlock()
	if os.Getenv("REALCLI_DEBUG") != "" { // trace the CLI's requests when it misbehaves
		fmt.Fprintf(os.Stderr, "%s fake API: %s stream=%v scenario=%q msgs=%d tools=%d\n", time.Now().Format("15:04:05.000"), r.URL, req.Stream, req.scenario(), len(req.Messages), len(req.Tools))
	}
	if req.scenario() == "hang" {
		f.hanging <- struct{}{}
		<-r.Context().Done()
		return
	}
	rep := f.script(req)
	usage := map[string]any{"input_tokens": 25, "output_tokens": 5}
	if !req.Stream {
		var content []any
		stop := "end_turn"
		if rep.toolName != "" {
			content = append(content, map[string]any{"type": "tool_use", "id": "toolu_01", "name": rep.toolName, "input": json.RawMessage(rep.toolInput)})
			stop = "tool_use"
		} else {
			content = append(content, map[string]any{"type": "text", "text": rep.text})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "msg_fake", "type": "message", "role": "assistant", "model": req.Model,
			"content": content, "stop_reason": stop, "stop_sequence": nil, "usage": usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	ev := func(name string, v map[string]any) {
		v["type"] = name
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
	}
	f.mu.Lock()
	id := fmt.Sprintf("msg_fake_%d", len(f.requests))
	f.mu.Unlock()
	ev("message_start", map[string]any{"message": map[string]any{"id": id, "type": "message", "role": "assistant", "model": req.Model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": map[string]any{"input_tokens": 25, "output_tokens": 1}}})
	stop := "end_turn"
	if rep.toolName != "" {
		ev("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "tool_use", "id": "toolu_" + id, "name": rep.toolName, "input": map[string]any{}}})
		ev("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": rep.toolInput}})
		stop = "tool_use"
	} else {
		ev("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		ev("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "text_delta", "text": rep.text}})
	}
	ev("content_block_stop", map[string]any{"index": 0})
	ev("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 5}})
	ev("message_stop", map[string]any{})
}

// callbackServer is a stand-in for this server's MCP endpoint: a report
// tool behind a bearer token.
type callbackServer struct {
	*httptest.Server
	token   string
	mu      sync.Mutex
	reports []string
	denied  int
}

func newCallbackServer(t *testing.T) *callbackServer {
	cs := &callbackServer{token: "child-token-123"}
	s := server.NewMCPServer("mcp-subagent-test", "0.0.1", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("report", mcp.WithDescription("Send your parent a report."),
		mcp.WithString("output", mcp.Required(), mcp.Description("the report"))),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			out, err := req.RequireString("output")
			if err != nil {
				return mcp.NewToolResultError(err.Error()), nil
			}
			cs.mu.Lock()
			cs.reports = append(cs.reports, out)
			cs.mu.Unlock()
			return mcp.NewToolResultText("report delivered"), nil
		})
	h := server.NewStreamableHTTPServer(s)
	cs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+cs.token {
			cs.mu.Lock()
			cs.denied++
			cs.mu.Unlock()
			w.Header().Set("WWW-Authenticate", `Bearer realm="mcp-subagent"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(cs.Close)
	return cs
}

func realOptions(t *testing.T, path, baseURL string) Options {
	home := t.TempDir()
	return Options{Command: path, Model: "fake", Env: []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + home,
		"CLAUDE_CONFIG_DIR=" + filepath.Join(home, ".claude"),
		"ANTHROPIC_BASE_URL=" + baseURL,
		"ANTHROPIC_API_KEY=test",
		"ANTHROPIC_DEFAULT_HAIKU_MODEL=fake",
		"ANTHROPIC_SMALL_FAST_MODEL=fake",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
	}}
}

func TestRealCLI(t *testing.T) {
	path := realClaude(t)
	api := newFakeAnthropic(t)
	cwd := t.TempDir()
	opts := realOptions(t, path, api.URL)
	cb := newCallbackServer(t)
	callback := func(self seam.ParentRef) (seam.Callback, func()) {
		return seam.Callback{URL: cb.URL + "/mcp", Token: cb.token}, nil
	}
	store := memstore.New()
	m := newManager(t, store, opts, callback)
	f := &fake{cwd: cwd}
	outer := t // owns the managers the subtests share

	t.Run("a completed delegation, a follow-up and a cold resume continue one session", func(t *testing.T) {
		id, res := startAndWait(t, m, f, seam.StartRequest{Prompt: "REAL:hello first-marker-7731"})
		if res.StopReason != agent.StopCompleted || !strings.HasPrefix(res.Output, "hello from the fake model") {
			t.Fatalf("first turn: %s %q (%s)", res.StopReason, res.Output, res.Diagnostic)
		}
		if res.Usage.InputTokens == 0 || res.Usage.OutputTokens == 0 {
			t.Errorf("usage = %+v", res.Usage)
		}
		t.Logf("first turn usage: %+v", res.Usage)

		route, res := followup(t, m, id, "second-marker-7732")
		if res.StopReason != agent.StopCompleted {
			t.Fatalf("follow-up (%s): %s (%s)", route, res.StopReason, res.Diagnostic)
		}
		reqs := api.find("second-marker-7732")
		if len(reqs) == 0 || !strings.Contains(reqs[0].raw, "first-marker-7731") {
			t.Errorf("the follow-up's request does not carry the first turn: --resume did not continue the session")
		}

		// The server restarts: a new manager over the same store resumes the
		// child from the journal; the later subtests use it.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			t.Fatal(err)
		}
		m2 := newManager(outer, store, opts, callback)
		m = m2
		sent, err := m2.Followup(ctx, root, id, "third-marker-7733", true)
		if err != nil {
			t.Fatal(err)
		}
		res, _ = sent.Wait(ctx)
		if sent.Route != manager.RouteResumed || res.StopReason != agent.StopCompleted {
			t.Fatalf("cold resume: route %s, %s (%s)", sent.Route, res.StopReason, res.Diagnostic)
		}
		reqs = api.find("third-marker-7733")
		if len(reqs) == 0 || !strings.Contains(reqs[0].raw, "first-marker-7731") || !strings.Contains(reqs[0].raw, "second-marker-7732") {
			t.Errorf("the cold resume's request does not carry the earlier turns")
		}
		// Let the child settle so its journal is flushed.
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			claims, _ := store.Residents(context.Background())
			if !slices.ContainsFunc(claims, func(c seam.Claim) bool { return c.ChildID == id }) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		events, _ := store.Events(context.Background(), id)
		sessions := map[string]bool{}
		for _, e := range events {
			if e.Kind == agent.EventSession {
				sessions[e.Session] = true
			}
		}
		if len(sessions) != 1 {
			t.Errorf("sessions recorded: %v, want exactly one", sessions)
		}
	})

	t.Run("structured output", func(t *testing.T) {
		schema := `{"type":"object","properties":{"answer":{"type":"integer"}},"required":["answer"]}`
		_, res := startAndWait(t, m, f, seam.StartRequest{Prompt: "REAL:structured", OutputSchema: json.RawMessage(schema)})
		if res.StopReason != agent.StopCompleted || string(res.Structured) != `{"answer":42}` {
			t.Errorf("%s structured %s (%s)", res.StopReason, res.Structured, res.Diagnostic)
		}
	})

	t.Run("persona and tool filter reach the model", func(t *testing.T) {
		_, res := startAndWait(t, m, f, seam.StartRequest{Prompt: "REAL:hello allow-marker-7741", Persona: "PERSONA-MARKER-7741: answer tersely.",
			ToolFilter: &seam.ToolFilter{Allow: []string{"Read", "Bash(git status:*)"}}})
		if res.StopReason != agent.StopCompleted {
			t.Fatalf("%s (%s)", res.StopReason, res.Diagnostic)
		}
		reqs := api.find("allow-marker-7741")
		if len(reqs) == 0 {
			t.Fatal("no request")
		}
		if !strings.Contains(string(reqs[0].System), "PERSONA-MARKER-7741") {
			t.Error("the persona is not in the system prompt")
		}
		// Newer CLIs (2.1.3xx) also send an inert DeferredToolPlaceholder
		// entry; it is not a tool the model can use.
		got := slices.DeleteFunc(reqs[0].toolNames(), func(n string) bool { return n == "DeferredToolPlaceholder" })
		if !slices.Equal(got, []string{"Bash", "Read"}) && !slices.Equal(got, []string{"Read", "Bash"}) {
			t.Errorf("tools shown with allow [Read, Bash(git status:*)] = %q", got)
		}

		_, res = startAndWait(t, m, f, seam.StartRequest{Prompt: "REAL:hello deny-marker-7742",
			ToolFilter: &seam.ToolFilter{Deny: []string{"Bash", "report"}}})
		if res.StopReason != agent.StopCompleted {
			t.Fatalf("%s (%s)", res.StopReason, res.Diagnostic)
		}
		reqs = api.find("deny-marker-7742")
		if len(reqs) == 0 {
			t.Fatal("no request")
		}
		got = reqs[0].toolNames()
		t.Logf("tools shown with deny [Bash, report]: %q", got)
		for _, banned := range []string{"Bash", "Task", "Agent", "Workflow", "mcp__subagent__report"} {
			if slices.Contains(got, banned) {
				t.Errorf("%s is shown despite the filter (tools %q)", banned, got)
			}
		}
		if !slices.Contains(got, "Read") {
			t.Errorf("Read is missing (tools %q)", got)
		}
	})

	t.Run("a tool the policy does not allow is denied and recorded", func(t *testing.T) {
		_, res := startAndWait(t, m, f, seam.StartRequest{Prompt: "REAL:denied"})
		if res.StopReason != agent.StopCompleted || !strings.Contains(res.Diagnostic, "denied: Bash") {
			t.Errorf("%s, diagnostic %q", res.StopReason, res.Diagnostic)
		}
		if _, err := os.Stat(filepath.Join(cwd, "denied.txt")); !os.IsNotExist(err) {
			t.Error("the denied command ran")
		}
	})

	t.Run("a read-only tool runs without approval", func(t *testing.T) {
		file := filepath.Join(cwd, "hello.txt")
		if err := os.WriteFile(file, []byte("CONTENT-MARKER-7751\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, res := startAndWait(t, m, f, seam.StartRequest{Prompt: "REAL:read READ-PATH=" + file})
		if res.StopReason != agent.StopCompleted || res.Diagnostic != "" {
			t.Fatalf("%s (%s)", res.StopReason, res.Diagnostic)
		}
		reqs := api.find("CONTENT-MARKER-7751")
		found := false
		for _, r := range reqs {
			found = found || r.lastHasToolResult()
		}
		if !found {
			t.Error("the file's content never reached the model: Read did not run")
		}
	})

	t.Run("the child calls report back over HTTP with its token", func(t *testing.T) {
		_, res := startAndWait(t, m, f, seam.StartRequest{Prompt: "REAL:report"})
		if res.StopReason != agent.StopCompleted {
			t.Fatalf("%s (%s)", res.StopReason, res.Diagnostic)
		}
		cb.mu.Lock()
		defer cb.mu.Unlock()
		if !slices.Contains(cb.reports, "progress from claude") {
			t.Errorf("reports = %q, output %q, diagnostic %q", cb.reports, res.Output, res.Diagnostic)
		}
		if cb.denied > 0 {
			t.Errorf("%d callback requests came without the bearer token", cb.denied)
		}
	})

	t.Run("interrupt stops the CLI within a second", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		st, err := m.StartContinuable(ctx, DefaultName, seam.StartRequest{Label: "hang", Prompt: "REAL:hang",
			Parent: seam.ParentRef{Principal: root.Principal, Cwd: cwd}}, true)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-api.hanging:
		case <-ctx.Done():
			t.Fatal("the CLI never called the model")
		}
		leaders := processesOf(path)
		if len(leaders) == 0 {
			t.Fatal("no claude process found")
		}
		t0 := time.Now()
		if err := m.Interrupt(root, st.ChildID); err != nil {
			t.Fatal(err)
		}
		res, ok := st.Wait(ctx)
		if d := time.Since(t0); d > time.Second {
			t.Errorf("the interrupted turn ended after %v", d)
		}
		if !ok || res.StopReason != agent.StopAborted {
			t.Errorf("%s (%s)", res.StopReason, res.Diagnostic)
		}
		for _, pgid := range leaders {
			assertNoLiveMember(t, pgid)
			waitGroupGone(t, pgid)
		}
		// The session named by the interrupted turn's init line goes on.
		_, res = followup(t, m, st.ChildID, "REAL:hello after-interrupt-7761")
		if res.StopReason != agent.StopCompleted {
			t.Errorf("the turn after an interrupt: %s (%s)", res.StopReason, res.Diagnostic)
		}
	})

	t.Run("a one-shot run", func(t *testing.T) {
		_, res, err := managertest.RunOnce(context.Background(), m, DefaultName, seam.StartRequest{Prompt: "REAL:hello oneshot-7771",
			Parent: seam.ParentRef{Principal: root.Principal, Cwd: cwd}})
		if err != nil || res.StopReason != agent.StopCompleted || !strings.HasPrefix(res.Output, "hello from the fake model") {
			t.Errorf("%v: %s %q (%s)", err, res.StopReason, res.Output, res.Diagnostic)
		}
	})
}

// processesOf lists the running processes of the executable at path.
func processesOf(path string) []int {
	want, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil
	}
	dirs, _ := os.ReadDir("/proc")
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", d.Name(), "exe")); err == nil && exe == want && descendsFromUs(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// descendsFromUs reports whether pid is a descendant of this test process:
// other packages' tests run the same CLI at the same time (go test runs
// packages in parallel), and their processes are not this test's.
func descendsFromUs(pid int) bool {
	self := os.Getpid()
	for i := 0; i < 64 && pid > 1; i++ {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			return false
		}
		// The fields after the command name, which may hold spaces and
		// parentheses: state, then the parent's pid.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 2 {
			return false
		}
		if pid, err = strconv.Atoi(f[1]); err != nil {
			return false
		}
		if pid == self {
			return true
		}
	}
	return false
}
