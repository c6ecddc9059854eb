//go:build realcli

package e2e

// End-to-end tests in which Qwen Code, opencode, gemini-cli and GitHub
// Copilot CLI are the MCP clients of the built binary, as
// realclient_test.go does for Claude Code and Codex. Each client is
// configured the way the README's recipe says, its model a scripted fake,
// and one session makes three calls: a foreground delegation, a
// background one (the child held until the next call), and list_agents
// with wait_seconds. The assertions are on what the client's model
// received, read from the fake model's requests:
//
//   - the tools it was offered: our four, under the client's names;
//   - the foreground answer;
//   - the background handle, then the child's settlement notice with its
//     closing message in the next result.
//
// The clients differ in what they show their model of a result (see
// CLIENTS.md and the README): Qwen Code the JSON of structuredContent and
// the text, Copilot CLI the text and the JSON, opencode and gemini-cli the
// text only. So the text of every result must carry what the model needs
// (the handle's id, the notice), not only structuredContent.
//
// The tests skip when a CLI is not installed, and fail instead under
// CI=true. Run them with MCP_SUBAGENT_NPM_PREFIX=$HOME/.cache/mcp-subagent-npm.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/fakegemini"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
)

// moreCLITimeout bounds one test here: opencode alone took up to 113 s a
// session on a loaded 2-core machine (its first start installs a plugin
// package), and the outliving test runs two sessions.
const moreCLITimeout = 6 * time.Minute

func TestRealQwenDelegatesAndHearsABackgroundChild(t *testing.T) {
	driveMoreClient(t, qwenClient, "SESSION-QWEN-8101")
}

func TestRealOpencodeDelegatesAndHearsABackgroundChild(t *testing.T) {
	driveMoreClient(t, opencodeClient, "SESSION-OPENCODE-8102")
}

func TestRealGeminiDelegatesAndHearsABackgroundChild(t *testing.T) {
	driveMoreClient(t, geminiClient, "SESSION-GEMINI-8103")
}

func TestRealCopilotDelegatesAndHearsABackgroundChild(t *testing.T) {
	driveMoreClient(t, copilotClient, "SESSION-COPILOT-8104")
}

// driveMoreClient runs one session of client c (its prompt carries
// marker) and checks what its model received.
func driveMoreClient(t *testing.T, c moreClient, marker string) {
	bin := findCLI(t, c.name)
	ctx := testContext(t, moreCLITimeout)
	dataDir := realDir(t)
	stopDaemonAtCleanup(t, dataDir)
	child := newChildModel(t)
	child.Hold("bg")
	s := &script{c: c, marker: marker, final: "done", steps: []moreStep{
		{tool: "subagent", args: map[string]any{"description": "answer with a marker", "prompt": child.Task("fg")}},
		{tool: "subagent", args: map[string]any{"description": "background marker task", "prompt": child.Task("bg"), "run_in_background": true}},
		// The held child finishes only once the model waits for it.
		{tool: "list_agents", args: map[string]any{"wait_seconds": 60}, onCall: func() { child.Release("bg") }},
	}}
	var (
		url      string
		view     func() modelView
		requests func() string
	)
	if c.name == "gemini" {
		api := fakegemini.New(s.geminiParent())
		t.Cleanup(api.Close)
		url, view = api.URL(), func() modelView { return geminiView(s, api) }
		requests = func() string {
			var b strings.Builder
			for i, r := range api.Requests() {
				b.WriteString(requestLine(i, r.Model, r.ToolNames(), r.LastUserText()))
			}
			return b.String() + "other requests: " + strings.Join(api.Others(), ", ") + "\n"
		}
	} else {
		api := fakeopenai.New(s.chatParent())
		t.Cleanup(api.Close)
		url, view = api.URL(), func() modelView { return chatView(s, api) }
		requests = func() string {
			var b strings.Builder
			for i, r := range api.Requests() {
				var tools []string
				for _, tl := range r.Tools {
					tools = append(tools, tl.Name)
				}
				b.WriteString(requestLine(i, r.Model, tools, r.LastUserText()))
			}
			return b.String()
		}
	}
	h := newMoreHome(t, c, bin, url, dataDir, child)
	start := time.Now()
	run := h.run(t, realDir(t), marker+": delegate one task, then one in the background, and wait for it")
	run.wait(t, ctx)
	t.Logf("%s: the session (three calls) took %s", c.name, time.Since(start).Round(100*time.Millisecond))

	v := view()
	if v.tools == nil {
		t.Fatalf("no request to the parent's model offered %s with the session's marker; the requests:\n%s%s", c.toolName("subagent"), requests(), run.diag())
	}
	t.Logf("%s's model was offered %d tools: %s", c.name, len(v.tools), strings.Join(v.tools, ", "))
	for _, tool := range ourTools {
		if !strings.Contains(","+strings.Join(v.tools, ",")+",", ","+c.toolName(tool)+",") {
			t.Errorf("the model was not offered %s (our %s); it was offered: %s", c.toolName(tool), tool, strings.Join(v.tools, ", "))
		}
	}
	rs := v.results
	for _, r := range rs {
		t.Logf("the model received: %s", r)
	}
	if len(rs) < 3 {
		t.Fatalf("the model received %d results of our tools, want 3:\n%s\n%s", len(rs), quote(rs), run.diag())
	}

	// The foreground answer.
	fg, bg, wait := rs[0], rs[1], rs[2]
	closing := child.Closing("fg")
	if fg.tool != "subagent" || !strings.Contains(fg.text, closing) {
		t.Errorf("the model did not read the child's answer %q in the foreground result:\n%s", closing, quote(rs))
	}
	structured := c.shows != textOnly
	if structured && (fg.obj == nil || fg.obj["kind"] != "foreground" || fg.obj["stop_reason"] != "completed" || fg.obj["output"] != closing) {
		t.Errorf("the model did not receive the foreground structuredContent (%s):\n%s", c.shows, fg)
	}
	if !structured && strings.Contains(fg.text, `"stop_reason"`) {
		t.Errorf("%s showed its model structuredContent, which the README says it drops: %s", c.name, fg)
	}

	// The background handle.
	var id string
	if m := backgroundIDRE.FindStringSubmatch(bg.text); m != nil {
		id = m[1]
	}
	if bg.tool != "subagent" || id == "" {
		t.Fatalf("the model did not read a background handle (\"started subagent ID in the background\"):\n%s\n%s", quote(rs), run.diag())
	}
	if structured && (bg.obj["kind"] != "continuable" || bg.agentID() != id) {
		t.Errorf("the background handle's structuredContent = %v, want kind continuable and agent_id %s", bg.obj, id)
	}

	// The settlement notice, in the result of the next call.
	closing = child.Closing("bg")
	if wait.tool != "list_agents" || !textNotice([]received{wait}, id, closing) {
		t.Errorf("the list_agents result did not carry the text notice \"[subagent-settled from %s]\" with %q:\n%s\n%s", id, closing, quote(rs), run.diag())
	}
	if structured {
		if _, err := settlementOf([]received{wait}, id, closing, "completed"); err != nil {
			t.Errorf("%v", err)
		}
	}
}

