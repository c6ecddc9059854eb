//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/daemon"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
)

// daemonPID is the pid of the daemon holding dataDir's lock (it writes its
// pid there), or 0.
func daemonPID(dataDir string) int {
	b, err := os.ReadFile(daemon.LockPath(dataDir))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// alive reports whether pid is a live process (a zombie is not).
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// daemonsOf lists the live daemon processes serving dataDir.
func daemonsOf(dataDir string) []int {
	return processesWhere(func(dir string) bool {
		cmd, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil {
			return false
		}
		args := strings.Split(string(cmd), "\x00")
		pid, _ := strconv.Atoi(filepath.Base(dir))
		return len(args) > 2 && args[1] == "daemon" && strings.Contains(string(cmd), "\x00"+dataDir+"\x00") && alive(pid)
	})
}

// rawSession is `serve` driven by hand: initialize, then one tools/call per
// line; it returns each response line.
type rawSession struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *syncBuffer
}

func startRaw(t *testing.T, bin string, fake *fakeopenai.Server, dataDir, ws string, extra ...string) (*rawSession, error) {
	cmd := exec.Command(bin, append([]string{"serve", "--data-dir", dataDir, "--log-level", "debug", "--log-format", "json"}, extra...)...)
	cmd.Env, cmd.Dir = serverEnv(fake, nil), ws
	r := &rawSession{cmd: cmd, stderr: &syncBuffer{}}
	cmd.Stderr = r.stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	r.in, r.out = in, bufio.NewReader(out)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	waited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(waited) }()
	t.Cleanup(func() {
		r.in.Close()
		select {
		case <-waited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-waited
			t.Errorf("serve did not exit when its stdin closed; stderr:\n%s", r.stderr)
		}
	})
	if _, err := r.rpc(1, "initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "raw", "version": "1"}}); err != nil {
		return nil, err
	}
	fmt.Fprintln(r.in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return r, nil
}

// rpc sends one request and reads lines until its response.
func (r *rawSession) rpc(id int, method string, params any) (json.RawMessage, error) {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if _, err := r.in.Write(append(b, '\n')); err != nil {
		return nil, err
	}
	for {
		line, err := r.out.ReadBytes('\n')
		if err != nil {
			return nil, fmt.Errorf("reading the response to %s: %w; stderr:\n%s", method, err, r.stderr)
		}
		var resp struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  any             `json:"error"`
		}
		if json.Unmarshal(line, &resp) != nil || resp.ID != id {
			continue // a notification
		}
		if resp.Error != nil {
			return nil, fmt.Errorf("%s: %v", method, resp.Error)
		}
		return resp.Result, nil
	}
}

