//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/daemon"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/manager"
)

// The human commands drive the daemon a session started: ls lists its
// children (as a table, a tree and JSON), show prints a transcript with the
// reports and notices its child received labelled by source kind, tail -f
// follows a held child's next step until it settles, send and interrupt
// steer children; none of them takes the session's pending notices.
func TestCLICommandsOnTheDaemon(t *testing.T) {
	model, fake, release := newCLIModel(t)
	s := start(t, fake, serverOpts{})
	ctx := testCtx(t)

	del, initial := startBackground(t, s, ctx, "delegator", "delegate")
	got := awaitNotices(t, s, ctx, 30*time.Second, initial, func(ns []string) bool {
		return countWith(ns, "[subagent-settled from "+del.AgentID+"]") == 1
	})
	if countWith(got, "[subagent-settled from "+del.AgentID+"]") != 1 {
		t.Fatalf("the delegator never settled; notices %q; stderr:\n%s", got, s.stderr)
	}
	watched, _ := startBackground(t, s, ctx, "watched", "watch me")
	<-model.holding

	// ls: both children, in a table and as JSON; --tree puts the
	// grandchild under its parent.
	code, out, errOut := cli(t, s, "ls")
	if code != 0 || !strings.HasPrefix(out, "ID ") || !strings.Contains(out, "STATUS") {
		t.Fatalf("ls: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{del.AgentID, watched.AgentID, "running", "ready", "spawn", "delegator", "completed"} {
		if !strings.Contains(out, want) {
			t.Errorf("ls does not show %q:\n%s", want, out)
		}
	}
	code, out, _ = cli(t, s, "ls", "--json")
	var rows []manager.Row
	if err := json.Unmarshal([]byte(out), &rows); code != 0 || err != nil {
		t.Fatalf("ls --json: exit %d, %v:\n%s", code, err, out)
	}
	byID := map[string]manager.Row{}
	for _, r := range rows {
		byID[r.ID] = r
	}
	if r := byID[del.AgentID]; len(rows) != 2 || r.Status != "ready" || r.Provider != "spawn" || r.Depth != 1 || r.Usage == nil || r.Usage.InputTokens == 0 {
		t.Errorf("ls --json rows = %+v", rows)
	}
	if r := byID[watched.AgentID]; r.Status != "running" {
		t.Errorf("the held child's row = %+v, want running", r)
	}
	code, out, _ = cli(t, s, "ls", "--status", "running", "--json")
	if err := json.Unmarshal([]byte(out), &rows); code != 0 || err != nil || len(rows) != 1 || rows[0].ID != watched.AgentID {
		t.Errorf("ls --status running (flag first): exit %d, %v, %s", code, err, out)
	}
	code, out, _ = cli(t, s, "ls", "--tree")
	lines := strings.Split(out, "\n")
	grand := -1
	for i, l := range lines {
		if strings.Contains(l, "grand work") {
			grand = i
		}
	}
	if code != 0 || grand < 1 || !strings.Contains(lines[grand-1], del.AgentID) || !strings.HasPrefix(lines[grand], "  agent-") {
		t.Errorf("ls --tree: the grandchild is not indented under its parent:\n%s", out)
	}

	// show: the delegator's turns, its tool call, and the report and the
	// notice it received, each under its source kind; how each turn ended
	// and what it used.
	code, out, errOut = cli(t, s, "show", del.AgentID)
	if code != 0 {
		t.Fatalf("show: exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		`"delegator"`, "status ready", "[budget] granted: unlimited",
		"── turn 1 ──", "[user] delegate", "[tool call subagent ", "[assistant] delegated", "── turn 1 ended: completed · ",
		"[assistant] noted the report", "[assistant] noted the settlement", "── turn 3 ended: completed",
		" tok",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show does not contain %q:\n%s", want, out)
		}
	}
	if !lineWith(out, "[subagent-report: a child's report] ", "reported:") || !strings.Contains(out, "reported:\n    halfway there") ||
		!lineWith(out, "[subagent-settled: the runtime's notice] ", "finished and will do no further work") {
		t.Errorf("show does not label the report and the notice by source kind:\n%s", out)
	}
	if strings.Contains(out, "[user] halfway there") || strings.Contains(out, "[assistant] halfway there") {
		t.Errorf("show passes the report off as someone's own words:\n%s", out)
	}
	code, out, _ = cli(t, s, "show", "--json", del.AgentID)
	var tr manager.Transcript
	if err := json.Unmarshal([]byte(out), &tr); code != 0 || err != nil || tr.ID != del.AgentID || len(tr.Entries) == 0 {
		t.Errorf("show --json: exit %d, %v: %.300s", code, err, out)
	}
	if code, _, errOut = cli(t, s, "show", "agent-nobody"); code != 1 || !strings.Contains(errOut, "RESOURCE_NOT_FOUND: no subagent agent-nobody") {
		t.Errorf("show of an unknown id: exit %d, stderr %q; want 1 and RESOURCE_NOT_FOUND naming it", code, errOut)
	}

	// tail -f: the held child's transcript so far; released, its next
	// step; then it settles and tail ends by itself.
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tail := cliCommand(tctx, s, "tail", "-f", watched.AgentID)
	pipe, err := tail.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var tailErr bytes.Buffer
	tail.Stderr = &tailErr
	if err := tail.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(pipe)
	var seen []string
	readUntil := func(want string) bool {
		for sc.Scan() {
			seen = append(seen, sc.Text())
			if strings.Contains(sc.Text(), want) {
				return true
			}
		}
		return false
	}
	if !readUntil("[user] watch me") {
		t.Fatalf("tail -f did not print the held child's prompt: %q; stderr %s", seen, tailErr.String())
	}
	for _, l := range seen {
		if strings.Contains(l, "watched it") {
			t.Fatalf("tail printed the answer before it was given: %q", seen)
		}
	}
	release()
	if !readUntil("[assistant] watched it") || !readUntil("── turn 1 ended: completed") || !readUntil("("+watched.AgentID+" settled)") {
		t.Fatalf("tail -f did not follow the next step to the settlement: %q; stderr %s", seen, tailErr.String())
	}
	_, _ = io.Copy(io.Discard, pipe)
	if err := tail.Wait(); err != nil {
		t.Fatalf("tail -f: %v; stderr %s", err, tailErr.String())
	}

	// send: flags after or before the arguments; --wait prints the outcome.
	code, out, errOut = cli(t, s, "send", watched.AgentID, "again", "--wait")
	if code != 0 || !strings.Contains(out, "answer to again") {
		t.Errorf("send --wait: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, _ = cli(t, s, "send", "--json", watched.AgentID, "once more")
	var sent struct {
		MessageID string `json:"message_id"`
		Route     string `json:"route"`
	}
	if err := json.Unmarshal([]byte(out), &sent); code != 0 || err != nil || sent.MessageID == "" || sent.Route == "" {
		t.Errorf("send --json: exit %d, %v, %s", code, err, out)
	}
	if code, _, errOut = cli(t, s, "send", watched.AgentID); code != 2 || !strings.Contains(errOut, "ID MESSAGE") {
		t.Errorf("send without a message: exit %d, %q; want 2 naming ID MESSAGE", code, errOut)
	}

	// interrupt: the slow child's turn ends aborted.
	slow, _ := startBackground(t, s, ctx, "slow", "long task")
	if !waitFor(10*time.Second, func() bool {
		return len(requestsWhere(fake, func(r fakeopenai.Request) bool { return r.LastUserText() == "long task" })) == 1
	}) {
		t.Fatal("the slow child never called the model")
	}
	code, out, errOut = cli(t, s, "interrupt", slow.AgentID)
	if code != 0 || !strings.Contains(out, "interrupt requested") {
		t.Fatalf("interrupt: exit %d, %q, %q", code, out, errOut)
	}
	got = awaitNotices(t, s, ctx, 20*time.Second, nil, func(ns []string) bool {
		return countWith(ns, "[subagent-settled from "+slow.AgentID+"]") == 1
	})
	if countWith(got, "[subagent-settled from "+slow.AgentID+"]") != 1 {
		t.Fatalf("the interrupted child did not settle: %q", got)
	}
	if _, out, _ = cli(t, s, "show", slow.AgentID); !strings.Contains(out, "turn 1 ended: aborted") {
		t.Errorf("show after interrupt:\n%s", out)
	}
}

// lineWith reports whether a line of out starts with prefix and contains
// sub.
func lineWith(out, prefix, sub string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) && strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

// A notice waiting for the principal's next session is not taken by the
// command line's sessions: it reaches the next model client's session.
func TestCLISessionsTakeNoNotices(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "quick answer"}))
	defer fake.Close()
	a := start(t, fake, serverOpts{})
	ctx := testCtx(t)
	h, _ := startBackground(t, a, ctx, "quick", "quick work")
	settled := waitFor(20*time.Second, func() bool {
		_, out, _ := cli(t, a, "ls", "--json")
		var rows []manager.Row
		_ = json.Unmarshal([]byte(out), &rows)
		return len(rows) == 1 && rows[0].Status == "ready" && rows[0].LastStopReason == "completed"
	})
	if !settled {
		t.Fatal("the child did not settle")
	}
	a.client.Close() // its session goes; the notice is now any session's
	if !waitFor(10*time.Second, func() bool {
		w, err := daemon.Status(ctx, a.dataDir)
		return err == nil && w.Sessions == 0
	}) {
		t.Fatal("the daemon still counts the closed session")
	}
	for _, args := range [][]string{{"ls"}, {"show", h.AgentID}, {"send", h.AgentID, "more", "--wait"}} {
		if code, _, errOut := cli(t, a, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	b := start(t, fake, serverOpts{dataDir: a.dataDir, workspace: a.workspace})
	got := awaitNotices(t, b, ctx, 10*time.Second, nil, func(ns []string) bool {
		return countWith(ns, "[subagent-settled from "+h.AgentID+"]") >= 1
	})
	if countWith(got, "[subagent-settled from "+h.AgentID+"]") < 1 {
		t.Fatalf("the next session did not get the notice the CLI ran past: %q", got)
	}
}

// A human command starts the data directory's daemon when none runs, as a
// session would.
func TestCLIStartsTheDaemon(t *testing.T) {
	dataDir := t.TempDir()
	t.Cleanup(func() { stopDaemon(t, dataDir) })
	s := &instance{dataDir: dataDir, workspace: t.TempDir()}
	if _, err := daemon.Status(testCtx(t), dataDir); err == nil {
		t.Fatal("a daemon runs before the command")
	}
	code, out, errOut := cli(t, s, "ls")
	if code != 0 || out != "no subagents\n" {
		t.Fatalf("ls on a fresh data directory: exit %d, %q, stderr %q", code, out, errOut)
	}
	// A command that succeeded prints nothing to stderr: no transport noise
	// from the MCP client's read loop when the session closes.
	for range 3 {
		if code, _, errOut = cli(t, s, "ls"); code != 0 || errOut != "" {
			t.Fatalf("ls: exit %d, stderr %q; want 0 and nothing", code, errOut)
		}
	}
	if _, err := daemon.Status(testCtx(t), dataDir); err != nil {
		t.Fatalf("no daemon runs after the command: %v", err)
	}
	if code, _, errOut = cli(t, s, "ls", "extra"); code != 2 || !strings.Contains(errOut, "no arguments") {
		t.Errorf("ls with an argument: exit %d, %q; want 2", code, errOut)
	}
}
