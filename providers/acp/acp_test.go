package acp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeacp"
	"github.com/mcp-subagent/mcp-subagent/internal/managertest"
	"github.com/mcp-subagent/mcp-subagent/internal/subreaper"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

func TestMain(m *testing.M) {
	subreaper.Main() // a supervisor of the processes the tests start, when re-executed as one
	if os.Getenv(fakeacp.EnvFake) == "1" {
		os.Exit(fakeacp.Main())
	}
	os.Exit(m.Run())
}

// fixture is a fake agent's directory, a work directory and a provider
// that runs the fake there.
type fixture struct {
	t    *testing.T
	dir  string // the fake's records and sessions
	cwd  string // the child's working directory
	opts Options
}

type fakeConfig struct {
	load, http bool
	permission string
	timeout    time.Duration
}

func newFixture(t *testing.T, c fakeConfig) *fixture {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, dir: t.TempDir(), cwd: t.TempDir()}
	env := []string{fakeacp.EnvFake + "=1", fakeacp.EnvDir + "=" + f.dir}
	if c.load {
		env = append(env, fakeacp.EnvLoad+"=1")
	}
	if c.http {
		env = append(env, fakeacp.EnvHTTP+"=1")
	}
	f.opts = Options{Command: exe, Env: env, Permission: c.permission, Timeout: c.timeout}
	t.Cleanup(func() { f.checkGroupsGone() })
	return f
}

func (f *fixture) provider() *Provider {
	f.t.Helper()
	p, err := New(f.opts)
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

// manager returns a manager on store with a fresh provider registered;
// it is closed when the test ends.
func (f *fixture) manager(store seam.Store, cb seam.CallbackFunc) *manager.Manager {
	f.t.Helper()
	m := manager.New(manager.Options{Store: store, Callback: cb})
	if err := m.Register(f.provider()); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { closeManager(f.t, m) })
	return m
}

func closeManager(t *testing.T, m *manager.Manager) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		t.Error(err)
	}
}

var root = seam.ParentRef{Principal: "local"}

func (f *fixture) request(prompt string) seam.StartRequest {
	parent := root
	parent.Cwd = f.cwd
	return seam.StartRequest{Label: "acp test", Prompt: prompt, Parent: parent}
}

// start starts a continuable child and waits for its first turn.
func (f *fixture) start(m *manager.Manager, prompt string) (string, seam.Result) {
	f.t.Helper()
	st, err := m.StartContinuable(context.Background(), "acp", f.request(prompt), true)
	if err != nil {
		f.t.Fatal(err)
	}
	return st.ChildID, f.wait(func(ctx context.Context) (seam.Result, bool) { return st.Wait(ctx) })
}

// send sends a follow-up and waits for its turn.
func (f *fixture) send(m *manager.Manager, id, text string) (manager.Route, seam.Result) {
	f.t.Helper()
	sent, err := m.Followup(context.Background(), root, id, text, true)
	if err != nil {
		f.t.Fatal(err)
	}
	return sent.Route, f.wait(func(ctx context.Context) (seam.Result, bool) { return sent.Wait(ctx) })
}

func (f *fixture) wait(w func(context.Context) (seam.Result, bool)) seam.Result {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, ok := w(ctx)
	if !ok {
		f.t.Fatal("the turn did not end")
	}
	return res
}

// records reads what the fake agents were asked, in order.
func (f *fixture) records() []fakeacp.Record {
	f.t.Helper()
	fh, err := os.Open(filepath.Join(f.dir, "calls.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	defer fh.Close()
	var out []fakeacp.Record
	sc := bufio.NewScanner(fh)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r fakeacp.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			f.t.Fatalf("calls.jsonl: %v", err)
		}
		out = append(out, r)
	}
	return out
}

func (f *fixture) calls(method string) []fakeacp.Record {
	var out []fakeacp.Record
	for _, r := range f.records() {
		if r.Method == method {
			out = append(out, r)
		}
	}
	return out
}

