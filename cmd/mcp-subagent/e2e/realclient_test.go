//go:build realcli

package e2e

// End-to-end tests in which the real Claude Code and Codex CLIs are the
// MCP clients of the built binary. What matters is what a real client's
// model receives: Claude Code hands its model only the JSON of a tool
// result's structuredContent (text blocks beside it are dropped); Codex
// hands it "Wall time: …\nOutput:\n<JSON of structuredContent>". So every
// assertion is on the parent's fake model's recorded requests.
//
// Each test's name says which server feature it stands on, beyond a
// plain foreground delegation:
//
//   - NeedsStructuredNotices: pending notices ride in structuredContent as
//     notices: [{source_kind, agent_id, stop_reason?, text}] and list rows
//     carry last_stop_reason and last_message (DESIGN §5; on main since
//     de9579d).
//   - NeedsDaemon: one daemon per data directory; `serve` relays to it, so
//     several sessions share one store and children outlive sessions
//     (DESIGN §11; on main since 390d36a). Each test stops the daemon at
//     cleanup with `mcp-subagent daemon stop --data-dir DIR`.
//
// Without them the tests fail with what the model actually received.
// The tests skip when a CLI is not installed, and fail instead under CI=true.
// Run them with MCP_SUBAGENT_NPM_PREFIX=$HOME/.cache/mcp-subagent-npm.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeanthropic"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeresponses"
	"github.com/mcp-subagent/mcp-subagent/internal/gittest"
)

// The clientInfo names the CLIs send (the lead chooses foreground wait
// bounds per client name): see TestRealClientsIdentifyThemselves.
const (
	claudeClientName = "claude-code"
	codexClientName  = "codex-mcp-client"
)

// Baseline, passes today: a foreground delegation's answer reaches a Claude
// Code parent's model as the JSON of structuredContent.
func TestRealClaudeForegroundAnswerReachesTheModel(t *testing.T) {
	bin := findCLI(t, "claude")
	ctx := testContext(t, realCLITimeout)
	dataDir := realDir(t)
	stopDaemonAtCleanup(t, dataDir)
	child := newChildModel(t)
	const session = "SESSION-FG-4410"
	api := fakeanthropic.New(claudeParent([]claudeStep{
		{tool: "mcp__subagent__subagent", input: map[string]any{"description": "answer with a marker", "prompt": child.Task("fg")}},
	}, "done"))
	t.Cleanup(api.Close)
	h := newClaudeHome(t, bin, api)
	h.register(t, dataDir, child)
	run := h.run(t, realDir(t), session+": delegate one task")
	run.wait(t, ctx)

	rs := claudeReceived(api, session)
	fg := resultOf(t, rs, "subagent", "a foreground delegation", run)
	if fg.obj == nil || fg.obj["stop_reason"] != "completed" || fg.obj["output"] != child.Closing("fg") {
		t.Fatalf("the model did not receive the child's answer as structuredContent JSON:\n%s\n%s", quote(rs), run.diag())
	}
	if fg.text == child.Closing("fg") {
		t.Errorf("the model received the text block, not structuredContent: %q", fg.text)
	}
}

// Baseline, passes today: the same with a Codex parent.
func TestRealCodexForegroundAnswerReachesTheModel(t *testing.T) {
	bin := findCLI(t, "codex")
	ctx := testContext(t, realCLITimeout)
	dataDir := realDir(t)
	stopDaemonAtCleanup(t, dataDir)
	child := newChildModel(t)
	const session = "SESSION-FG-4420"
	api := fakeresponses.New(codexParent([]codexStep{
		{tool: "subagent", args: map[string]any{"description": "answer with a marker", "prompt": child.Task("fg")}},
	}, "done"))
	t.Cleanup(api.Close)
	h := newCodexHome(t, bin, api)
	h.register(t, dataDir, child)
	run := h.run(t, realDir(t), session+": delegate one task")
	run.wait(t, ctx)

	rs := codexReceived(api, session)
	fg := resultOf(t, rs, "subagent", "a foreground delegation", run)
	if !strings.Contains(fg.text, "Output:\n") || fg.obj == nil || fg.obj["stop_reason"] != "completed" || fg.obj["output"] != child.Closing("fg") {
		t.Fatalf("the model did not receive the child's answer as Output: <structuredContent JSON>:\n%s\n%s", quote(rs), run.diag())
	}
}

