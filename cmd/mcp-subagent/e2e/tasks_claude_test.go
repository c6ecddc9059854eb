//go:build realcli

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeanthropic"
)

// streamClaude is `claude -p --input-format stream-json` run as a
// long-lived process: user messages and control requests on stdin, its
// events on a channel.
type streamClaude struct {
	*cliRun
	stdin  io.WriteCloser
	events chan map[string]any
}

// withTasksFlag caches Claude Code's tengu_glowing_lark flag in the
// user's .claude.json (beside what `claude mcp add -s user` wrote): with
// CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF=1 it is read offline, and
// it lets `claude -p` use MCP tasks (issue 14's headless recipe).
func (h *claudeHome) withTasksFlag(t *testing.T) {
	t.Helper()
	for _, p := range []string{filepath.Join(h.home, ".claude", ".claude.json"), filepath.Join(h.home, ".claude.json")} {
		cfg := map[string]any{}
		if b, err := os.ReadFile(p); err == nil {
			if err := json.Unmarshal(b, &cfg); err != nil {
				t.Fatalf("%s: %v", p, err)
			}
		}
		cfg["cachedGrowthBookFeatures"] = map[string]any{"tengu_glowing_lark": true}
		b, _ := json.Marshal(cfg)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// runStream starts claude in stream-json mode in workspace, with extra
// environment after the headless recipe's.
func (h *claudeHome) runStream(t *testing.T, workspace string, extraEnv ...string) *streamClaude {
	t.Helper()
	cmd := exec.Command(h.bin, "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose", "--model", "fake")
	cmd.Env = append(append(h.env(), "CLAUDE_AUTO_BACKGROUND_TASKS=1", "CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF=1"), extraEnv...)
	cmd.Dir = workspace
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r := &cliRun{name: "claude", cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{}), dataDir: h.dataDir,
		logs: func() string { return claudeMCPLog(h.home, workspace) }}
	stdin, stdout := startPiped(t, cmd, r.stderr)
	s := &streamClaude{cliRun: r, stdin: stdin, events: make(chan map[string]any, 1000)}
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer close(s.events)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			_, _ = r.stdout.Write(append(sc.Bytes(), '\n'))
			var ev map[string]any
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				s.events <- ev
			}
		}
	}()
	go func() { <-read; r.err = cmd.Wait(); close(r.done) }()
	endGroupAtCleanup(t, cmd, r.done)
	return s
}

func (s *streamClaude) send(t *testing.T, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	if _, err := s.stdin.Write(append(b, '\n')); err != nil {
		t.Fatalf("writing to claude: %v\n%s", err, s.diag())
	}
}

func (s *streamClaude) say(t *testing.T, text string) {
	s.send(t, map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": text}})
}

// await returns the next event match accepts, failing the test when the
// stream ends or ctx does first.
func (s *streamClaude) await(t *testing.T, ctx context.Context, what string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatalf("claude's event stream ended before %s\n%s", what, s.diag())
			}
			if match(ev) {
				return ev
			}
		case <-ctx.Done():
			t.Fatalf("no %s: %v\n%s", what, ctx.Err(), s.diag())
		}
	}
}

func isResult(ev map[string]any) bool { return ev["type"] == "result" }

var delegateRE = regexp.MustCompile(`TASKS-E2E delegate (\S+)`)

// tasksParent scripts the parent's model: "TASKS-E2E delegate NAME"
// makes it call our subagent tool for the child NAME (through
// ToolSearch); the tool's answer makes it end its turn with
// "PARENT-GOES-ON NAME"; a task notification, with "NOTIFIED".
func tasksParent(child *childModel) fakeanthropic.Handler {
	return func(r fakeanthropic.Request) fakeanthropic.Reply {
		if !r.IsAgentLoop() {
			return fakeanthropic.Generic(r)
		}
		// The model answers the last user message (Claude Code may send a
		// system-role message after it).
		lastUser := -1
		for i, m := range r.Messages {
			if m.Role == "user" {
				lastUser = i
			}
		}
		if lastUser < 0 {
			return fakeanthropic.Generic(r)
		}
		var lastText strings.Builder
		for _, b := range r.Messages[lastUser].Content {
			if b.Type == "text" {
				lastText.WriteString(b.Text)
			}
		}
		if strings.Contains(lastText.String(), "<task-notification>") {
			return fakeanthropic.Reply{Text: "NOTIFIED"}
		}
		var name string
		for _, u := range r.UserTexts() {
			if m := delegateRE.FindStringSubmatch(u); m != nil {
				name = m[1]
			}
		}
		var answering []fakeanthropic.ToolResult
		for _, tr := range r.ToolResults() {
			if tr.Message == lastUser {
				answering = append(answering, tr)
			}
		}
		for _, tr := range answering {
			if tr.Name == "mcp__subagent__subagent" {
				return fakeanthropic.Reply{Text: "PARENT-GOES-ON " + name}
			}
		}
		if name == "" || (len(answering) == 0 && !strings.Contains(lastText.String(), "TASKS-E2E delegate")) {
			return fakeanthropic.Generic(r)
		}
		use := fakeanthropic.Use(r, "mcp__subagent__subagent", subagentArgs(child, name))
		for _, tr := range answering { // the ToolSearch that loaded it just now
			if tr.Name == "ToolSearch" && strings.Contains(string(tr.Input), "mcp__subagent__subagent") {
				use = fakeanthropic.ToolUse{Name: "mcp__subagent__subagent", Input: subagentArgs(child, name)}
			}
		}
		return fakeanthropic.Reply{ToolUses: []fakeanthropic.ToolUse{use}}
	}
}