// waitCall waits until the fakes recorded n calls of method.
func (f *fixture) waitCall(method string, n int) []fakeacp.Record {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rs := f.calls(method)
		if len(rs) >= n {
			return rs
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("no %d %s calls; records: %+v", n, method, f.records())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkGroupsGone fails unless every fake's process group (and every
// grandchild) is gone. Orphaned grandchildren are reaped by pid 1, which
// may take a moment in a container.
func (f *fixture) checkGroupsGone() {
	f.t.Helper()
	var pids []int
	for _, r := range f.records() {
		switch {
		case r.Method == "start":
			pids = append(pids, r.PID)
		case r.Child != 0:
			pids = append(pids, r.Child)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for !groupGone(pid) {
			if time.Now().After(deadline) {
				f.t.Errorf("process group %d outlived the child", pid)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// settledEvents waits until the child has settled (its writer's last
// commit clears the active mark) and returns its stored journal.
func settledEvents(t *testing.T, store seam.Store, id string) []agent.Event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		claims, err := store.Residents(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(claims, func(c seam.Claim) bool { return c.ChildID == id }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %s did not settle", id)
		}
		time.Sleep(5 * time.Millisecond)
	}
	evs, err := store.Events(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// assistantMessages returns the assistant messages a child's journal holds.
func assistantMessages(t *testing.T, store seam.Store, id string) []string {
	t.Helper()
	evs := settledEvents(t, store, id)
	var out []string
	for _, e := range evs {
		if e.Kind == agent.EventMessage && e.Message.Role == seam.RoleAssistant {
			out = append(out, e.Message.Content)
		}
	}
	return out
}

func lastSession(t *testing.T, store seam.Store, id string) string {
	t.Helper()
	return agent.LastSession(settledEvents(t, store, id))
}

func TestNewRefusesBadOptions(t *testing.T) {
	exe, _ := os.Executable()
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"no command", Options{}, "Options.Command is required"},
		{"command not found", Options{Command: "no-such-acp-agent-here"}, "Options.Command"},
		{"unknown permission", Options{Command: exe, Permission: "prompt"}, "Options.Permission"},
		{"negative question timeout", Options{Command: exe, Permission: PermissionAsk, QuestionTimeout: -time.Second}, "Options.QuestionTimeout"},
		{"negative timeout", Options{Command: exe, Timeout: -time.Second}, "Options.Timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New(%+v) = %v, want an error naming %s", tt.opts, err, tt.want)
			}
		})
	}
	p, err := New(Options{Command: exe})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "acp" || p.opts.Permission != PermissionDeny {
		t.Errorf("defaults: name %q, permission %q", p.Name(), p.opts.Permission)
	}
}

func TestStopReasonMapping(t *testing.T) {
	tests := []struct {
		in   acpsdk.StopReason
		want agent.StopReason
	}{
		{acpsdk.StopReasonEndTurn, agent.StopCompleted},
		{acpsdk.StopReasonMaxTokens, agent.StopMaxTokens},
		{acpsdk.StopReasonCancelled, agent.StopAborted},
		{acpsdk.StopReasonRefusal, agent.StopRefusal},
		{acpsdk.StopReasonMaxTurnRequests, agent.StopError},
		{"", agent.StopError},
		{"something_new", agent.StopError},
	}
	for _, tt := range tests {
		got, diag := stopReason(tt.in)
		if got != tt.want {
			t.Errorf("stopReason(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if (got == agent.StopCompleted) != (diag == "") {
			t.Errorf("stopReason(%q) diagnostic %q", tt.in, diag)
		}
	}
}

// The capability flags are all false, and the manager refuses what needs
// them before starting anything.
func TestCapabilitiesAreRefusedBeforeStart(t *testing.T) {
	f := newFixture(t, fakeConfig{})
	m := f.manager(memstore.New(), nil)
	if caps := f.provider().Capabilities(); caps != (seam.Capabilities{}) {
		t.Fatalf("capabilities = %+v, want all false", caps)
	}
	two := 2
	for name, mut := range map[string]func(*seam.StartRequest){
		"output_schema": func(r *seam.StartRequest) { r.OutputSchema = json.RawMessage(`{"type":"object"}`) },
		"max_depth":     func(r *seam.StartRequest) { r.MaxDepth = &two },
		"tool_filter":   func(r *seam.StartRequest) { r.ToolFilter = &seam.ToolFilter{Deny: []string{"x"}} },
		"persona":       func(r *seam.StartRequest) { r.Persona = "a pirate" },
		"model":         func(r *seam.StartRequest) { r.Model = "gpt-5" },
		"effort":        func(r *seam.StartRequest) { r.Effort = "high" },
	} {
		req := f.request("hello")
		mut(&req)
		_, err := m.StartContinuable(context.Background(), "acp", req, true)
		if !errors.Is(err, &seam.Error{Code: seam.CodeUnsupportedCapability}) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err = %v, want UNSUPPORTED_CAPABILITY naming it", name, err)
		}
	}
	if rs := f.records(); len(rs) != 0 {
		t.Errorf("an agent was started: %+v", rs)
	}
}

// A completed turn, a follow-up after the child settled (a new process
// that loads the same session), nothing replayed twice, the server's
// environment kept out, and every process group gone.
func TestTurnFollowupAndHygiene(t *testing.T) {
	t.Setenv("MCP_SUBAGENT_TEST_SECRET", "must-not-leak")
	f := newFixture(t, fakeConfig{load: true})
	store := memstore.New()
	m := f.manager(store, nil)

	id, res := f.start(m, "hello")
	if res.StopReason != agent.StopCompleted || res.Output != "echo: hello (turn 1)" || res.Diagnostic != "" {
		t.Fatalf("first turn = %+v", res)
	}
	news := f.calls("session/new")
	if len(news) != 1 {
		t.Fatalf("session/new calls = %+v", news)
	}
	if news[0].Cwd != f.cwd || string(news[0].McpServers) != "[]" {
		t.Errorf("session/new cwd %q mcpServers %s; want %q and []", news[0].Cwd, news[0].McpServers, f.cwd)
	}
	session := lastSession(t, store, id)
	if session != news[0].Session {
		t.Errorf("journal session %q, agent's %q", session, news[0].Session)
	}

	route, res := f.send(m, id, "again")
	if route != manager.RouteResumed {
		t.Errorf("route = %q; the child should have settled after its turn", route)
	}
	if res.StopReason != agent.StopCompleted || res.Output != "echo: again (turn 2)" {
		t.Fatalf("follow-up = %+v", res)
	}
	loads := f.calls("session/load")
	if len(loads) != 1 || loads[0].Session != session || loads[0].Cwd != f.cwd {
		t.Errorf("session/load calls = %+v, want one for %s", loads, session)
	}
	if got, want := assistantMessages(t, store, id), []string{"echo: hello (turn 1)", "echo: again (turn 2)"}; !slices.Equal(got, want) {
		t.Errorf("assistant messages = %q, want %q (the replayed history must not be journaled)", got, want)
	}

	starts := f.calls("start")
	if len(starts) != 2 {
		t.Fatalf("agent processes = %d, want 2", len(starts))
	}
	for _, s := range starts {
		for _, kv := range s.Env {
			if strings.HasPrefix(kv, "MCP_SUBAGENT_TEST_SECRET=") {
				t.Errorf("the server's environment leaked into the agent: %s", kv)
			}
		}
		if !slices.Contains(s.Env, fakeacp.EnvFake+"=1") {
			t.Errorf("the configured environment is missing: %q", s.Env)
		}
	}
	f.checkGroupsGone()
}

// A follow-up queued behind a running turn runs in the same activation:
// the same process and session, no reload.
func TestQueuedTurnKeepsTheProcess(t *testing.T) {
	f := newFixture(t, fakeConfig{load: true})
	m := f.manager(memstore.New(), nil)
	st, err := m.StartContinuable(context.Background(), "acp", f.request("pause, then one"), false)
	if err != nil {
		t.Fatal(err)
	}
	f.waitCall("session/prompt", 1)
	route, res := f.send(m, st.ChildID, "two")
	if route != manager.RouteQueued || res.StopReason != agent.StopCompleted || res.Output != "echo: two (turn 2)" {
		t.Fatalf("route %q, result %+v", route, res)
	}
	if starts, loads := f.calls("start"), f.calls("session/load"); len(starts) != 1 || len(loads) != 0 {
		t.Errorf("%d processes and %d loads for two queued turns, want 1 and 0", len(starts), len(loads))
	}
}

func TestStopReasonsEndTurns(t *testing.T) {
	f := newFixture(t, fakeConfig{})
	m := f.manager(memstore.New(), nil)
	tests := []struct {
		prompt string
		stop   agent.StopReason
		diag   string
	}{
		{"please hit max_tokens", agent.StopMaxTokens, "max_tokens"},
		{"please refusal", agent.StopRefusal, "declined"},
		{"please max_turn_requests", agent.StopError, "max_turn_requests"},
		{"please unknown_stop", agent.StopError, `unknown stop reason "gave_up"`},
		{"please crash", agent.StopError, "crashed on purpose"},
		// The agent's stdout (the connection) ends before its stderr does.
		{"please late crash", agent.StopError, "crashed on purpose, late"},
	}
	for _, tt := range tests {
		t.Run(tt.prompt, func(t *testing.T) {
			_, res := f.start(m, tt.prompt)
			if res.StopReason != tt.stop || !strings.Contains(res.Diagnostic, tt.diag) {
				t.Errorf("result = %+v, want %s with a diagnostic containing %q", res, tt.stop, tt.diag)
			}
			if !strings.Contains(tt.prompt, "crash") && res.Output != "partial answer" {
				t.Errorf("output = %q, want the partial answer kept", res.Output)
			}
		})
	}
}

func TestPermissionPolicy(t *testing.T) {
	tests := []struct {
		policy  string
		outcome string
		note    string
		denied  bool
	}{
		{"", "reject", "[permission denied: Write config]", true},
		{PermissionAllow, "allow", "[permission allowed: Write config]", false},
	}
	for _, tt := range tests {
		t.Run("policy "+tt.policy, func(t *testing.T) {
			f := newFixture(t, fakeConfig{permission: tt.policy})
			store := memstore.New()
			m := f.manager(store, nil)
			id, res := f.start(m, "needs permission")
			if res.StopReason != agent.StopCompleted || res.Output != "permission outcome: "+tt.outcome {
				t.Fatalf("result = %+v, want the agent to see %q", res, tt.outcome)
			}
			if got := f.calls("permission-outcome"); len(got) != 1 || got[0].Text != tt.outcome {
				t.Errorf("the agent got %+v, want %q", got, tt.outcome)
			}
			if tt.denied != strings.Contains(res.Diagnostic, "denied: Write config") {
				t.Errorf("diagnostic = %q", res.Diagnostic)
			}
			if msgs := assistantMessages(t, store, id); !slices.Contains(msgs, tt.note) {
				t.Errorf("journal %q lacks %q", msgs, tt.note)
			}
		})
	}
}

// Updates stream into the journal: chunks become one message per stretch
// of text, tools become notes, thoughts and plans are left out, usage and
// cost are recorded.
func TestUpdatesStreamIntoTheJournal(t *testing.T) {
	f := newFixture(t, fakeConfig{})
	store := memstore.New()
	m := f.manager(store, nil)
	id, res := f.start(m, "use tools")
	if res.StopReason != agent.StopCompleted || res.Output != "Found it." {
		t.Fatalf("result = %+v", res)
	}
	want := []string{"Let me look.", "[tool: Read file (pending)]", "[tool completed: Read file]", "Found it."}
	if got := assistantMessages(t, store, id); !slices.Equal(got, want) {
		t.Errorf("assistant messages = %q, want %q", got, want)
	}
	if res.Usage.InputTokens != 100 || res.Usage.OutputTokens != 20 || res.Usage.CostUSD != 0.25 {
		t.Errorf("usage = %+v", res.Usage)
	}
}

// More updates than the SDK's 1024-notification queue holds, in one turn:
// the handler never blocks, so none is lost and the connection stays up.
func TestUpdateFloodIsNotLost(t *testing.T) {
	f := newFixture(t, fakeConfig{})
	m := f.manager(memstore.New(), nil)
	_, res := f.start(m, "flood")
	if res.StopReason != agent.StopCompleted || res.Output != strings.Repeat("x", fakeacp.FloodChunks) {
		t.Fatalf("result: %s, output of %d bytes, diagnostic %q", res.StopReason, len(res.Output), res.Diagnostic)
	}
}

func TestInterruptIsAnsweredWithinASecond(t *testing.T) {
	f := newFixture(t, fakeConfig{load: true})
	m := f.manager(memstore.New(), nil)
	st, err := m.StartContinuable(context.Background(), "acp", f.request("be slow"), true)
	if err != nil {
		t.Fatal(err)
	}
	f.waitCall("blocking", 1)
	t0 := time.Now()
	if err := m.Interrupt(root, st.ChildID); err != nil {
		t.Fatal(err)
	}
	res := f.wait(func(ctx context.Context) (seam.Result, bool) { return st.Wait(ctx) })
	if d := time.Since(t0); d > time.Second {
		t.Errorf("the interrupt took %v", d)
	}
	if res.StopReason != agent.StopAborted || res.Output != "working and stopped" {
		t.Errorf("result = %+v, want aborted with the flushed partial output", res)
	}
	f.waitCall("cancel-honoured", 1)
	// The SDK may end the prompt (cancel-honoured) before the agent's
	// session/cancel handler has recorded the notification: wait for it.
	f.waitCall("session/cancel", 1)
	if len(f.calls("session/cancel")) != 1 {
		t.Errorf("session/cancel was not sent once: %+v", f.records())
	}
}

// An agent that ignores session/cancel has its process group (grandchild
// included) stopped; the next turn starts a new process that loads the
// same session.
func TestIgnoredCancelStopsTheGroup(t *testing.T) {
	f := newFixture(t, fakeConfig{load: true})
	store := memstore.New()
	m := f.manager(store, nil)
	st, err := m.StartContinuable(context.Background(), "acp", f.request("be stubborn"), true)
	if err != nil {
		t.Fatal(err)
	}
	f.waitCall("blocking", 1)
	t0 := time.Now()
	if err := m.Interrupt(root, st.ChildID); err != nil {
		t.Fatal(err)
	}
	res := f.wait(func(ctx context.Context) (seam.Result, bool) { return st.Wait(ctx) })
	if d := time.Since(t0); d > cancelWait+stopGrace+time.Second {
		t.Errorf("the interrupt took %v", d)
	}
	if res.StopReason != agent.StopAborted || !strings.Contains(res.Diagnostic, "process group was stopped") {
		t.Errorf("result = %+v", res)
	}
	f.checkGroupsGone()

	session := lastSession(t, store, st.ChildID)
	_, res = f.send(m, st.ChildID, "after")
	if res.StopReason != agent.StopCompleted || !strings.HasPrefix(res.Output, "echo: after") {
		t.Fatalf("next turn = %+v", res)
	}
	if loads := f.calls("session/load"); len(loads) != 1 || loads[0].Session != session {
		t.Errorf("session/load = %+v, want %s", loads, session)
	}
}

func TestTimeoutEndsTheTurn(t *testing.T) {
	f := newFixture(t, fakeConfig{timeout: 300 * time.Millisecond})
	m := f.manager(memstore.New(), nil)
	_, res := f.start(m, "be slow")
	if res.StopReason != agent.StopError || !strings.Contains(res.Diagnostic, "timed out") {
		t.Errorf("result = %+v", res)
	}
}

// A restart of the server (a second manager on the same store) resumes
// the child cold: with session/load the agent continues the same session;
// without it the child goes on in a new session and the journal says so.
func TestColdResumeAfterRestart(t *testing.T) {
	for _, load := range []bool{true, false} {
		name := map[bool]string{true: "loadSession", false: "no loadSession"}[load]
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, fakeConfig{load: load})
			store := memstore.New()
			m1 := f.manager(store, nil)
			id, res := f.start(m1, "first")
			if res.StopReason != agent.StopCompleted {
				t.Fatalf("first turn = %+v", res)
			}
			session := lastSession(t, store, id) // waits until the child settled
			closeManager(t, m1)

			m2 := f.manager(store, nil)
			route, res := f.send(m2, id, "second")
			if route != manager.RouteResumed || res.StopReason != agent.StopCompleted {
				t.Fatalf("resumed turn: route %q, %+v", route, res)
			}
			msgs := assistantMessages(t, store, id)
			if load {
				if res.Output != "echo: second (turn 2)" {
					t.Errorf("output = %q: the agent did not continue its session", res.Output)
				}
				if loads := f.calls("session/load"); len(loads) != 1 || loads[0].Session != session {
					t.Errorf("session/load = %+v, want %s", loads, session)
				}
				if len(f.calls("session/new")) != 1 {
					t.Errorf("a new session was opened: %+v", f.calls("session/new"))
				}
				if lastSession(t, store, id) != session {
					t.Error("the journal's session changed")
				}
				return
			}
			if res.Output != "echo: second (turn 1)" {
				t.Errorf("output = %q", res.Output)
			}
			if len(f.calls("session/load")) != 0 || len(f.calls("session/new")) != 2 {
				t.Errorf("calls = %+v", f.records())
			}
			if got := lastSession(t, store, id); got == session || got == "" {
				t.Errorf("the new session %q was not recorded", got)
			}
			if !slices.ContainsFunc(msgs, func(s string) bool { return strings.Contains(s, "cannot load sessions") }) {
				t.Errorf("the journal does not say the session was replaced: %q", msgs)
			}
		})
	}
}