// (a) NeedsStructuredNotices. A Claude Code parent starts a child in the
// background (held, so it is provably still running when the call
// returns), then waits with list_agents wait_seconds; the child is
// released when the model makes that call. A later request to the
// parent's model must carry the child's settlement notice, with its
// closing message, in the structuredContent JSON.
func TestRealClaudeHearsABackgroundChildThroughListAgents(t *testing.T) {
	bin := findCLI(t, "claude")
	ctx := testContext(t, realCLITimeout)
	dataDir := realDir(t)
	stopDaemonAtCleanup(t, dataDir)
	child := newChildModel(t)
	child.Hold("a")
	const session = "SESSION-A-7301"
	api := fakeanthropic.New(claudeParent([]claudeStep{
		{tool: "mcp__subagent__subagent", input: map[string]any{"description": "background marker task", "prompt": child.Task("a"), "run_in_background": true}},
		{tool: "mcp__subagent__list_agents", input: map[string]any{"wait_seconds": 60}, onCall: func() { child.Release("a") }},
	}, "done"))
	t.Cleanup(api.Close)
	h := newClaudeHome(t, bin, api)
	h.register(t, dataDir, child)
	run := h.run(t, realDir(t), session+": delegate in the background and wait for the child")
	run.wait(t, ctx)

	rs := claudeReceived(api, session)
	bg := resultOf(t, rs, "subagent", "a background delegation", run)
	id := bg.agentID()
	if bg.obj["kind"] != "continuable" || id == "" {
		t.Fatalf("the background call did not hand back a handle:\n%s\n%s", quote(rs), run.diag())
	}
	if _, err := settlementOf(rs, id, child.Closing("a"), ""); err != nil {
		t.Fatalf("[needs structured notices] %v\n%s", err, run.diag())
	}
	if err := listedOutcome(rs, id, child.Closing("a"), "completed"); err != nil {
		t.Errorf("[needs list rows with last_stop_reason and last_message] %v", err)
	}
}

// (b) NeedsStructuredNotices. The same with a Codex parent.
func TestRealCodexHearsABackgroundChildThroughListAgents(t *testing.T) {
	bin := findCLI(t, "codex")
	ctx := testContext(t, realCLITimeout)
	dataDir := realDir(t)
	stopDaemonAtCleanup(t, dataDir)
	child := newChildModel(t)
	child.Hold("b")
	const session = "SESSION-B-7302"
	api := fakeresponses.New(codexParent([]codexStep{
		{tool: "subagent", args: map[string]any{"description": "background marker task", "prompt": child.Task("b"), "run_in_background": true}},
		{tool: "list_agents", args: map[string]any{"wait_seconds": 60}, onCall: func() { child.Release("b") }},
	}, "done"))
	t.Cleanup(api.Close)
	h := newCodexHome(t, bin, api)
	h.register(t, dataDir, child)
	run := h.run(t, realDir(t), session+": delegate in the background and wait for the child")
	run.wait(t, ctx)

	rs := codexReceived(api, session)
	bg := resultOf(t, rs, "subagent", "a background delegation", run)
	id := bg.agentID()
	if bg.obj["kind"] != "continuable" || id == "" {
		t.Fatalf("the background call did not hand back a handle:\n%s\n%s", quote(rs), run.diag())
	}
	if _, err := settlementOf(rs, id, child.Closing("b"), ""); err != nil {
		t.Fatalf("[needs structured notices] %v\n%s", err, run.diag())
	}
}

