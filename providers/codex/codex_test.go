package codex

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
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
	"github.com/mcp-subagent/mcp-subagent/internal/subreaper"
	"github.com/mcp-subagent/mcp-subagent/internal/subreaper/leaktest"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

func TestMain(m *testing.M) {
	subreaper.Main() // a supervisor of the processes the tests start, when re-executed as one
	if os.Getenv(fakeDirEnv) != "" {
		os.Exit(fakeCodex(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fixture is a manager with the codex provider over a fake Codex.
type fixture struct {
	t      *testing.T
	dir    string // the fake's record directory
	cwd    string // the parent's (and child's) working directory
	store  *memstore.Store
	m      *manager.Manager
	parent seam.ParentRef
	opts   Options

	// open counts each child's epochs begun and not yet ended, over every
	// manager of the fixture; settled is broadcast when one ends.
	mu      sync.Mutex
	open    map[string]int
	settled *sync.Cond
}

func newFixture(t *testing.T, mod func(*Options), mopts ...func(*manager.Options)) *fixture {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, dir: t.TempDir(), cwd: t.TempDir(), store: memstore.New()}
	// GORACE: a race-enabled fake would otherwise sleep a second at exit.
	// HOME: an empty one, so no config.toml of whoever runs the tests is
	// read (by the provider for its model settings, by the fake for its
	// MCP servers).
	home := t.TempDir()
	f.opts = Options{Command: self, Env: []string{fakeDirEnv + "=" + f.dir, "PATH=/usr/bin:/bin", "GORACE=atexit_sleep_ms=0", "HOME=" + home}}
	if mod != nil {
		mod(&f.opts)
	}
	f.parent = seam.ParentRef{Principal: "local", Cwd: f.cwd}
	f.m = f.newManager(mopts...)
	return f
}

// newManager builds a manager over the fixture's store, as a restarted
// server would.
func (f *fixture) newManager(mopts ...func(*manager.Options)) *manager.Manager {
	o := manager.Options{Store: f.store}
	for _, fn := range mopts {
		fn(&o)
	}
	m := manager.New(o)
	if err := m.Register(New(f.opts)); err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	if f.settled == nil {
		f.open, f.settled = map[string]int{}, sync.NewCond(&f.mu)
	}
	f.mu.Unlock()
	unsub := m.Subscribe(func(e manager.Event) {
		f.mu.Lock()
		defer f.mu.Unlock()
		switch e.Type {
		case manager.EventStart:
			f.open[e.RunID]++
		case manager.EventEnd:
			f.open[e.RunID]--
			f.settled.Broadcast()
		}
	})
	f.t.Cleanup(unsub)
	f.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	})
	return m
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// start starts a continuable child and waits for its first turn.
func (f *fixture) start(prompt string, mod func(*seam.StartRequest)) (*manager.Started, seam.Result) {
	f.t.Helper()
	req := seam.StartRequest{Label: "test", Prompt: prompt, Parent: f.parent}
	if mod != nil {
		mod(&req)
	}
	st, err := f.m.StartContinuable(ctxT(f.t), "codex", req, true)
	if err != nil {
		f.t.Fatalf("StartContinuable: %v", err)
	}
	res, ok := st.Wait(ctxT(f.t))
	if !ok {
		f.t.Fatal("the first turn did not end")
	}
	return st, res
}

func (f *fixture) followup(m *manager.Manager, id, text string) (*manager.Sent, seam.Result) {
	f.t.Helper()
	s, err := m.Followup(ctxT(f.t), f.parent, id, text, true)
	if err != nil {
		f.t.Fatalf("Followup: %v", err)
	}
	res, ok := s.Wait(ctxT(f.t))
	if !ok {
		f.t.Fatal("the follow-up turn did not end")
	}
	return s, res
}

// calls reads what the fake recorded, one per invocation.
func (f *fixture) calls() []call {
	f.t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dir, "calls.jsonl"))
	if err != nil {
		f.t.Fatalf("the fake recorded no call: %v", err)
	}
	var out []call
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var c call
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// events reads a child's stored journal once the child has settled: a
// turn's result is handed over before its journal is committed, which
// settling waits for.
func (f *fixture) events(id string) []agent.Event {
	f.t.Helper()
	f.mu.Lock()
	timedOut := false
	timer := time.AfterFunc(30*time.Second, func() {
		f.mu.Lock()
		timedOut = true
		f.settled.Broadcast()
		f.mu.Unlock()
	})
	for f.open[id] > 0 && !timedOut {
		f.settled.Wait()
	}
	f.mu.Unlock()
	timer.Stop()
	if timedOut {
		f.t.Fatalf("child %s did not settle", id)
	}
	ev, err := f.store.Events(context.Background(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	return ev
}

func hasArgs(argv []string, seq ...string) bool {
	for i := 0; i+len(seq) <= len(argv); i++ {
		if slices.Equal(argv[i:i+len(seq)], seq) {
			return true
		}
	}
	return false
}

func TestACompletedTurnIsRecordedWithItsThreadUsageAndNotes(t *testing.T) {
	f := newFixture(t, nil)
	st, res := f.start("hello there", nil)
	if res.StopReason != agent.StopCompleted {
		t.Fatalf("stop = %q (%s)", res.StopReason, res.Diagnostic)
	}
	if res.Output != "echo: hello there (turn 1)" {
		t.Errorf("output = %q", res.Output)
	}
	if res.Usage.InputTokens != 100 || res.Usage.OutputTokens != 10 {
		t.Errorf("usage = %+v", res.Usage)
	}
	calls := f.calls()
	if len(calls) != 1 {
		t.Fatalf("calls = %d", len(calls))
	}
	c := calls[0]
	if c.Stdin != "hello there" {
		t.Errorf("stdin = %q", c.Stdin)
	}
	if c.Cwd != f.cwd || c.Flags["-C"] != f.cwd {
		t.Errorf("cwd = %q, -C %q, want %q", c.Cwd, c.Flags["-C"], f.cwd)
	}
	for _, want := range [][]string{{"exec"}, {"--json"}, {"--skip-git-repo-check"}, {"-s", "workspace-write"},
		{"-c", `approval_policy="never"`}, {"-c", "features.multi_agent=false"}, {"-c", "features.multi_agent_v2=false"}} {
		if !hasArgs(c.Argv, want...) {
			t.Errorf("argv %q lacks %q", c.Argv, want)
		}
	}
	if c.Argv[len(c.Argv)-1] != "-" || c.Resume != "" || c.Flags["--ephemeral"] != "" {
		t.Errorf("argv = %q", c.Argv)
	}
	ev := f.events(st.ChildID)
	session := agent.LastSession(ev)
	if !strings.HasPrefix(session, "019a0000-fake-") {
		t.Errorf("session = %q", session)
	}
	var notes, answers []string
	for _, e := range ev {
		if e.Kind == agent.EventMessage && e.Message.Role == "assistant" {
			if strings.HasPrefix(e.Message.Content, "[") {
				notes = append(notes, e.Message.Content)
			} else {
				answers = append(answers, e.Message.Content)
			}
		}
	}
	if !slices.Equal(notes, []string{"[ran: ls (exit 0)]"}) || !slices.Equal(answers, []string{"echo: hello there (turn 1)"}) {
		t.Errorf("notes %q, answers %q", notes, answers)
	}
	if err := agent.Validate(ev); err != nil {
		t.Error(err)
	}
}

func TestTurnFailedIsAnErrorWithCodexMessage(t *testing.T) {
	f := newFixture(t, nil)
	_, res := f.start("please FAIL", nil)
	if res.StopReason != agent.StopError {
		t.Fatalf("stop = %q", res.StopReason)
	}
	if !strings.HasPrefix(res.Diagnostic, "Codex reported the turn failed: model overloaded (fake)") ||
		!strings.Contains(res.Diagnostic, "Reconnecting... 1/1") {
		t.Errorf("diagnostic = %q", res.Diagnostic)
	}
}

func TestAProcessThatDiesWithoutATerminalEventIsAnErrorWithItsStderr(t *testing.T) {
	f := newFixture(t, nil)
	st, res := f.start("CRASH now", nil)
	if res.StopReason != agent.StopError {
		t.Fatalf("stop = %q", res.StopReason)
	}
	if !strings.Contains(res.Diagnostic, "exit status 3") || !strings.Contains(res.Diagnostic, "without finishing the turn") ||
		!strings.Contains(res.Diagnostic, "stderr: thread 'main' panicked: fake codex lost its mind") {
		t.Errorf("diagnostic = %q", res.Diagnostic)
	}
	// The thread id was recorded before the crash: a follow-up resumes it.
	if agent.LastSession(f.events(st.ChildID)) == "" {
		t.Error("no session recorded")
	}
}

func TestAMidRunErrorEventIsNotTerminal(t *testing.T) {
	f := newFixture(t, nil)
	_, res := f.start("MIDERROR then go on", nil)
	if res.StopReason != agent.StopCompleted || res.Output != "recovered" {
		t.Fatalf("stop = %q, output %q (%s)", res.StopReason, res.Output, res.Diagnostic)
	}
	if !strings.Contains(res.Diagnostic, "Reconnecting... 2/5") {
		t.Errorf("diagnostic = %q", res.Diagnostic)
	}
}

const testSchema = `{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"],"additionalProperties":false}`

func TestAnOutputSchemaGoesToCodexAndItsAnswerIsStructured(t *testing.T) {
	f := newFixture(t, nil)
	_, res := f.start("SCHEMA please", func(r *seam.StartRequest) { r.OutputSchema = json.RawMessage(testSchema) })
	if res.StopReason != agent.StopCompleted {
		t.Fatalf("stop = %q (%s)", res.StopReason, res.Diagnostic)
	}
	if string(res.Structured) != `{"answer":"42"}` {
		t.Errorf("structured = %s", res.Structured)
	}
	c := f.calls()[0]
	if c.Schema != testSchema {
		t.Errorf("schema file held %q", c.Schema)
	}
	if _, err := os.Stat(c.Flags["--output-schema"]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the schema file was left behind: %v", err)
	}

	_, res = f.start("BADSCHEMA please", func(r *seam.StartRequest) { r.OutputSchema = json.RawMessage(testSchema) })
	if res.StopReason != agent.StopError || res.Structured != nil || res.Output != "not JSON at all" ||
		!strings.Contains(res.Diagnostic, "does not meet the output schema") {
		t.Errorf("bad answer: stop %q, structured %s, output %q, diagnostic %q", res.StopReason, res.Structured, res.Output, res.Diagnostic)
	}
}

func TestFollowupAndColdResumeContinueTheSameThread(t *testing.T) {
	f := newFixture(t, nil)
	st, res := f.start("one", nil)
	if res.StopReason != agent.StopCompleted {
		t.Fatalf("stop = %q (%s)", res.StopReason, res.Diagnostic)
	}
	thread := agent.LastSession(f.events(st.ChildID))

	_, res = f.followup(f.m, st.ChildID, "two")
	if res.StopReason != agent.StopCompleted || res.Output != "echo: two (turn 2)" {
		t.Fatalf("follow-up: %q %q (%s)", res.StopReason, res.Output, res.Diagnostic)
	}
	// Codex reports the thread's running total (200/20); the turn's share is 100/10.
	if res.Usage.InputTokens != 100 || res.Usage.OutputTokens != 10 {
		t.Errorf("follow-up usage = %+v", res.Usage)
	}

	// A restarted server: a new manager over the same store.
	if err := f.m.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	m2 := f.newManager()
	sent, res := f.followup(m2, st.ChildID, "three")
	if sent.Route != manager.RouteResumed {
		t.Errorf("route = %q", sent.Route)
	}
	if res.StopReason != agent.StopCompleted || res.Output != "echo: three (turn 3)" {
		t.Fatalf("cold resume: %q %q (%s)", res.StopReason, res.Output, res.Diagnostic)
	}
	if res.Usage.InputTokens != 100 || res.Usage.OutputTokens != 10 {
		t.Errorf("cold resume usage = %+v", res.Usage)
	}
	calls := f.calls()
	if len(calls) != 3 {
		t.Fatalf("calls = %d", len(calls))
	}
	for i, c := range calls[1:] {
		if c.Resume != thread || !hasArgs(c.Argv, "resume", thread, "-") || c.Cwd != f.cwd || c.Flags["-C"] != f.cwd {
			t.Errorf("call %d: argv %q in %q, want resume %s in %s", i+2, c.Argv, c.Cwd, thread, f.cwd)
		}
	}
	ev := f.events(st.ChildID)
	if err := agent.Validate(ev); err != nil {
		t.Error(err)
	}
	var sessions []string
	for _, e := range ev {
		if e.Kind == agent.EventSession {
			sessions = append(sessions, e.Session)
		}
	}
	if !slices.Equal(sessions, []string{thread}) {
		t.Errorf("session events = %q", sessions)
	}
}

// waitFile waits for the fake to write a pid into name.
func waitPID(t *testing.T, dir, name string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil && len(b) > 0 {
			pid, err := strconv.Atoi(string(b))
			if err == nil {
				return pid
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the fake never wrote %s", name)
	return 0
}

// groupEnded checks that no member of a process group runs: at once, every
// member left is killed (a zombie waiting for init to reap it, or, on a
// loaded machine, not yet scheduled to finish dying), and within a few
// seconds the group is gone (kill -0 says ESRCH). This machine's init
// reaps orphans lazily, so the second step polls.
func groupEnded(t *testing.T, pgid int) {
	t.Helper()
	if live := liveMembers(pgid); len(live) > 0 {
		t.Errorf("process group %d still has running members %v", pgid, live)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("process group %d is still there (kill -0: %v)", pgid, syscall.Kill(-pgid, 0))
}

// liveMembers lists the members of a process group that are neither
// zombies nor killed: a member is killed once SIGKILL is pending for it
// (the kernel keeps a group-wide SIGKILL in ShdPnd until the process is
// released) or it is exiting (PF_EXITING in its flags).
func liveMembers(pgid int) []int {
	ents, _ := os.ReadDir("/proc")
	var live []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 3 {
			continue
		}
		if g, _ := strconv.Atoi(fields[2]); g == pgid && fields[0] != "Z" && fields[0] != "X" && !killed(e.Name(), fields) {
			live = append(live, pid)
		}
	}
	return live
}

// killed reports whether a process (its /proc name and the fields of its
// stat after the command) is dying: exiting, or with SIGKILL pending.
func killed(name string, stat []string) bool {
	const pfExiting = 0x4
	if len(stat) > 6 {
		if flags, err := strconv.ParseUint(stat[6], 10, 64); err == nil && flags&pfExiting != 0 {
			return true
		}
	}
	b, err := os.ReadFile(filepath.Join("/proc", name, "status"))
	if err != nil {
		return true // gone meanwhile
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok || (k != "SigPnd" && k != "ShdPnd") {
			continue
		}
		if mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil && mask&(1<<(int(syscall.SIGKILL)-1)) != 0 {
			return true
		}
	}
	return false
}

// liveMembers sees a running member, and none the moment the group has
// been sent SIGKILL, before the member had a chance to run again (it is
// ours: unreaped, it stays a zombie).
func TestLiveMembersSeesRunningMembersAndNotKilledOnes(t *testing.T) {
	cmd := exec.Command("/bin/sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	defer cmd.Wait()
	if live := liveMembers(pid); !slices.Equal(live, []int{pid}) {
		t.Errorf("live members of a running sleep: %v", live)
	}
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if live := liveMembers(pid); len(live) != 0 {
		t.Errorf("live members right after SIGKILL: %v", live)
	}
}

func TestInterruptAbortsTheTurnWithinASecondAndEndsTheWholeGroup(t *testing.T) {
	f := newFixture(t, nil)
	req := seam.StartRequest{Label: "hang", Prompt: "HANG", Parent: f.parent}
	st, err := f.m.StartContinuable(ctxT(t), "codex", req, true)
	if err != nil {
		t.Fatal(err)
	}
	pgid := waitPID(t, f.dir, "pid")
	grandchild := waitPID(t, f.dir, "grandchild")
	t0 := time.Now()
	if err := f.m.Interrupt(f.parent, st.ChildID); err != nil {
		t.Fatal(err)
	}
	res, ok := st.Wait(ctxT(t))
	elapsed := time.Since(t0)
	if !ok || res.StopReason != agent.StopAborted {
		t.Fatalf("stop = %q (%s)", res.StopReason, res.Diagnostic)
	}
	if elapsed > time.Second {
		t.Errorf("the interrupt took %v", elapsed)
	}
	if grandchild == pgid {
		t.Fatal("the grandchild is the fake")
	}
	groupEnded(t, pgid)

	// The thread goes on after an interrupt.
	_, res = f.followup(f.m, st.ChildID, "after")
	if res.StopReason != agent.StopCompleted || res.Output != "echo: after (turn 2)" {
		t.Errorf("after the interrupt: %q %q (%s)", res.StopReason, res.Output, res.Diagnostic)
	}
	if calls := f.calls(); len(calls) != 2 || calls[1].Resume == "" || calls[1].Resume != agent.LastSession(f.events(st.ChildID)) {
		t.Errorf("the follow-up did not resume the interrupted thread: %+v", calls)
	}
}

func TestATimeoutEndsTheTurnAsAnErrorAndKillsTheGroup(t *testing.T) {
	// Long enough for a race-enabled fake, started through a race-enabled
	// supervisor on a loaded machine, to reach its hang and say so.
	f := newFixture(t, func(o *Options) { o.Timeout = 1500 * time.Millisecond })
	t0 := time.Now()
	_, res := f.start("HANG", nil)
	if res.StopReason != agent.StopError || !strings.Contains(res.Diagnostic, "did not finish the turn within 1.5s") {
		t.Fatalf("stop = %q (%s)", res.StopReason, res.Diagnostic)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("the timeout took %v", d)
	}
	pgid := waitPID(t, f.dir, "pid")
	waitPID(t, f.dir, "grandchild")
	groupEnded(t, pgid)
}

func TestServerShutdownEndsTheTurnAndTheGroupAndLeaksNoGoroutine(t *testing.T) {
	base := runtime.NumGoroutine()
	f := newFixture(t, nil)
	_, err := f.m.StartContinuable(ctxT(t), "codex", seam.StartRequest{Label: "hang", Prompt: "HANG", Parent: f.parent}, false)
	if err != nil {
		t.Fatal(err)
	}
	pgid := waitPID(t, f.dir, "pid")
	t0 := time.Now()
	if err := f.m.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("shutdown took %v", d)
	}
	groupEnded(t, pgid)
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines before, %d after shutdown:\n%s", base, n, buf[:runtime.Stack(buf, true)])
	}
}

func TestTheChildSeesOnlyItsConfiguredEnvironment(t *testing.T) {
	t.Setenv("MCP_SUBAGENT_SERVER_SECRET", "leak")
	f := newFixture(t, func(o *Options) { o.Env = append(o.Env, "CODEX_HOME=/nowhere", TokenEnv+"=stale") })
	f.start("env", nil)
	env := f.calls()[0].Env
	slices.Sort(env)
	home := f.opts.Env[slices.IndexFunc(f.opts.Env, func(kv string) bool { return strings.HasPrefix(kv, "HOME=") })]
	want := []string{"CODEX_HOME=/nowhere", fakeDirEnv + "=" + f.dir, "PATH=/usr/bin:/bin", "GORACE=atexit_sleep_ms=0", home}
	slices.Sort(want)
	if !slices.Equal(env, want) {
		t.Errorf("env = %q, want %q", env, want)
	}
}

func TestTheChildCallsThisServerBackWithItsBearerToken(t *testing.T) {
	const token = "tok-123"
	var gotAuth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		if gotAuth != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		w.Write([]byte("reported"))
	}))
	defer srv.Close()
	revoked := make(chan string, 4)
	f := newFixture(t, nil, func(o *manager.Options) {
		o.Callback = func(self seam.ParentRef) (seam.Callback, func()) {
			return seam.Callback{URL: srv.URL + "/mcp", Token: token}, func() { revoked <- self.AgentID }
		}
	})
	st, res := f.start("CALLBACK", nil)
	if res.StopReason != agent.StopCompleted || res.Output != "called back: 200 reported" {
		t.Fatalf("stop %q, output %q (%s); server saw %q", res.StopReason, res.Output, res.Diagnostic, gotAuth)
	}
	c := f.calls()[0]
	if c.Config["mcp_servers.subagent.url"] != strconv.Quote(srv.URL+"/mcp") ||
		c.Config["mcp_servers.subagent.bearer_token_env_var"] != `"`+TokenEnv+`"` ||
		c.Config["mcp_servers.subagent.default_tools_approval_mode"] != `"approve"` {
		t.Errorf("config = %q", c.Config)
	}
	if slices.ContainsFunc(c.Argv, func(a string) bool { return strings.Contains(a, token) }) {
		t.Error("the token is on the command line")
	}
	if !slices.Contains(c.Env, TokenEnv+"="+token) {
		t.Errorf("env = %q", c.Env)
	}
	select {
	case id := <-revoked:
		if id != st.ChildID {
			t.Errorf("revoked for %q", id)
		}
	case <-time.After(5 * time.Second):
		t.Error("the callback was not revoked at settlement")
	}
}

func TestAPersonaBecomesDeveloperInstructions(t *testing.T) {
	f := newFixture(t, nil)
	persona := "You are \"terse\".\nAnswer in one line\\no more."
	_, res := f.start("hi", func(r *seam.StartRequest) { r.Persona = persona })
	if res.StopReason != agent.StopCompleted {
		t.Fatalf("stop = %q (%s)", res.StopReason, res.Diagnostic)
	}
	got := f.calls()[0].Config["developer_instructions"]
	if got != `"You are \"terse\".\nAnswer in one line\\no more."` {
		t.Errorf("developer_instructions = %s", got)
	}
}

func TestASandboxDenialIsDiagnosed(t *testing.T) {
	f := newFixture(t, nil)
	_, res := f.start("DENIED", nil)
	if res.StopReason != agent.StopCompleted {
		t.Fatalf("stop = %q", res.StopReason)
	}
	if !strings.Contains(res.Diagnostic, "denied (sandbox or permissions): /bin/bash -lc 'touch /etc/x' (Read-only file system)") {
		t.Errorf("diagnostic = %q", res.Diagnostic)
	}
}

func TestCapabilitiesAreCheckedBeforeStart(t *testing.T) {
	f := newFixture(t, nil)
	req := seam.StartRequest{Label: "x", Prompt: "hi", Parent: f.parent, ToolFilter: &seam.ToolFilter{Deny: []string{"shell"}}}
	_, err := f.m.StartContinuable(ctxT(t), "codex", req, true)
	if !errors.Is(err, seam.ErrUnsupportedCapability) {
		t.Errorf("tool filter: err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "calls.jsonl")); err == nil {
		t.Error("codex ran for a refused request")
	}
	one := 1
	_, res := f.start("capped", func(r *seam.StartRequest) { r.MaxDepth = &one })
	if res.StopReason != agent.StopCompleted {
		t.Errorf("max_depth: %q (%s)", res.StopReason, res.Diagnostic)
	}
}

func TestAOneShotRunUsesAnEphemeralThread(t *testing.T) {
	f := newFixture(t, nil)
	var notes []string
	var events []manager.Event
	var mu sync.Mutex
	defer f.m.Subscribe(func(e manager.Event) { mu.Lock(); events = append(events, e); mu.Unlock() })()
	id, res, err := managertest.RunOnce(ctxT(t), f.m, "codex", seam.StartRequest{Label: "x", Prompt: "once", Parent: f.parent,
		Progress: func(n string) { notes = append(notes, n) }})
	if err != nil {
		t.Fatal(err)
	}
	// The run is local, though external: its agent is this server's.
	mu.Lock()
	if len(events) == 0 || events[0].Type != manager.EventStart || events[0].RunID != id || !events[0].Local {
		t.Errorf("events = %+v, want a local subagent/start for %s", events, id)
	}
	mu.Unlock()
	if res.StopReason != agent.StopCompleted || res.Output != "echo: once (turn 1)" || res.Usage.InputTokens != 100 {
		t.Fatalf("result = %+v", res)
	}
	if c := f.calls()[0]; c.Flags["--ephemeral"] != "true" {
		t.Errorf("argv = %q", c.Argv)
	}
	if !slices.Equal(notes, []string{"ran: ls (exit 0)", "answered"}) {
		t.Errorf("progress = %q", notes)
	}
}

func TestAMissingCommandIsRefusedAtStart(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Command = filepath.Join(t.TempDir(), "no-codex") })
	_, err := f.m.StartContinuable(ctxT(t), "codex", seam.StartRequest{Label: "x", Prompt: "hi", Parent: f.parent}, true)
	if err == nil || !strings.Contains(err.Error(), "was not found") {
		t.Errorf("err = %v", err)
	}
}