// modelSaw is every text the parent's model was sent, in order.
func modelSaw(api *fakeanthropic.Server) string {
	var b strings.Builder
	for _, r := range api.Requests() {
		if r.IsAgentLoop() {
			b.WriteString(r.Text())
		}
	}
	return b.String()
}

var serverTaskRE = regexp.MustCompile(`started server-side task task-[0-9a-f]{32}\b`)

var taskStopRE = regexp.MustCompile(`TaskStop with task_id \\?"([a-z0-9]+)\\?"`)

// startTasksClaude runs the real Claude Code CLI in stream-json mode on
// issue 14's headless recipe (with extraEnv), registered with our server
// on a fresh data directory, its model scripted by tasksParent.
func startTasksClaude(t *testing.T, extraEnv ...string) (context.Context, *childModel, *fakeanthropic.Server, realSetup, *streamClaude) {
	t.Helper()
	bin := findCLI(t, "claude")
	ctx := testContext(t, realCLITimeout)
	child := newChildModel(t)
	api := fakeanthropic.New(tasksParent(child))
	t.Cleanup(api.Close)
	dataDir := realDir(t)
	stopDaemonAtCleanup(t, dataDir)
	workspace := realDir(t)
	h := newClaudeHome(t, bin, api)
	h.register(t, dataDir, child)
	h.withTasksFlag(t)
	return ctx, child, api, realSetup{dataDir: dataDir, workspace: workspace}, h.runStream(t, workspace, extraEnv...)
}

// releaseForNotification releases the held child name, waits for the turn
// its result starts, and returns the model request that carried it in a
// <task-notification> ("" if none did).
func releaseForNotification(t *testing.T, ctx context.Context, cl *streamClaude, api *fakeanthropic.Server, child *childModel, name string) string {
	t.Helper()
	child.Release(name)
	cl.await(t, ctx, "the notification's turn", isResult)
	var note string
	for _, r := range api.Requests() {
		if txt := r.Text(); strings.Contains(txt, "<task-notification>") && strings.Contains(txt, child.Closing(name)) {
			note = txt
		}
	}
	return note
}

// realSetup is where a real-CLI test's server and client run.
type realSetup struct{ dataDir, workspace string }