// (c) NeedsStructuredNotices. A foreground subagent call whose
// wait_seconds runs out (the child is held) hands back a running handle;
// the model then waits with list_agents, the child is released, and its
// notice reaches the model.
func TestRealClaudeForegroundWaitRunsOutThenTheNoticeArrives(t *testing.T) {
	bin := findCLI(t, "claude")
	ctx := testContext(t, realCLITimeout)
	dataDir := realDir(t)
	stopDaemonAtCleanup(t, dataDir)
	child := newChildModel(t)
	child.Hold("c")
	const session = "SESSION-C-7303"
	api := fakeanthropic.New(claudeParent([]claudeStep{
		{tool: "mcp__subagent__subagent", input: map[string]any{"description": "slow marker task", "prompt": child.Task("c"), "wait_seconds": 1}},
		{tool: "mcp__subagent__list_agents", input: map[string]any{"wait_seconds": 60}, onCall: func() { child.Release("c") }},
	}, "done"))
	t.Cleanup(api.Close)
	h := newClaudeHome(t, bin, api)
	h.register(t, dataDir, child)
	run := h.run(t, realDir(t), session+": delegate, wait a second at most, then wait for the child")
	run.wait(t, ctx)

	rs := claudeReceived(api, session)
	fg := resultOf(t, rs, "subagent", "a bounded foreground delegation", run)
	id := fg.agentID()
	if fg.obj["kind"] != "continuable" || fg.obj["status"] != "running" || id == "" {
		t.Fatalf("a foreground call whose wait ran out did not hand back a running handle:\n%s\n%s", quote(rs), run.diag())
	}
	if _, err := settlementOf(rs, id, child.Closing("c"), ""); err != nil {
		t.Fatalf("[needs structured notices] %v\n%s", err, run.diag())
	}
}

// delegated checks that a session's model received its own child's
// answer from a foreground subagent call.
func delegated(rs []received, closing string) error {
	for _, r := range rs {
		if r.tool == "subagent" && r.obj != nil && r.obj["stop_reason"] == "completed" && r.obj["output"] == closing {
			return nil
		}
	}
	return fmt.Errorf("its model never received its child's answer %q; what it received:\n%s", closing, quote(rs))
}

// barrier holds the children named a and b until both are running (each
// has called its model) or the other's session has ended. The returned
// func reports whether they did run at once (each was released because
// the other had arrived); call it after both sessions have ended.
func barrier(ctx context.Context, child *childModel, a, b string, aRun, bRun *cliRun) func() bool {
	child.Hold(a)
	child.Hold(b)
	var wg sync.WaitGroup
	var mu sync.Mutex
	overlapped := 0
	wait := func(self string, other string, otherRun *cliRun) {
		defer wg.Done()
		select {
		case <-child.Arrived(other):
			mu.Lock()
			overlapped++
			mu.Unlock()
		case <-otherRun.done:
		case <-ctx.Done():
		}
		child.Release(self)
	}
	wg.Add(2)
	go wait(a, b, bRun)
	go wait(b, a, aRun)
	return func() bool {
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return overlapped == 2
	}
}

const daemonNote = "needs the daemon: one per data directory, which every session's `serve` relays to, so a second session does not open the store itself"

// (d) NeedsDaemon. Two Claude Code sessions of one user (one HOME, two
// projects) run at the same time on one data directory; both delegate,
// their children run at the same time, and both get their answers.
func TestRealClaudeTwoSessionsOnOneDataDirBothDelegate(t *testing.T) {
	bin := findCLI(t, "claude")
	ctx := testContext(t, realCLITimeout)
	dataDir := realDir(t)
	stopDaemonAtCleanup(t, dataDir)
	child := newChildModel(t)
	step := func(name string) []claudeStep {
		return []claudeStep{{tool: "mcp__subagent__subagent", input: map[string]any{"description": "concurrent marker task", "prompt": child.Task(name)}}}
	}
	sessions := map[string]string{"SESSION-D1-7304": "d1", "SESSION-D2-7304": "d2"}
	api := fakeanthropic.New(bySession(map[string]fakeanthropic.Handler{
		"SESSION-D1-7304": claudeParent(step("d1"), "done"),
		"SESSION-D2-7304": claudeParent(step("d2"), "done"),
	}))
	t.Cleanup(api.Close)
	h := newClaudeHome(t, bin, api)
	// The children are held from the start: barrier below.
	child.Hold("d1")
	child.Hold("d2")
	h.register(t, dataDir, child)
	runs := map[string]*cliRun{}
	for session := range sessions {
		runs[session] = h.run(t, realDir(t), session+": delegate one task")
	}
	atOnce := barrier(ctx, child, "d1", "d2", runs["SESSION-D1-7304"], runs["SESSION-D2-7304"])
	for _, r := range runs {
		select {
		case <-r.done:
		case <-ctx.Done():
			t.Fatalf("a session did not finish in time\n%s", r.diag())
		}
	}
	if !atOnce() {
		t.Errorf("[%s] the two sessions' children did not run at the same time (one never called its model while the other waited)", daemonNote)
	}
	for session, name := range sessions {
		r := runs[session]
		if err := delegated(claudeReceived(api, session), child.Closing(name)); err != nil {
			t.Errorf("[%s] session %s (Claude Code's init reported our server %q): %v\n%s", daemonNote, session, r.mcpStatus(), err, r.diag())
		}
	}
}

