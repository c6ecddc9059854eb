package claudecode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/managertest"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/providers/internal/extturn"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// fake is one test's fake claude: its state directory and the child's cwd.
type fake struct {
	dir string // FAKE_CLAUDE_DIR
	cwd string
}

func newFake(t *testing.T) *fake {
	t.Helper()
	return &fake{dir: t.TempDir(), cwd: t.TempDir()}
}

// options runs the test binary as claude with only the fake's environment.
func (f *fake) options(t *testing.T) Options {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Options{Command: exe, Env: []string{envFakeMode + "=claude", envFakeDir + "=" + f.dir, "HOME=" + f.dir}}
}

// calls returns every recorded invocation, in order.
func (f *fake) calls(t *testing.T) []fakeCall {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(f.dir, "calls", "*.json"))
	slices.Sort(paths)
	var out []fakeCall
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var c fakeCall
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

func (f *fake) lastCall(t *testing.T) fakeCall {
	t.Helper()
	cs := f.calls(t)
	if len(cs) == 0 {
		t.Fatal("the fake claude was never called")
	}
	return cs[len(cs)-1]
}

// pids waits for the fake to write its pid (and its grandchild's).
func (f *fake) pids(t *testing.T) []int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(filepath.Join(f.dir, "pids")); err == nil && len(b) > 0 {
			var out []int
			for _, s := range strings.Fields(string(b)) {
				n, _ := strconv.Atoi(s)
				out = append(out, n)
			}
			return out
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the fake claude never wrote its pid")
	return nil
}

var root = seam.ParentRef{Principal: "tester"}

func newManager(t *testing.T, store seam.Store, opts Options, cb seam.CallbackFunc) *manager.Manager {
	t.Helper()
	m := manager.New(manager.Options{Store: store, Callback: cb})
	if err := m.Register(New(opts)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	})
	return m
}

// startAndWait starts a continuable child in f.cwd and waits for its first
// turn.
func startAndWait(t *testing.T, m *manager.Manager, f *fake, req seam.StartRequest) (string, seam.Result) {
	t.Helper()
	req.Parent = root
	req.Parent.Cwd = f.cwd
	if req.Label == "" {
		req.Label = "test child"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := m.StartContinuable(ctx, DefaultName, req, true)
	if err != nil {
		t.Fatalf("StartContinuable: %v", err)
	}
	res, ok := st.Wait(ctx)
	if !ok {
		t.Fatal("the first turn did not end")
	}
	return st.ChildID, res
}

func followup(t *testing.T, m *manager.Manager, id, text string) (manager.Route, seam.Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sent, err := m.Followup(ctx, root, id, text, true)
	if err != nil {
		t.Fatalf("Followup: %v", err)
	}
	res, ok := sent.Wait(ctx)
	if !ok {
		t.Fatal("the follow-up turn did not end")
	}
	return sent.Route, res
}

func groupGone(pgid int) bool { return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) }

// liveMembers lists the processes of a group that are not zombies, from
// /proc (nil where there is no /proc).
func liveMembers(pgid int) []int {
	dirs, _ := os.ReadDir("/proc")
	var live []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fs := strings.Fields(s[i+1:]) // state, ppid, pgrp, ...
		if len(fs) >= 3 && fs[2] == strconv.Itoa(pgid) && fs[0] != "Z" && fs[0] != "X" {
			live = append(live, pid)
		}
	}
	return live
}