// relayedDaemon is the daemon pid a session logged it relays to.
func (r *rawSession) relayedDaemon() int {
	for _, line := range strings.Split(r.stderr.String(), "\n") {
		var l struct {
			Msg string `json:"msg"`
			PID int    `json:"daemon_pid"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "relaying to the daemon" {
			return l.PID
		}
	}
	return 0
}

func TestConcurrentFirstStartsMakeOneDaemon(t *testing.T) {
	dataDir, ws := t.TempDir(), t.TempDir()
	t.Cleanup(func() { stopDaemon(t, dataDir) })
	const n = 8
	var wg sync.WaitGroup
	sessions := make([]*rawSession, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			s, err := startRaw(t, binary, nil, dataDir, ws)
			if err == nil {
				_, err = s.rpc(2, "tools/call", map[string]any{"name": "list_agents", "arguments": map[string]any{}})
			}
			sessions[i], errs[i] = s, err
		})
	}
	wg.Wait()
	pids := map[int]bool{}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		pids[sessions[i].relayedDaemon()] = true
	}
	if len(pids) != 1 || pids[0] {
		t.Errorf("the sessions relayed to daemons %v; want one", pids)
	}
	if !waitFor(10*time.Second, func() bool { return len(daemonsOf(dataDir)) == 1 }) {
		t.Errorf("daemon processes for the directory: %v; want exactly one", daemonsOf(dataDir))
	}
	for path, want := range map[string]os.FileMode{dataDir: 0o700, daemon.SocketPath(dataDir): 0o600} {
		if fi, err := os.Stat(path); err != nil {
			t.Error(err)
		} else if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %o; want %o", path, fi.Mode().Perm(), want)
		}
	}
}

func TestAKilledDaemonIsReplacedByTheNextSessionAndRecovers(t *testing.T) {
	release := newGate()
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		if req.LastUserText() == "long task" {
			release.wait(30 * time.Second)
		}
		return fakeopenai.Reply{Text: "answer to " + req.LastUserText()}
	})
	defer fake.Close()
	defer release.open() // before the fake closes: it waits for its handlers
	s := start(t, fake, serverOpts{})
	ctx := testCtx(t)
	h, _ := startBackground(t, s, ctx, "survive a kill", "long task")
	if !waitFor(10*time.Second, func() bool { return len(fake.Requests()) > 0 }) {
		t.Fatal("the child never called the model")
	}
	pid := daemonPID(s.dataDir)
	if !alive(pid) {
		t.Fatalf("no daemon pid in the lock file (%d)", pid)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Gone, not just its leader a zombie: a killed multi-threaded process
	// keeps its sockets until its last thread exits, and its parent (the
	// relay that started it) reaps it after that.
	if !waitFor(10*time.Second, func() bool { return syscall.Kill(pid, 0) != nil }) {
		t.Fatal("the daemon survived SIGKILL")
	}
	release.open() // the dead daemon's model call may end now

	// The session that was connected goes on: its relay starts a new
	// daemon, which recovers the child.
	res, rows := callList(t, s, ctx, nil)
	if p := daemonPID(s.dataDir); p == pid || !alive(p) {
		t.Fatalf("no new daemon after the kill (pid %d, killed %d)", p, pid)
	}
	if r, _ := rowOf(rows, h.AgentID); r.Status != "ready" {
		t.Errorf("after the kill the child is %+v; want ready", r)
	}
	if ns := notices(res, "subagent-settled"); len(ns) != 1 || !strings.Contains(ns[0], "was stopped before it finished") {
		t.Errorf("notices after the restart = %q; want the stopped notice", ns)
	}
	// So does a new session, on the same daemon.
	s2 := start(t, fake, serverOpts{dataDir: s.dataDir, workspace: s.workspace})
	res, sent := callSend(t, s2, ctx, h.AgentID, "go on", 10)
	if res.IsError || sent.Route != "resumed" || sent.Outcome == nil || sent.Outcome.Output != "answer to go on" {
		t.Errorf("resume after the kill: %s %+v", text(res), sent)
	}
}

// A call in flight when the daemon dies is answered with an error, never
// left hanging.
func TestACallInFlightWhenTheDaemonDiesIsAnswered(t *testing.T) {
	arrived := make(chan struct{}, 1)
	release := newGate()
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		arrived <- struct{}{}
		release.wait(30 * time.Second)
		return fakeopenai.Reply{Text: "late"}
	})
	defer fake.Close()
	defer release.open()
	s := start(t, fake, serverOpts{})
	ctx := testCtx(t)
	errc := make(chan error, 1)
	go func() {
		req := mcp.CallToolRequest{}
		req.Params.Name = "subagent"
		req.Params.Arguments = map[string]any{"description": "in flight", "prompt": "wait"}
		_, err := s.client.CallTool(ctx, req)
		errc <- err
	}()
	<-arrived
	if err := syscall.Kill(daemonPID(s.dataDir), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "daemon restarted during this call") {
			t.Errorf("the call in flight ended with %v; want the restart error", err)
		}
	case <-ctx.Done():
		t.Fatal("the call in flight was left hanging")
	}
}

func TestChildrenOutliveTheirSessionAndTheDaemonExitsWhenIdle(t *testing.T) {
	release := newGate()
	defer release.open()
	started := make(chan struct{}, 1)
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		if req.LastUserText() == "outlive the session" {
			started <- struct{}{}
			release.wait(30 * time.Second)
			return fakeopenai.Reply{Text: "finished after the session left"}
		}
		return fakeopenai.Reply{Text: "ok"}
	})
	defer fake.Close()
	const idle = 300 * time.Millisecond
	s := start(t, fake, serverOpts{args: []string{"--idle-timeout", idle.String()}})
	ctx := testCtx(t)
	h, _ := startBackground(t, s, ctx, "outlive it", "outlive the session")
	<-started
	pid := daemonPID(s.dataDir)
	s.client.Close() // the session ends; its child must not

	// The daemon says when an idle period has passed with no session and a
	// live child holding it up; then it must still be there.
	if !waitFor(15*time.Second, func() bool {
		return strings.Contains(s.stderr.String(), "live children keep the daemon up")
	}) {
		t.Fatalf("the daemon never passed an idle period held up by its child; log:\n%s", s.stderr)
	}
	if !alive(pid) {
		t.Fatalf("the daemon exited with a child still running; log:\n%s", s.stderr)
	}
	// A later session, connected while the child still holds the daemon
	// up: released first, the child could finish and the daemon go idle
	// before a slow start of this session reached it.
	s2 := start(t, fake, serverOpts{dataDir: s.dataDir, workspace: s.workspace, args: []string{"--idle-timeout", idle.String()}})
	release.open()

	// It hears how the child ended: completed, not stopped.
	res, _ := callList(t, s2, ctx, map[string]any{"wait_seconds": 10})
	ns := notices(res, "subagent-settled")
	if len(ns) != 1 || !strings.Contains(ns[0], h.AgentID+" finished and will do no further work") ||
		!strings.Contains(ns[0], "finished after the session left") {
		t.Fatalf("the later session's notices = %q; want the child's completed settlement", ns)
	}
	if p := daemonPID(s.dataDir); p != pid {
		t.Errorf("the later session reached daemon %d, want the same daemon %d", p, pid)
	}
	s2.client.Close()
	if !waitFor(15*time.Second, func() bool { return !alive(pid) }) {
		t.Fatalf("the daemon did not exit when idle; log:\n%s", s.stderr)
	}
	if _, err := os.Stat(daemon.SocketPath(s.dataDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the idle daemon left its socket: %v", err)
	}
}

// buildVersion builds the server with a release version stamped in.
func buildVersion(t *testing.T, v string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "mcp-subagent-"+v)
	cmd := exec.Command("go", "build", "-ldflags", "-X main.version="+v, "-o", out, mainPkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", v, err, b)
	}
	// Registered before the test's sessions, so it runs after their
	// cleanups: a relay of this binary still connected when a daemon is
	// stopped starts one of its own, and none may outlive the test.
	t.Cleanup(func() {
		for _, pid := range processesOf(out) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return out
}

func TestANewerBinaryTakesOverWithoutLosingAChild(t *testing.T) {
	oldBin, newBin := buildVersion(t, "1.0.0"), buildVersion(t, "1.1.0")
	release := newGate()
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		if req.LastUserText() == "long task" {
			release.wait(30 * time.Second)
		}
		return fakeopenai.Reply{Text: "answer to " + req.LastUserText()}
	})
	defer fake.Close()
	defer release.open() // before the fake closes: it waits for its handlers
	dataDir, ws := t.TempDir(), t.TempDir()
	t.Cleanup(func() { stopDaemon(t, dataDir) })
	old, err := startRaw(t, oldBin, fake, dataDir, ws)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := old.rpc(2, "tools/call", map[string]any{"name": "subagent", "arguments": map[string]any{
		"description": "spans an upgrade", "prompt": "long task", "run_in_background": true}})
	if err != nil {
		t.Fatal(err)
	}
	id := agentIDRe.FindString(string(raw))
	if id == "" {
		t.Fatalf("no agent id in %s", raw)
	}
	if !waitFor(10*time.Second, func() bool { return len(fake.Requests()) > 0 }) {
		t.Fatal("the child never called the model")
	}
	oldPID := daemonPID(dataDir)

	// A session of the newer binary takes the directory over.
	s := start(t, fake, serverOpts{dataDir: dataDir, workspace: ws, bin: newBin})
	newPID := daemonPID(dataDir)
	if newPID == oldPID || alive(oldPID) {
		t.Fatalf("after the takeover the daemon is %d (old %d, alive %v)", newPID, oldPID, alive(oldPID))
	}
	if st, err := daemon.Status(testCtx(t), dataDir); err != nil || st.Version != "1.1.0" {
		t.Errorf("daemon status after the takeover = %+v, %v; want version 1.1.0", st, err)
	}
	ctx := testCtx(t)
	res, rows := callList(t, s, ctx, nil)
	if r, ok := rowOf(rows, id); !ok || r.Status != "ready" {
		t.Errorf("the child after the takeover = %+v (found %v); want ready", r, ok)
	}
	if ns := notices(res, "subagent-settled"); len(ns) != 1 || !strings.Contains(ns[0], id) {
		t.Errorf("notices after the takeover = %q; want the child's one", ns)
	}
	res, sent := callSend(t, s, ctx, id, "carry on", 10)
	if res.IsError || sent.Route != "resumed" || sent.Outcome == nil || sent.Outcome.Output != "answer to carry on" {
		t.Errorf("resume on the new daemon: %s %+v", text(res), sent)
	}
	// The old binary's session followed the daemon it relayed to over to
	// the new one (after the checks above: called first, it would take the
	// child's notice).
	if _, err := old.rpc(3, "tools/call", map[string]any{"name": "list_agents", "arguments": map[string]any{}}); err != nil {
		t.Errorf("the old session after the takeover: %v", err)
	}
}

func TestTheSocketRefusesAnotherUID(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to connect as another uid")
	}
	s := start(t, nil, serverOpts{})
	// Open the way to the socket for anyone, so that only the daemon's own
	// check stands between another uid and it.
	for d := s.dataDir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		_ = os.Chmod(d, 0o755)
	}
	_ = os.Chmod(daemon.SocketPath(s.dataDir), 0o777)
	b, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(s.dataDir, "mcp-subagent-copy")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "daemon", "status", "--data-dir", s.dataDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Env = []string{"HOME=/"}
	out, err := cmd.CombinedOutput()
	t.Logf("status as uid 65534: %v", err)
	// The client refuses a daemon of another uid before the daemon's own
	// refusal (the daemon package tests that one with a raw peer).
	if !strings.Contains(string(out), "is served by uid 0, not by you (uid 65534)") {
		t.Errorf("another uid's status = %q; want the refusal", out)
	}
	if st, err := daemon.Status(context.Background(), s.dataDir); err != nil || st.PID == 0 {
		t.Errorf("the daemon's own uid is refused too: %+v, %v", st, err)
	}
}

// A relayed session's working directory (where its client started serve)
// is its project: its children's default cwd and an allowed root; the
// daemon's own working directory is nobody's. list_agents shows the
// session's project unless all_projects.
func TestASessionsWorkingDirectoryIsItsProject(t *testing.T) {
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		return fakeopenai.Reply{Text: "done in " + req.LastUserText()}
	})
	defer fake.Close()
	a := start(t, fake, serverOpts{})
	b := start(t, fake, serverOpts{dataDir: a.dataDir}) // another project, same daemon
	ctx := testCtx(t)
	sub := filepath.Join(a.workspace, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	res := a.call(t, ctx, "subagent", map[string]any{"description": "in a subdir", "prompt": "p1", "cwd": "sub"})
	if res.IsError {
		t.Fatalf("a cwd inside the session's directory was refused: %s", text(res))
	}
	res = a.call(t, ctx, "subagent", map[string]any{"description": "elsewhere", "prompt": "p2", "cwd": b.workspace})
	if !res.IsError || !strings.Contains(text(res), "outside the allowed roots") {
		t.Errorf("a cwd in another session's project = %s; want refused", text(res))
	}
	if res := b.call(t, ctx, "subagent", map[string]any{"description": "b's own", "prompt": "p3"}); res.IsError {
		t.Fatal(text(res))
	}
	_, rows := callList(t, a, ctx, nil)
	if len(rows) != 1 || rows[0].Label != "in a subdir" {
		t.Errorf("session a lists %+v; want only its project's child", rows)
	}
	_, rows = callList(t, a, ctx, map[string]any{"all_projects": true})
	if len(rows) != 2 {
		t.Errorf("all_projects lists %+v; want both projects' children", rows)
	}
}

// serve --http is the daemon: a stdio session of the same data directory
// relays to it and shares its tree.
func TestStdioAndHTTPClientsShareOneTree(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "done over http"}))
	defer fake.Close()
	h := start(t, fake, serverOpts{http: true})
	ctx := testCtx(t)
	hd, _ := startBackground(t, h, ctx, "started over http", "go")
	s := start(t, fake, serverOpts{dataDir: h.dataDir})
	if p := daemonPID(h.dataDir); p != h.proc.cmd.Process.Pid {
		t.Errorf("the data directory's daemon is pid %d, want the serve --http process %d", p, h.proc.cmd.Process.Pid)
	}
	_, rows := callList(t, s, ctx, map[string]any{"all_projects": true})
	if r, ok := rowOf(rows, hd.AgentID); !ok || r.Label != "started over http" {
		t.Errorf("the stdio session lists %+v; want the child the HTTP client started", rows)
	}
	sd, _ := startBackground(t, s, ctx, "started over stdio", "go")
	_, rows = callList(t, h, ctx, nil)
	if _, ok := rowOf(rows, sd.AgentID); !ok {
		t.Errorf("the HTTP client lists %+v; want the child the stdio session started", rows)
	}
}

// `serve` on a terminal ends within a second of Ctrl-C or SIGTERM, its
// stdin still open; the daemon goes on.
func TestServeEndsWithinASecondOfASignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			dataDir, ws := t.TempDir(), t.TempDir()
			t.Cleanup(func() { stopDaemon(t, dataDir) })
			cmd := exec.Command(binary, "serve", "--data-dir", dataDir, "--log-level", "debug", "--log-format", "json")
			cmd.Env, cmd.Dir = serverEnv(nil, nil), ws
			stdin, keep, err := os.Pipe() // held open: no EOF ends it
			if err != nil {
				t.Fatal(err)
			}
			defer keep.Close()
			cmd.Stdin = stdin
			stderr := &syncBuffer{}
			cmd.Stderr = stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			stdin.Close()
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			fmt.Fprintln(keep, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
			if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.Contains(line, `"id":1`) {
				t.Fatalf("no answer to initialize: %q %v; stderr:\n%s", line, err, stderr)
			}
			pid := daemonPID(dataDir)
			// A race-built binary alone takes a second or more to exit on
			// a loaded machine; the plain binary, under 100 ms.
			bound := time.Second
			if raceBuild {
				bound = 10 * time.Second
			}
			sent := time.Now()
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				t.Logf("serve exited %v after %v: %v", sig, time.Since(sent).Round(time.Millisecond), err)
			case <-time.After(bound):
				_ = cmd.Process.Kill()
				<-exited
				t.Fatalf("serve still ran %v after %v; stderr:\n%s", bound, sig, stderr)
			}
			if !alive(pid) {
				t.Errorf("the daemon %d ended with the relay", pid)
			}
		})
	}
}