// (e) NeedsDaemon. A Claude Code session and a Codex session run at the
// same time on one data directory; both delegate, their children run at
// the same time, and both get their answers.
func TestRealClaudeAndCodexOnOneDataDirBothDelegate(t *testing.T) {
	claudeBin := findCLI(t, "claude")
	codexBin := findCLI(t, "codex")
	ctx := testContext(t, realCLITimeout)
	dataDir := realDir(t)
	stopDaemonAtCleanup(t, dataDir)
	child := newChildModel(t)
	child.Hold("e-claude")
	child.Hold("e-codex")
	const claudeSession, codexSession = "SESSION-E-CLAUDE-7305", "SESSION-E-CODEX-7305"
	anth := fakeanthropic.New(claudeParent([]claudeStep{
		{tool: "mcp__subagent__subagent", input: map[string]any{"description": "concurrent marker task", "prompt": child.Task("e-claude")}},
	}, "done"))
	t.Cleanup(anth.Close)
	resp := fakeresponses.New(codexParent([]codexStep{
		{tool: "subagent", args: map[string]any{"description": "concurrent marker task", "prompt": child.Task("e-codex")}},
	}, "done"))
	t.Cleanup(resp.Close)
	ch := newClaudeHome(t, claudeBin, anth)
	ch.register(t, dataDir, child)
	xh := newCodexHome(t, codexBin, resp)
	xh.register(t, dataDir, child)
	claude := ch.run(t, realDir(t), claudeSession+": delegate one task")
	codex := xh.run(t, realDir(t), codexSession+": delegate one task")
	atOnce := barrier(ctx, child, "e-claude", "e-codex", claude, codex)
	for _, r := range []*cliRun{claude, codex} {
		select {
		case <-r.done:
		case <-ctx.Done():
			t.Fatalf("%s did not finish in time\n%s", r.name, r.diag())
		}
	}
	if !atOnce() {
		t.Errorf("[%s] the Claude Code and Codex children did not run at the same time (one never called its model while the other waited)", daemonNote)
	}
	if err := delegated(claudeReceived(anth, claudeSession), child.Closing("e-claude")); err != nil {
		t.Errorf("[%s] Claude Code (its init reported our server %q): %v\n%s", daemonNote, claude.mcpStatus(), err, claude.diag())
	}
	if err := delegated(codexReceived(resp, codexSession), child.Closing("e-codex")); err != nil {
		t.Errorf("[%s] Codex: %v; its model's last words: %q\n%s", daemonNote, err, lastCodexMessage(codex), codex.diag())
	}
}

// lastCodexMessage is the text of Codex's last agent_message event.
func lastCodexMessage(r *cliRun) string {
	var last string
	for _, ev := range r.events() {
		if item, _ := ev["item"].(map[string]any); item["type"] == "agent_message" {
			last, _ = item["text"].(string)
		}
	}
	return last
}