func requestLine(i int, model string, tools []string, lastUser string) string {
	return fmt.Sprintf("  #%d model %s, tools [%s], last user text %q\n", i, model, strings.Join(tools, " "), tail(lastUser, 200))
}

// opencode and Copilot CLI end their MCP server's whole process tree when
// they exit. A background child must still outlive the session that
// started it: the daemon that runs it is not in that tree (issue 23).
func TestRealOpencodeChildOutlivesItsSession(t *testing.T) {
	outliveMoreClient(t, opencodeClient, "SESSION-OPENCODE-F1-8105", "SESSION-OPENCODE-F2-8105")
}

func TestRealCopilotChildOutlivesItsSession(t *testing.T) {
	outliveMoreClient(t, copilotClient, "SESSION-COPILOT-F1-8106", "SESSION-COPILOT-F2-8106")
}

// outliveMoreClient: a session of c starts a background child (held) and
// ends; only then is the child released. A later session of the same user
// on the same data directory waits with list_agents, and its model must
// read the child's settlement notice with its closing message and a
// completed outcome: the child went on without its session.
func outliveMoreClient(t *testing.T, c moreClient, first, later string) {
	bin := findCLI(t, c.name)
	ctx := testContext(t, moreCLITimeout)
	dataDir := realDir(t)
	stopDaemonAtCleanup(t, dataDir)
	child := newChildModel(t)
	child.Hold("f")
	s1 := &script{c: c, marker: first, final: "Started it; I am done for now.", steps: []moreStep{
		{tool: "subagent", args: map[string]any{"description": "outliving marker task", "prompt": child.Task("f"), "run_in_background": true}},
	}}
	s2 := &script{c: c, marker: later, final: "done", steps: []moreStep{
		{tool: "list_agents", args: map[string]any{"wait_seconds": 60}},
	}}
	p1, p2 := s1.chatParent(), s2.chatParent()
	api := fakeopenai.New(func(n int, r fakeopenai.Request) fakeopenai.Reply {
		if s2.ours(chatUserTexts(r), r.HasTool) {
			return p2(n, r)
		}
		return p1(n, r)
	})
	t.Cleanup(api.Close)
	h := newMoreHome(t, c, bin, api.URL(), dataDir, child)
	ws := realDir(t)
	run1 := h.run(t, ws, first+": start a background task and end")
	run1.wait(t, ctx)
	rs1 := chatView(s1, api).results
	if len(rs1) == 0 || backgroundIDRE.FindStringSubmatch(rs1[0].text) == nil {
		t.Fatalf("the first session's model did not read a background handle:\n%s\n%s", quote(rs1), run1.diag())
	}
	id := backgroundIDRE.FindStringSubmatch(rs1[0].text)[1]
	// The first session is gone; only now may the child finish.
	child.Release("f")

	run2 := h.run(t, ws, later+": wait for news of earlier children")
	run2.wait(t, ctx)
	rs2 := chatView(s2, api).results
	closing := child.Closing("f")
	if !textNotice(rs2, id, closing) || !strings.Contains(strings.Join(strings.Fields(resultsText(rs2)), " "), "Background subagent "+id+" finished") {
		t.Fatalf("[%s: its process tree ended with the first session] the later session's model did not read that %s finished with %q:\n%s\n--- the first session:\n%s--- the later session:\n%s",
			c.name, id, closing, quote(rs2), run1.diag(), run2.diag())
	}
}

func resultsText(rs []received) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(r.text)
		b.WriteString("\n")
	}
	return b.String()
}
