//go:build e2e || realcli || browser

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
)

// Helpers shared by the end-to-end tiers: the e2e tests and the realcli and
// browser tests both build on them, so they live apart from any one tier's
// tests (moved here unchanged from the test files that first needed them).

// uiURL runs `mcp-subagent ui` against s's daemon and returns the URL it
// printed.
func uiURL(t *testing.T, s *instance) string {
	t.Helper()
	code, out, errOut := cli(t, s, "ui")
	u := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(u, "http://127.0.0.1:") || !strings.Contains(u, "?token=") {
		t.Fatalf("ui: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	return u
}

type handleSC struct {
	Kind      string `json:"kind"`
	AgentID   string `json:"agent_id"`
	MessageID string `json:"message_id"`
	Status    string `json:"status"`
}

// decodeSC decodes a result's structuredContent into v.
func decodeSC(t testing.TB, r *mcp.CallToolResult, v any) {
	t.Helper()
	raw := []byte(r.RawStructuredContent)
	if raw == nil {
		var err error
		if raw, err = json.Marshal(r.StructuredContent); err != nil {
			t.Fatal(err)
		}
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("structuredContent %s: %v", raw, err)
	}
}

// startBackground starts a background child and checks the handle. It also
// returns the notices that rode in band with the result (a fast child may
// report or settle before the call's result is written).
func startBackground(t testing.TB, s *instance, ctx context.Context, desc, prompt string) (handleSC, []string) {
	t.Helper()
	res := s.call(t, ctx, "subagent", map[string]any{"description": desc, "prompt": prompt, "run_in_background": true})
	if res.IsError {
		t.Fatalf("background start: %s", text(res))
	}
	var h handleSC
	decodeSC(t, res, &h)
	if h.Kind != "continuable" || !strings.HasPrefix(h.AgentID, "agent-") || h.MessageID == "" {
		t.Fatalf("background handle = %+v", h)
	}
	return h, notices(res, "")
}

// awaitNotices waits with list_agents (wait_seconds) until cond holds for
// the notices collected so far (starting with initial), or d passes; it
// returns all of them.
func awaitNotices(t testing.TB, s *instance, ctx context.Context, d time.Duration, initial []string, cond func([]string) bool) []string {
	t.Helper()
	got := append([]string(nil), initial...)
	deadline := time.Now().Add(d)
	for !cond(got) && time.Now().Before(deadline) {
		res, _ := callList(t, s, ctx, map[string]any{"wait_seconds": 1})
		got = append(got, notices(res, "")...)
	}
	return got
}

func countWith(ns []string, sub string) int {
	n := 0
	for _, x := range ns {
		if strings.Contains(x, sub) {
			n++
		}
	}
	return n
}

// requestsWhere returns the recorded requests for which f holds.
func requestsWhere(fake *fakeopenai.Server, f func(fakeopenai.Request) bool) []fakeopenai.Request {
	var out []fakeopenai.Request
	for _, r := range fake.Requests() {
		if f(r) {
			out = append(out, r)
		}
	}
	return out
}

// envEchoFloor makes the test binary the echo floor: a bare mcp-go stdio
// server with one tool, echo, that answers its argument. One call to it is
// the least an MCP round trip costs on this machine; delegation overheads
// are measured against it, interleaved in one run.
const envEchoFloor = "MCP_SUBAGENT_ECHO_FLOOR"

func echoFloorMain() int {
	s := server.NewMCPServer("echo-floor", "1", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("echo", mcp.WithString("text", mcp.Required())),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(req.GetString("text", "")), nil
		})
	if err := server.ServeStdio(s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func subagentArgs(child *childModel, name string) map[string]any {
	return map[string]any{"description": "task " + name, "prompt": child.Task(name), "provider": "spawn"}
}

// newCLIModel is a cliModel and its fake server; release lets "watch me"
// answer (once; the test's end releases it too) and the server closes
// with the test.
func newCLIModel(t *testing.T) (*cliModel, *fakeopenai.Server, func()) {
	model := &cliModel{hold: make(chan struct{}), holding: make(chan struct{})}
	fake := fakeopenai.New(model.reply)
	var once sync.Once
	release := func() { once.Do(func() { close(model.hold) }) }
	t.Cleanup(func() { release(); fake.Close() })
	return model, fake, release
}

// cli runs the built binary's human command against s's daemon, in s's
// project, and returns its exit code, stdout and stderr.
func cli(t *testing.T, s *instance, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := cliCommand(ctx, s, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("mcp-subagent %v: %v", args, err)
	}
	return code, stdout.String(), stderr.String()
}

// callList calls list_agents; args may be nil.
func callList(t testing.TB, s *instance, ctx context.Context, args map[string]any) (*mcp.CallToolResult, []rowSC) {
	t.Helper()
	if args == nil {
		args = map[string]any{}
	}
	res := s.call(t, ctx, "list_agents", args)
	if res.IsError {
		t.Fatalf("list_agents: %s", text(res))
	}
	var out struct {
		Agents []rowSC `json:"agents"`
	}
	decodeSC(t, res, &out)
	return res, out.Agents
}

// notices returns the in-band notices of a tool result with the given
// source kind ("" for all), as "[<source> from <child id>]\n<text>". They
// are read from structuredContent "notices" — what Claude Code and Codex
// hand their model — and must match the text items exactly; a mismatch is
// returned as an extra entry, so the test fails.
func notices(r *mcp.CallToolResult, source string) []string {
	var fromText []string
	for _, c := range r.Content {
		tc, ok := c.(mcp.TextContent)
		if ok && (strings.HasPrefix(tc.Text, "[subagent-report from ") || strings.HasPrefix(tc.Text, "[subagent-settled from ")) {
			fromText = append(fromText, tc.Text)
		}
	}
	var sc struct {
		Notices []struct {
			SourceKind string `json:"source_kind"`
			AgentID    string `json:"agent_id"`
			StopReason string `json:"stop_reason"`
			Text       string `json:"text"`
		} `json:"notices"`
	}
	raw := []byte(r.RawStructuredContent)
	if raw == nil && r.StructuredContent != nil {
		raw, _ = json.Marshal(r.StructuredContent)
	}
	if raw != nil {
		_ = json.Unmarshal(raw, &sc)
	}
	var all []string
	for _, n := range sc.Notices {
		all = append(all, "["+n.SourceKind+" from "+n.AgentID+"]\n"+n.Text)
		if (n.SourceKind == "subagent-settled") != (n.StopReason != "") {
			all = append(all, fmt.Sprintf("a %s notice with stop_reason %q", n.SourceKind, n.StopReason))
		}
	}
	if !slices.Equal(all, fromText) {
		all = append(all, fmt.Sprintf("structured notices %q differ from the text ones %q", all, fromText))
	}
	var out []string
	for _, n := range all {
		if source == "" || strings.HasPrefix(n, "["+source+" from ") || !strings.HasPrefix(n, "[") {
			out = append(out, n)
		}
	}
	return out
}

// cliModel scripts the children of the CLI tests, by their prompt:
//   - "delegate": starts a background grandchild ("grand work"), then
//     acknowledges its report and its settlement notice in later turns;
//   - "grand work": reports "halfway there", then answers;
//   - "watch me": holds its first model call until released;
//   - "long task": a slow call (interrupted);
//   - anything else: "answer to <text>".
type cliModel struct {
	hold    chan struct{} // closed to release "watch me"
	holding chan struct{} // closed when "watch me" is held
	once    sync.Once
}

func (m *cliModel) reply(_ int, req fakeopenai.Request) fakeopenai.Reply {
	last := req.LastUserText()
	_, afterTool := req.LastToolResult()
	switch first := firstUser(req); {
	case first == "delegate" && last == "delegate" && !afterTool:
		args, _ := json.Marshal(map[string]any{"description": "grand work", "prompt": "grand work", "run_in_background": true})
		return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "subagent", Arguments: string(args)}}}
	case first == "delegate" && last == "delegate":
		return fakeopenai.Reply{Text: "delegated"}
	case first == "delegate" && strings.Contains(last, "halfway there"):
		return fakeopenai.Reply{Text: "noted the report"}
	case first == "delegate":
		return fakeopenai.Reply{Text: "noted the settlement"}
	case first == "grand work" && !afterTool:
		return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "report", Arguments: `{"output":"halfway there"}`}}}
	case first == "grand work":
		return fakeopenai.Reply{Text: "grand done"}
	case last == "watch me":
		m.once.Do(func() { close(m.holding) })
		<-m.hold
		return fakeopenai.Reply{Text: "watched it"}
	case last == "long task":
		return fakeopenai.Reply{Text: "slow", Delay: 30 * time.Second}
	}
	return fakeopenai.Reply{Text: "answer to " + last}
}