// (f) NeedsDaemon (and structured notices). A Claude Code session starts a
// background child and ends (`claude -p` exits) before the child
// finishes; the child is released only then. A later session of the same
// user on the same data directory waits with list_agents and its model
// receives the child's closing message with a completed outcome — the
// child went on without its session, it was not stopped.
func TestRealClaudeLaterSessionHearsAChildThatOutlivedItsSession(t *testing.T) {
	bin := findCLI(t, "claude")
	ctx := testContext(t, realCLITimeout)
	dataDir := realDir(t)
	stopDaemonAtCleanup(t, dataDir)
	child := newChildModel(t)
	child.Hold("f")
	const first, later = "SESSION-F1-7306", "SESSION-F2-7306"
	api := fakeanthropic.New(bySession(map[string]fakeanthropic.Handler{
		first: claudeParent([]claudeStep{
			{tool: "mcp__subagent__subagent", input: map[string]any{"description": "outliving marker task", "prompt": child.Task("f"), "run_in_background": true}},
		}, "Started it; I am done for now."),
		later: claudeParent([]claudeStep{
			{tool: "mcp__subagent__list_agents", input: map[string]any{"wait_seconds": 60}},
		}, "done"),
	}))
	t.Cleanup(api.Close)
	h := newClaudeHome(t, bin, api)
	h.register(t, dataDir, child)
	ws := realDir(t)
	run1 := h.run(t, ws, first+": start a background task and end")
	run1.wait(t, ctx)
	rs1 := claudeReceived(api, first)
	bg := resultOf(t, rs1, "subagent", "the first session's background delegation", run1)
	id := bg.agentID()
	if bg.obj["kind"] != "continuable" || id == "" {
		t.Fatalf("the background call did not hand back a handle:\n%s\n%s", quote(rs1), run1.diag())
	}
	// The first session is gone; only now may the child finish.
	child.Release("f")

	run2 := h.run(t, ws, later+": wait for news of earlier children")
	run2.wait(t, ctx)
	rs2 := claudeReceived(api, later)
	if _, err := settlementOf(rs2, id, child.Closing("f"), "completed"); err != nil {
		t.Fatalf("[%s; and structured notices] %v\n--- the first session:\n%s--- the later session:\n%s", daemonNote, err, run1.diag(), run2.diag())
	}
	if err := listedOutcome(rs2, id, child.Closing("f"), "completed"); err != nil {
		t.Errorf("[needs list rows with last_stop_reason and last_message] %v", err)
	}
}