// assertNoLiveMember checks, once a turn has ended, that every member of
// its process group is dead. SIGKILL has been sent to the group by then; a
// member takes a moment to finish dying (all its threads must exit), and
// an orphaned one then lingers as a zombie until PID 1 reaps it, which is
// not ours to hurry.
func assertNoLiveMember(t *testing.T, pgid int) {
	t.Helper()
	deadline := time.Now().Add(500 * time.Millisecond)
	for {
		live := liveMembers(pgid)
		if len(live) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("processes %v of group %d are alive after the turn ended", live, pgid)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitGroupGone waits until the group has no process at all, zombies
// included (kill(-pgid, 0) fails with ESRCH).
func waitGroupGone(t *testing.T, pgid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !groupGone(pgid) {
		if time.Now().After(deadline) {
			t.Fatalf("process group %d is still alive", pgid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCompletedTurnRecordsOutputUsageAndSession(t *testing.T) {
	f := newFake(t)
	opts := f.options(t)
	opts.Model = "claude-test-model"
	m := newManager(t, memstore.New(), opts, nil)
	_, res := startAndWait(t, m, f, seam.StartRequest{Prompt: "hello there"})
	if res.StopReason != agent.StopCompleted {
		t.Fatalf("stop = %s (%s)", res.StopReason, res.Diagnostic)
	}
	if res.Output != "turn 1: hello there" {
		t.Errorf("output = %q", res.Output)
	}
	want := seam.Usage{InputTokens: 150, OutputTokens: 7, CostUSD: 0.0123}
	if res.Usage != want {
		t.Errorf("usage = %+v, want %+v (input counts cache creation and reads)", res.Usage, want)
	}
	c := f.lastCall(t)
	if c.Stdin != "hello there" {
		t.Errorf("the prompt reached stdin as %q", c.Stdin)
	}
	fl := c.Flags
	if !fl.Print || !fl.Verbose || fl.OutputFormat != "stream-json" || fl.Model != "claude-test-model" ||
		fl.PermissionMode != "dontAsk" || !fl.Strict || fl.Resume != "" || !uuidRE.MatchString(fl.SessionID) {
		t.Errorf("flags = %+v", fl)
	}
	if c.Cwd != f.cwd {
		t.Errorf("cwd = %q, want %q", c.Cwd, f.cwd)
	}
	for _, tool := range []string{"Task", "Agent", "Workflow"} {
		if !slices.Contains(fl.Disallowed, tool) {
			t.Errorf("--disallowedTools %q lacks %s: nesting must go through this server", fl.Disallowed, tool)
		}
	}
	if fl.ToolsSet || len(fl.MCPConfigs) > 0 || fl.JSONSchema != "" || fl.AppendSystemPrompt != "" {
		t.Errorf("unasked-for flags: %+v", fl)
	}
}

func TestNonCompletedTurnsAreErrorsWithADiagnostic(t *testing.T) {
	f := newFake(t)
	m := newManager(t, memstore.New(), f.options(t), nil)
	cases := []struct {
		name, scenario string
		diag           []string
		schema         string
	}{
		{"an API failure arrives as success with is_error", "api-error", []string{"claude reported an error: API Error: 529", "Overloaded"}, ""},
		{"the turn limit", "max-turns", []string{"hit its turn limit (3 turns)"}, ""},
		{"a failure during execution", "during-execution", []string{"failed during execution: tool crashed: boom"}, ""},
		{"the budget limit", "max-budget", []string{"hit its budget limit"}, ""},
		{"structured output retries", "structured-retries", []string{"could not produce output matching the output schema", "after 5 attempts"},
			`{"type":"object","properties":{"answer":{"type":"integer"}}}`},
		{"an exit without a result line quotes stderr", "no-result", []string{"exited without a result (exit status 3)", "stderr: fatal: the fake crashed hard"}, ""},
		{"a structured output that is missing", "structured-missing", []string{"without structured output"},
			`{"type":"object","properties":{"answer":{"type":"integer"}},"required":["answer"]}`},
		{"a structured output that does not match", "structured-wrong", []string{"does not match the output schema"},
			`{"type":"object","properties":{"answer":{"type":"integer"}},"required":["answer"]}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := seam.StartRequest{Prompt: "SCENARIO:" + tc.scenario}
			if tc.schema != "" {
				req.OutputSchema = json.RawMessage(tc.schema)
			}
			_, res := startAndWait(t, m, f, req)
			if res.StopReason != agent.StopError {
				t.Fatalf("stop = %s, want error (diagnostic %q)", res.StopReason, res.Diagnostic)
			}
			for _, want := range tc.diag {
				if !strings.Contains(res.Diagnostic, want) {
					t.Errorf("diagnostic %q lacks %q", res.Diagnostic, want)
				}
			}
			if len(res.Structured) > 0 {
				t.Errorf("structured = %s on a failed turn", res.Structured)
			}
		})
	}
	t.Run("an API failure is not the child's output", func(t *testing.T) {
		_, res := startAndWait(t, m, f, seam.StartRequest{Prompt: "SCENARIO:api-error"})
		if res.Output != "" {
			t.Errorf("output = %q: the CLI's synthetic error message is not the model's words", res.Output)
		}
	})
}

func TestStructuredOutputComesFromTheResult(t *testing.T) {
	f := newFake(t)
	m := newManager(t, memstore.New(), f.options(t), nil)
	schema := `{
		"type": "object",
		"properties": {"answer": {"type": "integer"}},
		"required": ["answer"]
	}`
	_, res := startAndWait(t, m, f, seam.StartRequest{Prompt: "SCENARIO:structured", OutputSchema: json.RawMessage(schema)})
	if res.StopReason != agent.StopCompleted {
		t.Fatalf("stop = %s (%s)", res.StopReason, res.Diagnostic)
	}
	if string(res.Structured) != `{"answer":42}` {
		t.Errorf("structured = %s", res.Structured)
	}
	if got := f.lastCall(t).Flags.JSONSchema; got != `{"type":"object","properties":{"answer":{"type":"integer"}},"required":["answer"]}` {
		t.Errorf("--json-schema = %s (want the schema, compacted)", got)
	}
}

func TestFollowupAndColdResumeContinueTheSameSession(t *testing.T) {
	f := newFake(t)
	store := memstore.New()
	m1 := newManager(t, store, f.options(t), nil)

	// A follow-up sent while the first turn runs is queued behind it in the
	// same activation.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := m1.StartContinuable(ctx, DefaultName, seam.StartRequest{Label: "resumer", Prompt: "first SCENARIO:slow",
		Parent: seam.ParentRef{Principal: root.Principal, Cwd: f.cwd}}, true)
	if err != nil {
		t.Fatal(err)
	}
	id := st.ChildID
	sent, err := m1.Followup(ctx, root, id, "second", true)
	if err != nil {
		t.Fatal(err)
	}
	if sent.Route != manager.RouteQueued {
		t.Errorf("route = %s, want queued", sent.Route)
	}
	if res, ok := st.Wait(ctx); !ok || res.StopReason != agent.StopCompleted {
		t.Fatalf("first turn: %+v", res)
	}
	res, ok := sent.Wait(ctx)
	if !ok || res.StopReason != agent.StopCompleted {
		t.Fatalf("second turn: %+v", res)
	}
	if !strings.Contains(res.Output, "turn 2: second | history: first SCENARIO:slow") {
		t.Errorf("the follow-up did not continue the session: %q", res.Output)
	}

	// The server restarts: a new manager over the same store resumes the
	// child from its journal.
	if err := m1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	m2 := newManager(t, store, f.options(t), nil)
	route, res := followup(t, m2, id, "third")
	if route != manager.RouteResumed {
		t.Errorf("route = %s, want resumed", route)
	}
	if res.StopReason != agent.StopCompleted || !strings.Contains(res.Output, "turn 3: third | history: first SCENARIO:slow / second") {
		t.Errorf("cold resume: %s %q (%s)", res.StopReason, res.Output, res.Diagnostic)
	}

	calls := f.calls(t)
	if len(calls) != 3 {
		t.Fatalf("%d calls, want 3", len(calls))
	}
	session := calls[0].Flags.SessionID
	if session == "" || calls[0].Flags.Resume != "" {
		t.Fatalf("first call: --session-id %q --resume %q", session, calls[0].Flags.Resume)
	}
	for i, c := range calls[1:] {
		if c.Flags.Resume != session || c.Flags.SessionID != "" {
			t.Errorf("call %d: --resume %q --session-id %q, want --resume %s", i+2, c.Flags.Resume, c.Flags.SessionID, session)
		}
		if c.Cwd != f.cwd {
			t.Errorf("call %d ran in %q, want the child's cwd %q", i+2, c.Cwd, f.cwd)
		}
	}
	events, err := store.Events(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if got := agent.LastSession(events); got != session {
		t.Errorf("journal session = %q, want %q", got, session)
	}
	if err := agent.Validate(events); err != nil {
		t.Errorf("journal: %v", err)
	}
}

func TestResumeOfAnUnknownSessionIsAnError(t *testing.T) {
	f := newFake(t)
	store := memstore.New()
	m := newManager(t, store, f.options(t), nil)
	id, res := startAndWait(t, m, f, seam.StartRequest{Prompt: "one"})
	if res.StopReason != agent.StopCompleted {
		t.Fatal(res)
	}
	// The CLI's session store is wiped (another HOME, say).
	if err := os.RemoveAll(filepath.Join(f.dir, "sessions")); err != nil {
		t.Fatal(err)
	}
	_, res = followup(t, m, id, "two")
	if res.StopReason != agent.StopError || !strings.Contains(res.Diagnostic, "No conversation found with session ID") {
		t.Errorf("stop %s, diagnostic %q", res.StopReason, res.Diagnostic)
	}
}

func TestInterruptStopsTheWholeGroupWithinASecond(t *testing.T) {
	for _, scenario := range []string{"sleep", "sleep-stubborn"} {
		t.Run(scenario, func(t *testing.T) {
			f := newFake(t)
			m := newManager(t, memstore.New(), f.options(t), nil)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			st, err := m.StartContinuable(ctx, DefaultName, seam.StartRequest{Label: "sleeper", Prompt: "SCENARIO:" + scenario,
				Parent: seam.ParentRef{Principal: root.Principal, Cwd: f.cwd}}, true)
			if err != nil {
				t.Fatal(err)
			}
			pids := f.pids(t)
			pgid := pids[0]
			if groupGone(pgid) {
				t.Fatal("the fake's group is not running")
			}
			if _, err := os.Stat("/proc/self/stat"); err == nil && len(liveMembers(pgid)) < 2 {
				t.Fatalf("the group has members %v, want the fake and its grandchild", liveMembers(pgid))
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
				t.Fatalf("stop = %s (%s)", res.StopReason, res.Diagnostic)
			}
			if res.Output != "working on it" {
				t.Errorf("partial output = %q", res.Output)
			}
			if !strings.Contains(res.Diagnostic, "interrupted") {
				t.Errorf("diagnostic = %q", res.Diagnostic)
			}
			assertNoLiveMember(t, pgid)
			waitGroupGone(t, pgid)
		})
	}
}

func TestTimeoutKillsTheGroup(t *testing.T) {
	f := newFake(t)
	opts := f.options(t)
	// Long enough for the fake (the test binary, slow to start under -race)
	// to get going and write its pid.
	opts.Timeout = 3 * time.Second
	m := newManager(t, memstore.New(), opts, nil)
	t0 := time.Now()
	_, res := startAndWait(t, m, f, seam.StartRequest{Prompt: "SCENARIO:sleep"})
	if res.StopReason != agent.StopError || !strings.Contains(res.Diagnostic, "timed out after 3s") {
		t.Errorf("stop %s, diagnostic %q", res.StopReason, res.Diagnostic)
	}
	if d := time.Since(t0); d > 8*time.Second {
		t.Errorf("the turn took %v", d)
	}
	pgid := f.pids(t)[0]
	assertNoLiveMember(t, pgid)
	waitGroupGone(t, pgid)
}

func TestShutdownStopsARunningChild(t *testing.T) {
	f := newFake(t)
	m := newManager(t, memstore.New(), f.options(t), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := m.StartContinuable(ctx, DefaultName, seam.StartRequest{Label: "sleeper", Prompt: "SCENARIO:sleep",
		Parent: seam.ParentRef{Principal: root.Principal, Cwd: f.cwd}}, true)
	if err != nil {
		t.Fatal(err)
	}
	pgid := f.pids(t)[0]
	t0 := time.Now()
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
	if res, ok := st.Wait(ctx); ok && res.StopReason != agent.StopAborted {
		t.Errorf("stop = %s", res.StopReason)
	}
	assertNoLiveMember(t, pgid)
	waitGroupGone(t, pgid)
}

func TestALingeringCLIIsStoppedAfterItsResult(t *testing.T) {
	old := lingerGrace
	lingerGrace = 200 * time.Millisecond
	t.Cleanup(func() { lingerGrace = old })
	f := newFake(t)
	m := newManager(t, memstore.New(), f.options(t), nil)
	_, res := startAndWait(t, m, f, seam.StartRequest{Prompt: "SCENARIO:linger"})
	if res.StopReason != agent.StopCompleted || res.Output != "done, but slow to exit" {
		t.Errorf("stop %s, output %q (%s)", res.StopReason, res.Output, res.Diagnostic)
	}
	pgid := f.pids(t)[0]
	assertNoLiveMember(t, pgid)
	waitGroupGone(t, pgid)
}

func TestPermissionDenialsAreRecordedInTheDiagnostic(t *testing.T) {
	f := newFake(t)
	store := memstore.New()
	m := newManager(t, store, f.options(t), nil)
	id, res := startAndWait(t, m, f, seam.StartRequest{Prompt: "SCENARIO:denied"})
	if res.StopReason != agent.StopCompleted {
		t.Fatalf("stop = %s", res.StopReason)
	}
	if res.Diagnostic != "denied: Bash (2 times); denied: Write" {
		t.Errorf("diagnostic = %q", res.Diagnostic)
	}
	if res.Output != "I was not allowed to clean the build." {
		t.Errorf("output = %q", res.Output)
	}
	if got := f.lastCall(t).Flags.PermissionMode; got != "dontAsk" {
		t.Errorf("--permission-mode %q: headless children must not wait for approval", got)
	}
	// The tool calls are in the journal as notes, which keeps it balanced.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = m.Close(ctx)
	events, _ := store.Events(context.Background(), id)
	var notes []string
	for _, e := range events {
		if e.Message != nil && e.Message.Role == "assistant" && strings.HasPrefix(e.Message.Content, "[") {
			notes = append(notes, e.Message.Content)
		}
	}
	if want := []string{"[tool_use: Bash]", "[tool_use: Bash]", "[tool_use: Write]"}; !slices.Equal(notes, want) {
		t.Errorf("notes = %q, want %q", notes, want)
	}
}

func TestPermissionModeIsConfigurable(t *testing.T) {
	f := newFake(t)
	opts := f.options(t)
	opts.PermissionMode = "acceptEdits"
	opts.Args = []string{"--max-budget-usd", "1"}
	m := newManager(t, memstore.New(), opts, nil)
	startAndWait(t, m, f, seam.StartRequest{Prompt: "x"})
	c := f.lastCall(t)
	if c.Flags.PermissionMode != "acceptEdits" {
		t.Errorf("--permission-mode = %q", c.Flags.PermissionMode)
	}
	if c.Flags.MaxBudget != "1" || c.Args[0] != "--max-budget-usd" {
		t.Errorf("extra args: %q", c.Args)
	}
}

func TestTheChildSeesOnlyTheConfiguredEnvironment(t *testing.T) {
	t.Setenv("MCP_SUBAGENT_SERVER_SECRET", "must-not-leak")
	f := newFake(t)
	m := newManager(t, memstore.New(), f.options(t), nil)
	startAndWait(t, m, f, seam.StartRequest{Prompt: "env"})
	got := f.lastCall(t).Env
	want := f.options(t).Env
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the child's environment = %q, want exactly %q", got, want)
	}
}

func TestToolFilterPersonaAndCallbackFlags(t *testing.T) {
	f := newFake(t)
	cb := func(self seam.ParentRef) (seam.Callback, func()) {
		return seam.Callback{URL: "http://127.0.0.1:9/mcp", Token: "tok-" + self.AgentID}, nil
	}
	m := newManager(t, memstore.New(), f.options(t), cb)
	mcp := func(n string) string { return "mcp__subagent__" + n }

	t.Run("allow", func(t *testing.T) {
		id, res := startAndWait(t, m, f, seam.StartRequest{Prompt: "x", Persona: "- You are terse.",
			ToolFilter: &seam.ToolFilter{Allow: []string{"Read", "Bash(git log:*)", "Bash(git diff:*)", "report", "Task"}}})
		if res.StopReason != agent.StopCompleted {
			t.Fatal(res)
		}
		c := f.lastCall(t)
		fl := c.Flags
		if fl.AppendSystemPrompt != "- You are terse." {
			t.Errorf("--append-system-prompt = %q (a persona starting with a dash must stay a value)", fl.AppendSystemPrompt)
		}
		if !fl.ToolsSet || !slices.Equal(fl.Tools, []string{"Read", "Bash"}) {
			t.Errorf("--tools = %q, want the allowed built-ins", fl.Tools)
		}
		if want := []string{mcp("report"), "Read", "Bash(git log:*)", "Bash(git diff:*)"}; !slices.Equal(fl.Allowed, want) {
			t.Errorf("--allowedTools = %q, want %q", fl.Allowed, want)
		}
		if want := []string{"Task", "Agent", "Workflow", mcp("subagent"), mcp("send_message"), mcp("interrupt_agent"), mcp("list_agents")}; !slices.Equal(fl.Disallowed, want) {
			t.Errorf("--disallowedTools = %q, want %q (Task stays denied even when allowed)", fl.Disallowed, want)
		}
		var cfg struct {
			MCPServers map[string]struct {
				Type, URL string
				Headers   map[string]string
			} `json:"mcpServers"`
		}
		if err := json.Unmarshal([]byte(c.MCPConfig), &cfg); err != nil {
			t.Fatalf("MCP config %q: %v", c.MCPConfig, err)
		}
		s := cfg.MCPServers["subagent"]
		if s.Type != "http" || s.URL != "http://127.0.0.1:9/mcp" || s.Headers["Authorization"] != "Bearer tok-"+id {
			t.Errorf("MCP config = %+v", cfg)
		}
		if c.MCPMode != "-rw-------" {
			t.Errorf("the MCP config file (it holds the bearer token) has mode %s", c.MCPMode)
		}
		if !fl.Strict {
			t.Error("--strict-mcp-config missing")
		}
		if strings.Contains(strings.Join(c.Args, " "), "tok-") {
			t.Error("the bearer token is on the command line")
		}
		if _, err := os.Stat(fl.MCPConfigs[0]); !os.IsNotExist(err) {
			t.Errorf("the MCP config file outlived the turn: %v", err)
		}
	})
	t.Run("empty allow keeps no tool", func(t *testing.T) {
		startAndWait(t, m, f, seam.StartRequest{Prompt: "x", ToolFilter: &seam.ToolFilter{Allow: []string{}}})
		fl := f.lastCall(t).Flags
		if !fl.ToolsSet || !slices.Equal(fl.Tools, []string{""}) || len(fl.Allowed) != 0 {
			t.Errorf("--tools %q --allowedTools %q", fl.Tools, fl.Allowed)
		}
	})
	t.Run("deny", func(t *testing.T) {
		startAndWait(t, m, f, seam.StartRequest{Prompt: "x",
			ToolFilter: &seam.ToolFilter{Deny: []string{"Bash", "WebFetch", "mcp__subagent__subagent"}}})
		fl := f.lastCall(t).Flags
		if fl.ToolsSet {
			t.Errorf("--tools %q with a deny filter", fl.Tools)
		}
		if want := []string{mcp("send_message"), mcp("interrupt_agent"), mcp("list_agents"), mcp("report")}; !slices.Equal(fl.Allowed, want) {
			t.Errorf("--allowedTools = %q, want %q", fl.Allowed, want)
		}
		if want := []string{"Task", "Agent", "Workflow", mcp("subagent"), "Bash", "WebFetch"}; !slices.Equal(fl.Disallowed, want) {
			t.Errorf("--disallowedTools = %q, want %q", fl.Disallowed, want)
		}
	})
}

// TestDepthIsEnforcedForDelegationsThroughTheCallback has the child call
// this server back (as its MCP client would, with its bearer token) to
// start a grandchild: the manager refuses one past the depth cap.
func TestDepthIsEnforcedForDelegationsThroughTheCallback(t *testing.T) {
	f := newFake(t)
	var mu sync.Mutex
	selves := map[string]seam.ParentRef{}
	var m *manager.Manager
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		mu.Lock()
		self, ok := selves[tok]
		mu.Unlock()
		if !ok {
			http.Error(w, "UNAUTHORIZED", http.StatusUnauthorized)
			return
		}
		body, _ := io.ReadAll(r.Body)
		st, err := m.StartContinuable(r.Context(), DefaultName, seam.StartRequest{Label: "grandchild", Prompt: string(body), Parent: self}, false)
		if err != nil {
			fmt.Fprintf(w, "%s: %v", seam.CodeOf(err), err)
			return
		}
		fmt.Fprintf(w, "started %s at depth %d", st.ChildID, self.Depth+1)
	}))
	defer srv.Close()
	n := 0
	cb := func(self seam.ParentRef) (seam.Callback, func()) {
		mu.Lock()
		defer mu.Unlock()
		n++
		tok := fmt.Sprintf("tok-%d", n)
		selves[tok] = self
		return seam.Callback{URL: srv.URL, Token: tok}, func() {
			mu.Lock()
			delete(selves, tok)
			mu.Unlock()
		}
	}
	m = newManager(t, memstore.New(), f.options(t), cb)
	one, two := 1, 2
	_, res := startAndWait(t, m, f, seam.StartRequest{Prompt: "SCENARIO:delegate", MaxDepth: &one})
	if res.StopReason != agent.StopCompleted || !strings.Contains(res.Output, "DEPTH_EXCEEDED: subagent depth 2 exceeds maxDepth 1") {
		t.Errorf("max_depth 1: %s %q", res.StopReason, res.Output)
	}
	_, res = startAndWait(t, m, f, seam.StartRequest{Prompt: "SCENARIO:delegate", MaxDepth: &two})
	if res.StopReason != agent.StopCompleted || !strings.Contains(res.Output, "at depth 2") {
		t.Errorf("max_depth 2: %s %q", res.StopReason, res.Output)
	}
}

func TestOneShotRunKeepsNoSession(t *testing.T) {
	f := newFake(t)
	m := newManager(t, nil, f.options(t), nil)
	var notes []string
	var mu sync.Mutex
	_, res, err := managertest.RunOnce(context.Background(), m, DefaultName, seam.StartRequest{Prompt: "once",
		Parent: seam.ParentRef{Principal: root.Principal, Cwd: f.cwd},
		Progress: func(n string) {
			mu.Lock()
			notes = append(notes, n)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != agent.StopCompleted || res.Output != "turn 1: once" || res.Usage.CostUSD != 0.0123 {
		t.Errorf("result = %+v", res)
	}
	fl := f.lastCall(t).Flags
	if !fl.NoPersist || fl.SessionID != "" || fl.Resume != "" {
		t.Errorf("one-shot flags: %+v", fl)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(notes) == 0 {
		t.Error("no progress notes")
	}
}

func TestAMissingCommandRefusesTheStart(t *testing.T) {
	f := newFake(t)
	opts := f.options(t)
	opts.Command = "claude-definitely-not-installed"
	m := newManager(t, memstore.New(), opts, nil)
	_, err := m.StartContinuable(context.Background(), DefaultName, seam.StartRequest{Label: "x", Prompt: "x",
		Parent: seam.ParentRef{Principal: root.Principal, Cwd: f.cwd}}, true)
	if seam.CodeOf(err) != seam.CodeInvalidRequest || !strings.Contains(err.Error(), "claude-definitely-not-installed") {
		t.Errorf("err = %v", err)
	}
}

func TestCapabilities(t *testing.T) {
	got := New(Options{}).Capabilities()
	want := seam.Capabilities{OutputSchema: true, DepthLimit: true, ToolFilter: true, Persona: true}
	if got != want {
		t.Errorf("capabilities = %+v", got)
	}
	var p seam.Provider = New(Options{})
	if _, ok := p.(seam.ToolNamer); ok {
		t.Error("claude-code must not be a ToolNamer: Claude's tool names are open-ended")
	}
	if p.Name() != "claude-code" {
		t.Errorf("name = %q", p.Name())
	}
}

func TestParseLineReadsTheRealFormat(t *testing.T) {
	// Lines as claude 2.1.197 wrote them against a fake Messages API.
	init := `{"type":"system","subtype":"init","cwd":"/tmp/w","session_id":"11111111-2222-4333-8444-555555555555","tools":["Bash","Read"],"mcp_servers":[],"model":"fake","permissionMode":"dontAsk","apiKeySource":"ANTHROPIC_API_KEY","claude_code_version":"2.1.197","uuid":"362159b3-a0fc-4758-b13f-7e510a08e102"}`
	res := `{"type":"result","subtype":"success","is_error":false,"api_error_status":null,"duration_ms":310,"num_turns":2,"result":"done","stop_reason":"end_turn","session_id":"e024db81-fdfa-49c1-b4a5-d870def186d5","total_cost_usd":0.0002,"usage":{"input_tokens":10,"cache_creation_input_tokens":1,"cache_read_input_tokens":2,"output_tokens":6},"modelUsage":{"fake":{"inputTokens":10}},"permission_denials":[{"tool_name":"Bash","tool_use_id":"toolu_2","tool_input":{"command":"touch x"}}],"terminal_reason":"completed"}`
	l, err := parseLine([]byte(init))
	if err != nil || l.Type != "system" || l.Subtype != "init" || l.SessionID != "11111111-2222-4333-8444-555555555555" {
		t.Errorf("init: %+v %v", l, err)
	}
	l, err = parseLine([]byte(res))
	if err != nil || l.Usage == nil || l.Usage.tokens().InputTokens != 13 || l.TotalCostUSD != 0.0002 || len(l.PermissionDenials) != 1 || l.PermissionDenials[0].ToolName != "Bash" {
		t.Errorf("result: %+v %v", l, err)
	}
	if _, err := parseLine([]byte(`{"no":"type"}`)); err == nil {
		t.Error("a line without a type parsed")
	}
}

func FuzzStream(f *testing.F) {
	f.Add([]byte(`{"type":"assistant","message":{"id":"m","content":[{"type":"text","text":"hi"},{"type":"tool_use","name":"Bash"}],"usage":{"input_tokens":1}}}` + "\n" +
		`{"type":"result","subtype":"success","is_error":false,"result":"hi","usage":{"output_tokens":2},"permission_denials":[{"tool_name":"Bash"}],"errors":[{"message":"x"}]}`))
	f.Add([]byte(`{"type":"user","message":{"content":"plain"}}` + "\n" + `{"type":"system","subtype":"init","session_id":"s"}`))
	f.Add([]byte("not json\n\n{}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		j, _ := agent.NewJournal(nil)
		tr := extturn.Begin(j, []agent.Input{{Text: "fuzz"}})
		s := newStream(tr, false)
		s.read(strings.NewReader(string(b)))
		_ = s.usage()
		_ = s.denials()
		if s.result != nil {
			_ = errorsText(s.result.Errors)
		}
		tr.End(agent.StopCompleted, nil)
		if err := agent.Validate(j.Events()); err != nil {
			t.Fatalf("the journal breaks its invariants: %v", err)
		}
	})
}

func TestNoGoroutineOutlivesATurn(t *testing.T) {
	f := newFake(t)
	opts := f.options(t)
	opts.Timeout = 2 * time.Second
	p := New(opts)
	settle := func() int {
		n := runtime.NumGoroutine()
		for i := 0; i < 50; i++ {
			time.Sleep(10 * time.Millisecond)
			if m := runtime.NumGoroutine(); m == n {
				return n
			} else {
				n = m
			}
		}
		return n
	}
	before := settle()
	for _, prompt := range []string{"hi", "SCENARIO:no-result", "SCENARIO:denied", "SCENARIO:sleep", "SCENARIO:linger"} {
		j, _ := agent.NewJournal(nil)
		d, err := p.newDriver(turnConfig{cwd: f.cwd, callback: seam.Callback{URL: "http://127.0.0.1:9/mcp", Token: "t"}}, j)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		if prompt == "SCENARIO:sleep" {
			time.AfterFunc(300*time.Millisecond, cancel)
		}
		old := lingerGrace
		lingerGrace = 100 * time.Millisecond
		res := d.RunTurn(ctx, []agent.Input{{Text: prompt}})
		lingerGrace = old
		cancel()
		_ = d.Close()
		if err := agent.Validate(j.Events()); err != nil {
			t.Errorf("%s: journal: %v", prompt, err)
		}
		t.Logf("%s: %s", prompt, res.StopReason)
	}
	if after := settle(); after > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines before, %d after:\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
}