func TestTomlStringQuotesAsTOMLBasicStrings(t *testing.T) {
	for in, want := range map[string]string{
		`plain`:       `"plain"`,
		`a "q" \ b`:   `"a \"q\" \\ b"`,
		"l1\nl2\tx\r": `"l1\nl2\tx\r"`,
		"bell\a":      `"bell\u0007"`,
		"héllo ✓":     `"héllo ✓"`,
	} {
		if got := tomlString(in); got != want {
			t.Errorf("tomlString(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestReadLinesSkipsJunkAndOverlongLinesAndGoesOn(t *testing.T) {
	big := strings.Repeat("x", maxLine+10)
	in := "{\"type\":\"turn.started\"}\nnot json\n\n" + big + "\n{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}"
	var got []string
	readLines(strings.NewReader(in), func(l line) {
		if l.skip != "" {
			got = append(got, "skip")
			return
		}
		got = append(got, l.e.Type)
	})
	if !slices.Equal(got, []string{"turn.started", "skip", "skip", "turn.completed"}) {
		t.Errorf("lines = %q", got)
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"type":"thread.started","thread_id":"x"}`,
		`{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"ls","exit_code":0,"status":"completed"}}`,
		`{"type":"item.completed","item":{"type":"file_change","changes":[{"path":"a","kind":"add"}],"status":"failed"}}`,
		`{"type":"item.completed","item":{"type":"mcp_tool_call","server":"s","tool":"t","error":{"message":"m"}}}`,
		`{"type":"turn.failed","error":{"message":"boom"}}`,
		`{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":2}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, ok, err := decode(b)
		if err != nil || !ok || e.Item == nil {
			return
		}
		note, diag := e.Item.describe()
		if len(note) > 4096 || len(diag) > 4096 {
			t.Errorf("unbounded note %d / diag %d", len(note), len(diag))
		}
	})
}

// A Codex that starts background processes which leave its process group
// (setsid), ignore hangups (nohup) or orphan themselves (a double fork),
// and hold its stdout and stderr: none of them outlives the turn, however
// the turn ends. The turn's end comes only once they are all reaped, so
// no waiting is needed before looking.
func TestNothingCodexStartedOutlivesItsTurn(t *testing.T) {
	escapes := func(t *testing.T) (*fixture, string) {
		mark := leaktest.Mark(t)
		return newFixture(t, func(o *Options) { o.Env = append(o.Env, mark) }), mark
	}
	noneLive := func(t *testing.T, mark, when string) {
		t.Helper()
		if live := leaktest.Live(mark); len(live) > 0 {
			t.Errorf("%d processes Codex started outlived %s: %v", len(live), when, live)
		}
	}
	t.Run("turn end", func(t *testing.T) {
		f, mark := escapes(t)
		_, res := f.start("ESCAPE", nil)
		if res.StopReason != agent.StopCompleted || res.Output != "escaped" {
			t.Fatalf("stop = %q, output %q (%s)", res.StopReason, res.Output, res.Diagnostic)
		}
		noneLive(t, mark, "the turn")
	})
	t.Run("interrupt", func(t *testing.T) {
		f, mark := escapes(t)
		st, err := f.m.StartContinuable(ctxT(t), "codex", seam.StartRequest{Label: "escape", Prompt: "ESCAPE STAY", Parent: f.parent}, true)
		if err != nil {
			t.Fatal(err)
		}
		waitPID(t, f.dir, "pid") // written once the 150 are started
		if err := f.m.Interrupt(f.parent, st.ChildID); err != nil {
			t.Fatal(err)
		}
		if res, ok := st.Wait(ctxT(t)); !ok || res.StopReason != agent.StopAborted {
			t.Fatalf("stop = %q (%s)", res.StopReason, res.Diagnostic)
		}
		noneLive(t, mark, "the interrupt")
	})
	t.Run("shutdown", func(t *testing.T) {
		f, mark := escapes(t)
		if _, err := f.m.StartContinuable(ctxT(t), "codex", seam.StartRequest{Label: "escape", Prompt: "ESCAPE STAY", Parent: f.parent}, false); err != nil {
			t.Fatal(err)
		}
		waitPID(t, f.dir, "pid")
		if err := f.m.Close(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		noneLive(t, mark, "shutdown")
	})
}