// TestRealClientsIdentifyThemselves records what each CLI sends our
// server to say who it is — the lead chooses foreground wait bounds per
// client name. The server is registered behind a shell wrapper that tees
// the client's side of the stdio stream to a file.
func TestRealClientsIdentifyThemselves(t *testing.T) {
	wrapper := func(t *testing.T, log string) string {
		p := filepath.Join(t.TempDir(), "tee-serve.sh")
		script := fmt.Sprintf("#!/bin/sh\ntee -a %q | %q \"$@\"\n", log, binary)
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Run("claude", func(t *testing.T) {
		bin := findCLI(t, "claude")
		ctx := testContext(t, realCLITimeout)
		dataDir := realDir(t)
		stopDaemonAtCleanup(t, dataDir)
		log := filepath.Join(t.TempDir(), "client-to-server.jsonl")
		child := newChildModel(t)
		const session = "SESSION-ID-7307"
		api := fakeanthropic.New(claudeParent([]claudeStep{
			{tool: "mcp__subagent__subagent", input: map[string]any{"description": "answer with a marker", "prompt": child.Task("id")}},
		}, "done"))
		t.Cleanup(api.Close)
		h := newClaudeHome(t, bin, api)
		h.register(t, dataDir, child)
		// Swap the command for the wrapper (same args).
		reregister(t, h, wrapper(t, log))
		run := h.run(t, realDir(t), session+": delegate one task")
		run.wait(t, ctx)
		checkIdentity(t, log, claudeClientName)
	})
	t.Run("codex", func(t *testing.T) {
		bin := findCLI(t, "codex")
		ctx := testContext(t, realCLITimeout)
		dataDir := realDir(t)
		stopDaemonAtCleanup(t, dataDir)
		log := filepath.Join(t.TempDir(), "client-to-server.jsonl")
		child := newChildModel(t)
		const session = "SESSION-ID-7308"
		api := fakeresponses.New(codexParent([]codexStep{
			{tool: "subagent", args: map[string]any{"description": "answer with a marker", "prompt": child.Task("id")}},
		}, "done"))
		t.Cleanup(api.Close)
		h := newCodexHome(t, bin, api)
		h.register(t, dataDir, child)
		cfg := filepath.Join(h.home, "config.toml")
		data, _ := os.ReadFile(cfg)
		data = []byte(strings.Replace(string(data), fmt.Sprintf("command = %q", binary), fmt.Sprintf("command = %q", wrapper(t, log)), 1))
		if err := os.WriteFile(cfg, data, 0o600); err != nil {
			t.Fatal(err)
		}
		run := h.run(t, realDir(t), session+": delegate one task")
		run.wait(t, ctx)
		checkIdentity(t, log, codexClientName)
	})
}

func reregister(t *testing.T, h *claudeHome, command string) {
	t.Helper()
	cfg := filepath.Join(h.home, ".claude", ".claude.json")
	data, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	servers, _ := doc["mcpServers"].(map[string]any)
	srv, _ := servers["subagent"].(map[string]any)
	if srv == nil {
		t.Fatalf("no subagent server in %s", cfg)
	}
	srv["command"] = command
	out, _ := json.MarshalIndent(doc, "", "  ")
	if err := os.WriteFile(cfg, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkIdentity reads the client's messages and reports (and checks) the
// name it gives: in `initialize` params.clientInfo (legacy protocol) or
// in each request's _meta "io.modelcontextprotocol/clientInfo" (the
// stateless 2026-07-28 protocol, which has no initialize).
func checkIdentity(t *testing.T, log, want string) {
	t.Helper()
	f, err := os.Open(log)
	if err != nil {
		t.Fatalf("the wrapper recorded nothing: %v", err)
	}
	defer f.Close()
	var names, methods []string
	proto := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var msg struct {
			Method string `json:"method"`
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
				ClientInfo      *struct {
					Name, Version string
				} `json:"clientInfo"`
				Meta map[string]json.RawMessage `json:"_meta"`
			} `json:"params"`
		}
		if json.Unmarshal(sc.Bytes(), &msg) != nil || msg.Method == "" {
			continue
		}
		methods = append(methods, msg.Method)
		if msg.Method == "initialize" && msg.Params.ClientInfo != nil {
			names = append(names, msg.Params.ClientInfo.Name)
			proto = "initialize, protocolVersion " + msg.Params.ProtocolVersion
		}
		if raw, ok := msg.Params.Meta["io.modelcontextprotocol/clientInfo"]; ok {
			var ci struct{ Name string }
			_ = json.Unmarshal(raw, &ci)
			names = append(names, ci.Name)
			if proto == "" {
				var v string
				_ = json.Unmarshal(msg.Params.Meta["io.modelcontextprotocol/protocolVersion"], &v)
				proto = "no initialize: clientInfo in each request's _meta, protocol " + v
			}
		}
	}
	if len(names) == 0 {
		t.Fatalf("no clientInfo among the client's messages %q", methods)
	}
	t.Logf("clientInfo.name %q (%s); methods %q", names[0], proto, methods)
	for _, n := range names {
		if n != want {
			t.Errorf("clientInfo.name %q, want %q: the per-client wait bounds key on it", n, want)
		}
	}
}

// Issue 8: a refused argument reaches a real client's model as an error
// that names the field and what to do; no child starts. The label here
// carries a bidi override, which would reorder what a terminal shows.
func TestRealClientsModelsReadARefusedArgument(t *testing.T) {
	const label = "fix the \u202egnp.exe bug"
	check := func(t *testing.T, rs []received, run *cliRun, child *childModel) {
		t.Helper()
		r := resultOf(t, rs, "subagent", "a refused subagent call", run)
		t.Logf("the model received: %.300q", r.text)
		if !strings.Contains(r.text, "description") || !strings.Contains(r.text, "bidi") {
			t.Errorf("the model received %q; want the refusal naming description and its bidi control", r.text)
		}
		if n := len(child.Requests()); n != 0 {
			t.Errorf("the child's model got %d requests for a refused call", n)
		}
	}
	oneDelegationOnBoth(t, "SESSION-BAD-4470", "SESSION-BAD-4480", nil, nil,
		func(child *childModel) map[string]any {
			return map[string]any{"description": label, "prompt": child.Task("bad")}
		}, check)
}

// A Claude Code parent's model pages list_agents: the first page (limit 1)
// hands it next_cursor in the structuredContent it reads, it passes the
// cursor back, and the second page lists the other child and ends.
func TestRealClaudePagesListAgents(t *testing.T) {
	bin := findCLI(t, "claude")
	ctx := testContext(t, realCLITimeout)
	dataDir := realDir(t)
	stopDaemonAtCleanup(t, dataDir)
	child := newChildModel(t)
	const session = "SESSION-PAGE-5120"
	// The cursor the model read in its last list_agents result.
	cursorOf := func(r fakeanthropic.Request) any {
		in := map[string]any{"limit": 1, "all_projects": true}
		for _, tr := range r.ToolResults() {
			if strings.HasSuffix(tr.Name, "list_agents") {
				if c, ok := decodeReceived("list_agents", tr.Text).obj["next_cursor"].(string); ok {
					in["cursor"] = c
				}
			}
		}
		return in
	}
	api := fakeanthropic.New(claudeParent([]claudeStep{
		{tool: "mcp__subagent__subagent", input: map[string]any{"description": "first", "prompt": child.Task("p1")}},
		{tool: "mcp__subagent__subagent", input: map[string]any{"description": "second", "prompt": child.Task("p2")}},
		{tool: "mcp__subagent__list_agents", input: map[string]any{"limit": 1, "all_projects": true}},
		{tool: "mcp__subagent__list_agents", inputOf: cursorOf},
	}, "done"))
	t.Cleanup(api.Close)
	h := newClaudeHome(t, bin, api)
	h.register(t, dataDir, child)
	run := h.run(t, realDir(t), session+": delegate two tasks, then page through your agents")
	run.wait(t, ctx)

	rs := claudeReceived(api, session)
	var pages []received
	for _, r := range rs {
		if r.tool == "list_agents" {
			pages = append(pages, r)
		}
	}
	if len(pages) != 2 {
		t.Fatalf("the model read %d list_agents results, want 2:\n%s\n%s", len(pages), quote(rs), run.diag())
	}
	ids := func(r received) []string {
		var out []string
		rows, _ := r.obj["agents"].([]any)
		for _, row := range rows {
			if m, ok := row.(map[string]any); ok {
				id, _ := m["id"].(string)
				out = append(out, id)
			}
		}
		return out
	}
	first, second := ids(pages[0]), ids(pages[1])
	if _, ok := pages[0].obj["next_cursor"].(string); !ok || len(first) != 1 {
		t.Fatalf("the first page (limit 1) = %v with next_cursor %v; want one row and a cursor:\n%s", first, pages[0].obj["next_cursor"], quote(rs))
	}
	if _, more := pages[1].obj["next_cursor"]; more || len(second) != 1 || second[0] == first[0] {
		t.Fatalf("the second page = %v (next_cursor %v); want the other child and no cursor:\n%s", second, pages[1].obj["next_cursor"], quote(rs))
	}
}

// A child that runs out of its budget (seconds: its model holds the call)
// reaches a Claude Code or Codex parent's model as an error result naming
// the stop reason budget and the limit, never as a half answer.
func TestRealClientsModelsReadABudgetStop(t *testing.T) {
	input := func(child *childModel) map[string]any {
		return map[string]any{"description": "bounded work", "prompt": child.Task("bounded"), "budget": map[string]any{"seconds": 1}}
	}
	check := func(t *testing.T, rs []received, run *cliRun) {
		t.Helper()
		r := resultOf(t, rs, "subagent", "a delegation that ran out of its budget", run)
		t.Logf("the model received: %.400q", r.text)
		if !strings.Contains(r.text, "budget") || !strings.Contains(r.text, "seconds") {
			t.Errorf("the model received %q; want the budget stop naming the seconds limit", r.text)
		}
		if r.obj != nil && r.obj["stop_reason"] != nil && r.obj["stop_reason"] != "budget" {
			t.Errorf("stop_reason = %v, want budget", r.obj["stop_reason"])
		}
	}
	oneDelegationOnBoth(t, "SESSION-BUDGET-5210", "SESSION-BUDGET-5220", func(child *childModel) { child.Hold("bounded") }, nil, input,
		func(t *testing.T, rs []received, run *cliRun, _ *childModel) { check(t, rs, run) })
}

// oneDelegationOnBoth runs a Claude Code parent (session claudeSession)
// and a Codex parent (codexSession), each making one subagent call with
// input(child) and then ending its turn, and checks what each parent's
// model received. prep, when set, readies the child's model first;
// workDir, when set, makes the directory the parent works in (default: an
// empty one).
func oneDelegationOnBoth(t *testing.T, claudeSession, codexSession string, prep func(*childModel), workDir func(*testing.T) string,
	input func(*childModel) map[string]any, check func(t *testing.T, rs []received, run *cliRun, child *childModel)) {
	t.Helper()
	setup := func(t *testing.T) (context.Context, string, *childModel) {
		ctx := testContext(t, realCLITimeout)
		dataDir := realDir(t)
		stopDaemonAtCleanup(t, dataDir)
		child := newChildModel(t)
		if prep != nil {
			prep(child)
		}
		return ctx, dataDir, child
	}
	t.Run("claude", func(t *testing.T) {
		bin := findCLI(t, "claude")
		ctx, dataDir, child := setup(t)
		api := fakeanthropic.New(claudeParent([]claudeStep{{tool: "mcp__subagent__subagent", input: input(child)}}, "done"))
		t.Cleanup(api.Close)
		h := newClaudeHome(t, bin, api)
		h.register(t, dataDir, child)
		run := h.run(t, dirOf(t, workDir), claudeSession+": delegate one task")
		run.wait(t, ctx)
		check(t, claudeReceived(api, claudeSession), run, child)
	})
	t.Run("codex", func(t *testing.T) {
		bin := findCLI(t, "codex")
		ctx, dataDir, child := setup(t)
		api := fakeresponses.New(codexParent([]codexStep{{tool: "subagent", args: input(child)}}, "done"))
		t.Cleanup(api.Close)
		h := newCodexHome(t, bin, api)
		h.register(t, dataDir, child)
		run := h.run(t, dirOf(t, workDir), codexSession+": delegate one task")
		run.wait(t, ctx)
		check(t, codexReceived(api, codexSession), run, child)
	})
}

func dirOf(t *testing.T, workDir func(*testing.T) string) string {
	if workDir == nil {
		return realDir(t)
	}
	return workDir(t)
}

// A child started with isolation "worktree" from a parent working in a
// git repository reaches a Claude Code or Codex parent's model with its
// worktree (path, branch subagent/<id>, base) and its changes.
func TestRealClientsModelsReadAnIsolatedChildsWorktree(t *testing.T) {
	repo := func(t *testing.T) string { return gittest.Init(t, realDir(t), nil) }
	input := func(child *childModel) map[string]any {
		return map[string]any{"description": "isolated work", "prompt": child.Task("iso"), "isolation": "worktree"}
	}
	oneDelegationOnBoth(t, "SESSION-ISO-5310", "SESSION-ISO-5320", nil, repo, input,
		func(t *testing.T, rs []received, run *cliRun, child *childModel) {
			t.Helper()
			r := resultOf(t, rs, "subagent", "an isolated delegation", run)
			wt, _ := r.obj["worktree"].(map[string]any)
			id, _ := r.obj["agent_id"].(string)
			if r.obj["output"] != child.Closing("iso") || wt == nil || wt["branch"] != "subagent/"+id || wt["path"] == "" || wt["base"] == "" || r.obj["changes"] == nil {
				t.Errorf("the model received %.600q; want the answer with its worktree on subagent/<id> and its changes", r.text)
			}
		})
}