// The deployment's callback reaches session/new as an HTTP MCP server with
// the bearer token, when the agent accepts HTTP MCP servers.
func TestCallbackBecomesAnHTTPMCPServer(t *testing.T) {
	for _, http := range []bool{true, false} {
		t.Run(map[bool]string{true: "http", false: "no http"}[http], func(t *testing.T) {
			f := newFixture(t, fakeConfig{http: http})
			var mu sync.Mutex
			revoked := 0
			cb := func(self seam.ParentRef) (seam.Callback, func()) {
				return seam.Callback{URL: "http://127.0.0.1:9/mcp", Token: "tok-" + self.AgentID},
					func() { mu.Lock(); revoked++; mu.Unlock() }
			}
			m := f.manager(memstore.New(), cb)
			id, res := f.start(m, "hello")
			if res.StopReason != agent.StopCompleted {
				t.Fatalf("result = %+v", res)
			}
			news := f.calls("session/new")
			if len(news) != 1 {
				t.Fatalf("session/new = %+v", news)
			}
			var servers []map[string]any
			if err := json.Unmarshal(news[0].McpServers, &servers); err != nil {
				t.Fatal(err)
			}
			if !http {
				if servers == nil || len(servers) != 0 {
					t.Errorf("mcpServers = %s, want []", news[0].McpServers)
				}
				return
			}
			want := map[string]any{"type": "http", "name": "subagent", "url": "http://127.0.0.1:9/mcp",
				"headers": []any{map[string]any{"name": "Authorization", "value": "Bearer tok-" + id}}}
			if len(servers) != 1 || !jsonEqual(servers[0], want) {
				t.Errorf("mcpServers = %s, want [%v]", news[0].McpServers, want)
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				mu.Lock()
				n := revoked
				mu.Unlock()
				if n == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the callback was revoked %d times after settlement", n)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func TestOneShotRun(t *testing.T) {
	f := newFixture(t, fakeConfig{})
	m := f.manager(nil, nil)
	_, res, err := managertest.RunOnce(context.Background(), m, "acp", f.request("once"))
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != agent.StopCompleted || res.Output != "echo: once (turn 1)" {
		t.Errorf("result = %+v", res)
	}
	f.checkGroupsGone()
}

func TestNoGoroutineOutlivesTheManager(t *testing.T) {
	f := newFixture(t, fakeConfig{load: true})
	base := runtime.NumGoroutine()
	store := memstore.New()
	m := manager.New(manager.Options{Store: store})
	if err := m.Register(f.provider()); err != nil {
		t.Fatal(err)
	}
	id, _ := f.start(m, "hello")
	f.send(m, id, "again")
	if _, err := m.StartContinuable(context.Background(), "acp", f.request("be slow"), false); err != nil {
		t.Fatal(err)
	}
	f.waitCall("blocking", 1)
	closeManager(t, m) // aborts the slow turn
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.checkGroupsGone()
}

// The update handler only queues: with nobody draining, many more updates
// than the SDK's queue holds are accepted at once.
func TestSessionUpdateNeverBlocks(t *testing.T) {
	c := newClient(PermissionDeny)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 10 * 1024 {
			_ = c.SessionUpdate(context.Background(), acpsdk.SessionNotification{SessionId: "s", Update: acpsdk.UpdateAgentMessageText("x")})
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("SessionUpdate blocked")
	}
	if n := len(c.take()); n != 10*1024 {
		t.Errorf("queued %d updates", n)
	}
}

func TestPermissionAnswers(t *testing.T) {
	allowOnce := acpsdk.PermissionOption{Kind: acpsdk.PermissionOptionKindAllowOnce, OptionId: "a1"}
	allowAlways := acpsdk.PermissionOption{Kind: acpsdk.PermissionOptionKindAllowAlways, OptionId: "a2"}
	rejectOnce := acpsdk.PermissionOption{Kind: acpsdk.PermissionOptionKindRejectOnce, OptionId: "r1"}
	rejectAlways := acpsdk.PermissionOption{Kind: acpsdk.PermissionOptionKindRejectAlways, OptionId: "r2"}
	tests := []struct {
		name      string
		policy    string
		cancelled bool
		options   []acpsdk.PermissionOption
		selected  string // "" for the cancelled outcome
		recorded  string
	}{
		{"deny picks reject_once", PermissionDeny, false, []acpsdk.PermissionOption{allowOnce, rejectAlways, rejectOnce}, "r1", "denied"},
		{"deny falls back to reject_always", PermissionDeny, false, []acpsdk.PermissionOption{allowOnce, rejectAlways}, "r2", "denied"},
		{"deny without a reject option cancels", PermissionDeny, false, []acpsdk.PermissionOption{allowOnce}, "", "denied"},
		{"allow picks allow_once", PermissionAllow, false, []acpsdk.PermissionOption{rejectOnce, allowAlways, allowOnce}, "a1", "allowed"},
		{"allow falls back to allow_always", PermissionAllow, false, []acpsdk.PermissionOption{rejectOnce, allowAlways}, "a2", "allowed"},
		{"allow without an allow option cancels", PermissionAllow, false, []acpsdk.PermissionOption{rejectOnce}, "", "cancelled"},
		{"a cancelled turn answers cancelled", PermissionAllow, true, []acpsdk.PermissionOption{allowOnce}, "", "cancelled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(tt.policy)
			if tt.cancelled {
				c.cancel()
			}
			resp, err := c.RequestPermission(context.Background(), acpsdk.RequestPermissionRequest{SessionId: "s",
				ToolCall: acpsdk.ToolCallUpdate{ToolCallId: "c", Title: acpsdk.Ptr("Run rm")}, Options: tt.options})
			if err != nil {
				t.Fatal(err)
			}
			if err := resp.Outcome.Validate(); err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.selected == "" && resp.Outcome.Cancelled == nil:
				t.Errorf("outcome = %+v, want cancelled", resp.Outcome)
			case tt.selected != "" && (resp.Outcome.Selected == nil || string(resp.Outcome.Selected.OptionId) != tt.selected):
				t.Errorf("outcome = %+v, want %s selected", resp.Outcome, tt.selected)
			}
			its := c.take()
			if len(its) != 1 || its[0].perm == nil || its[0].perm.outcome != tt.recorded || its[0].perm.title != "Run rm" {
				t.Errorf("recorded %+v, want %q", its, tt.recorded)
			}
		})
	}
}

// A session/load that replays a long history (far more updates than the
// SDK's queue holds, in one burst) succeeds, and nothing of it is journaled.
func TestLongReplayLoads(t *testing.T) {
	f := newFixture(t, fakeConfig{load: true})
	store := memstore.New()
	m := f.manager(store, nil)
	id, _ := f.start(m, "hello")
	session := lastSession(t, store, id)
	long := make([]fakeacp.Exchange, 4000)
	for i := range long {
		long[i] = fakeacp.Exchange{User: "old question", Agent: "old answer"}
	}
	fakeacp.SaveSession(f.dir, session, long)
	_, res := f.send(m, id, "again")
	if res.StopReason != agent.StopCompleted || res.Output != "echo: again (turn 4001)" {
		t.Fatalf("result = %+v", res)
	}
	if got := assistantMessages(t, store, id); len(got) != 2 {
		t.Errorf("%d assistant messages journaled, want 2", len(got))
	}
}

func TestFlowHoldsReadingBack(t *testing.T) {
	update := `{"jsonrpc":"2.0","method":"session/update","params":{}}` + "\n"
	response := `{"jsonrpc":"2.0","id":1,"method":"session/update","result":{}}` + "\n"
	input := strings.Repeat(update, flowLimit) + response + update + update
	fl := newFlow(strings.NewReader(input))
	lines := make(chan string, 10*flowLimit)
	go func() {
		sc := bufio.NewScanner(fl)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	read := func(n int) {
		t.Helper()
		for range n {
			select {
			case <-lines:
			case <-time.After(5 * time.Second):
				t.Fatal("reading stalled")
			}
		}
	}
	read(flowLimit + 1) // the limit's worth of updates and a response, which does not count
	select {
	case l := <-lines:
		t.Fatalf("read %q past the limit", l)
	case <-time.After(flowStall / 4):
	}
	fl.handledOne()
	read(1)
	// Nothing handled for flowStall: the outstanding updates count as lost.
	read(1)
	if _, ok := <-lines; ok {
		t.Error("more lines than written")
	}
}

// waitQuestion waits until child id lists input_required and returns its
// question's id.
func waitQuestion(t *testing.T, m *manager.Manager, id string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		rows, _ := m.ListDescendants(root)
		for _, r := range rows {
			if r.ID == id && r.Status == manager.StatusInputRequired && len(r.Questions) == 1 {
				return r.Questions[0].ID
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never listed input_required", id)
	return ""
}

// startAsking starts a child under permission "ask" whose turn asks
// permission to write a file.
func startAsking(t *testing.T) (*fixture, *memstore.Store, *manager.Manager, *manager.Started) {
	t.Helper()
	f := newFixture(t, fakeConfig{permission: PermissionAsk})
	store := memstore.New()
	m := f.manager(store, nil)
	st, err := m.StartContinuable(context.Background(), "acp", f.request("needs permission"), true)
	if err != nil {
		t.Fatal(err)
	}
	return f, store, m, st
}

// Under permission "ask" the request is held open and the person's answer
// picks the option: an option's own words pick that option ("Always
// allow" → allow-always), and the journal says who answered. An interrupt
// withdraws the question: the agent gets "cancelled".
func TestPermissionAskMapsTheAnswer(t *testing.T) {
	t.Run("an option's words", func(t *testing.T) {
		f, store, m, st := startAsking(t)
		q := waitQuestion(t, m, st.ChildID)
		if _, err := m.Answer(context.Background(), root, st.ChildID, q, "always allow"); err != nil {
			t.Fatal(err)
		}
		res := f.wait(func(ctx context.Context) (seam.Result, bool) { return st.Wait(ctx) })
		if res.StopReason != agent.StopCompleted || res.Output != "permission outcome: allow-always" {
			t.Fatalf("result = %+v", res)
		}
		if msgs := assistantMessages(t, store, st.ChildID); !slices.Contains(msgs, "[permission allowed by the person (Always allow): Write config]") {
			t.Errorf("journal %q lacks the person's allow", msgs)
		}
	})
	t.Run("an interrupt withdraws it", func(t *testing.T) {
		f, store, m, st := startAsking(t)
		waitQuestion(t, m, st.ChildID)
		if err := m.Interrupt(root, st.ChildID); err != nil {
			t.Fatal(err)
		}
		res := f.wait(func(ctx context.Context) (seam.Result, bool) { return st.Wait(ctx) })
		if res.StopReason != agent.StopAborted {
			t.Fatalf("result = %+v, want aborted", res)
		}
		// The agent hears "cancelled", or (the fake drops its own request
		// when session/cancel arrives) its request was cancelled first.
		if got := f.calls("permission-outcome"); len(got) != 1 || (got[0].Text != "cancelled" && !strings.Contains(got[0].Text, "Request cancelled")) {
			t.Errorf("the agent got %+v, want cancelled", got)
		}
		qs, err := store.Questions(context.Background(), st.ChildID)
		if err != nil || len(qs) != 1 || qs[0].Answer == nil || qs[0].Answer.Outcome != seam.OutcomeCancelled {
			t.Errorf("stored questions: %+v, %v", qs, err)
		}
	})
}