// TestTasksRealClaudeCode: the real Claude Code CLI as the client (issue
// 14's headless recipe), judged by what its model receives. A delegation
// is answered with a task: the model hears it "was moved to the
// background" and its turn ends while the child is still held; once the
// child finishes, a new turn brings the child's result in a
// <task-notification>. Then a stream-json stop_task for a second
// delegation sends tasks/cancel: the child's turn is interrupted, and
// another session of the same user lists it not running.
func TestTasksRealClaudeCode(t *testing.T) {
	ctx, child, api, dirs, cl := startTasksClaude(t)

	// 1. In the background, then the notification.
	child.Hold("bg")
	cl.say(t, "TASKS-E2E delegate bg")
	first := cl.await(t, ctx, "the end of the delegating turn", isResult)
	saw := modelSaw(api)
	// "started server-side task <our task id>": the server's task, not
	// Claude Code's own backgrounding of a call that runs long.
	if !serverTaskRE.MatchString(saw) || !strings.Contains(saw, "moved to the background") || !strings.Contains(fmt.Sprint(first["result"]), "PARENT-GOES-ON bg") {
		t.Fatalf("the delegation was not moved to the background (the model saw no such tool result, or its turn did not go on): result %v\nthe model saw:\n%s\n%s", first["result"], tail(saw, 3000), cl.diag())
	}
	if strings.Contains(saw, child.Closing("bg")) {
		t.Fatalf("the held child's closing message reached the model before it was released:\n%s", tail(saw, 3000))
	}
	note := releaseForNotification(t, ctx, cl, api, child, "bg")
	if note == "" || !strings.Contains(note, "<status>completed</status>") || !regexp.MustCompile(`MCP task task-[0-9a-f]{32} \(subagent/subagent\) completed`).MatchString(note) {
		t.Fatalf("the child's result did not arrive in a completed <task-notification>:\n%s\n%s", tail(modelSaw(api), 4000), cl.diag())
	}

	// 2. stop_task: tasks/cancel, and the child stops.
	child.Hold("stopme")
	cl.say(t, "TASKS-E2E delegate stopme")
	cl.await(t, ctx, "the end of the second delegating turn", isResult)
	<-child.Arrived("stopme")
	m := taskStopRE.FindAllStringSubmatch(cl.stdout.String(), -1)
	if len(m) < 2 {
		t.Fatalf("no second background task id in claude's events:\n%s", cl.diag())
	}
	claudeTask := m[len(m)-1][1]
	cl.send(t, map[string]any{"type": "control_request", "request_id": "stop-1", "request": map[string]any{"subtype": "stop_task", "task_id": claudeTask}})
	resp := cl.await(t, ctx, "the stop_task control response", func(ev map[string]any) bool { return ev["type"] == "control_response" })
	if r, _ := resp["response"].(map[string]any); r["subtype"] != "success" {
		t.Fatalf("stop_task was refused: %v", resp)
	}
	// Another session of the same user lists the child not running (the
	// settlement notice goes to claude's session, still connected, so
	// this one's list_agents waits a little each time).
	other := stdioClient(t, serverEnv(child.Server, nil), dirs.dataDir, dirs.workspace, false)
	var rows map[string]any
	var stopped map[string]any
	for attempt := 0; attempt < 20 && stopped == nil; attempt++ {
		rows = other.callTool(ctx, "list_agents", map[string]any{"wait_seconds": 1})
		sc, _ := rows["structuredContent"].(map[string]any)
		agents, _ := sc["agents"].([]any)
		for _, a := range agents {
			row, _ := a.(map[string]any)
			if strings.Contains(fmt.Sprint(row["label"]), "stopme") && row["status"] != "running" {
				stopped = row
			}
		}
	}
	if stopped == nil {
		t.Fatalf("after stop_task the child is not listed as stopped: %v\n%s", rows, cl.diag())
	}
	log, _ := os.ReadFile(filepath.Join(dirs.dataDir, "daemon.log"))
	if !strings.Contains(string(log), "task cancel: the child's turn is interrupted") {
		t.Fatalf("the daemon never got a tasks/cancel for the stopped task:\n%s", tail(string(log), 3000))
	}
	_ = cl.stdin.Close()
	cl.wait(t, ctx)
}

// TestClientBackgroundRealClaudeCode: Claude Code with MCP tasks off (a
// user whose build or rollout lacks them) backgrounds a long tool call
// itself. The delegation then runs on as an ordinary foreground call:
// the model hears Claude Code's own "moved to the background" and its
// turn goes on; once the child finishes, the call's result reaches the
// model in a <task-notification>; and a later delegation in the same
// session completes.
func TestClientBackgroundRealClaudeCode(t *testing.T) {
	ctx, child, api, _, cl := startTasksClaude(t, "CLAUDE_CODE_DISABLE_MCP_TASKS=1", "CLAUDE_CODE_MCP_AUTO_BACKGROUND_MS=2000")

	child.Hold("bg")
	cl.say(t, "TASKS-E2E delegate bg")
	first := cl.await(t, ctx, "the end of the delegating turn", isResult)
	saw := modelSaw(api)
	if !strings.Contains(saw, "moved to the background") || serverTaskRE.MatchString(saw) || !strings.Contains(fmt.Sprint(first["result"]), "PARENT-GOES-ON bg") {
		t.Fatalf("Claude Code did not background the call itself (or a server task was made with tasks off): result %v\nthe model saw:\n%s\n%s", first["result"], tail(saw, 3000), cl.diag())
	}
	note := releaseForNotification(t, ctx, cl, api, child, "bg")
	if note == "" || !strings.Contains(note, "<status>completed</status>") || !strings.Contains(note, `"stop_reason":"completed"`) {
		t.Fatalf("the child's result did not reach the model in a completed <task-notification>:\n%s\n%s", tail(modelSaw(api), 4000), cl.diag())
	}
	cl.say(t, "TASKS-E2E delegate after")
	next := cl.await(t, ctx, "the next delegating turn", isResult)
	if !strings.Contains(fmt.Sprint(next["result"]), "PARENT-GOES-ON after") || !strings.Contains(modelSaw(api), child.Closing("after")) {
		t.Fatalf("the next delegation did not complete with the child's answer: %v\n%s", next["result"], cl.diag())
	}
	_ = cl.stdin.Close()
	cl.wait(t, ctx)
}