func cliCommand(ctx context.Context, s *instance, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, binary, append(args, "--data-dir", s.dataDir)...)
	cmd.Env, cmd.Dir = serverEnv(nil, nil), s.workspace
	return cmd
}

type rowSC struct {
	Kind     string `json:"kind"`
	ID       string `json:"id"`
	Label    string `json:"label"`
	Status   string `json:"status"`
	Provider string `json:"provider"`
	Parent   string `json:"parent"`
	Depth    int    `json:"depth"`
	Reason   string `json:"reason"`

	LastStopReason string `json:"last_stop_reason"`
	LastMessage    string `json:"last_message"`
}

// rowOf is the row of id in rows.
func rowOf(rows []rowSC, id string) (rowSC, bool) {
	for _, r := range rows {
		if r.ID == id {
			return r, true
		}
	}
	return rowSC{}, false
}

// firstUser is the content of a request's first user message: the prompt of
// the agent that sent it (for spawn children).
func firstUser(r fakeopenai.Request) string {
	for _, m := range r.Messages {
		if m.Role == "user" {
			return m.Content
		}
	}
	return ""
}

// releaseGate is a channel a test releases once (also at cleanup, so a blocked
// fake handler never holds up the fake's Close).
type releaseGate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate() *releaseGate  { return &releaseGate{ch: make(chan struct{})} }
func (g *releaseGate) open() { g.once.Do(func() { close(g.ch) }) }
func (g *releaseGate) wait(d time.Duration) bool {
	select {
	case <-g.ch:
		return true
	case <-time.After(d):
		return false
	}
}

// The tokens of the two principals of the tests that check one cannot
// reach the other's children.
const aliceTok, bobTok = "alice-secret-token-0123456789", "bob-secret-token-0123456789ab"
