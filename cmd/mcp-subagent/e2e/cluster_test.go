//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/persist/pgstore"
)

// Three serve --http instances on one PostgreSQL database, one principal:
// a child started at A is listed at B and C while its turn runs at A; a
// send_message at B is admitted for A, which runs it after its turn; when A
// is killed (-9) mid-turn with a follow-up queued, another instance takes
// the child over within the lease plus 10 s, closes the cut-off turn
// without re-running it, and runs the follow-up with the child's history:
// nothing accepted is lost, nothing runs twice.
func TestThreeInstancesOnOnePostgreSQL(t *testing.T) {
	url := pgURL(t)
	release, release2 := newGate(), newGate() // the turns "HOLD one" and "HOLD kill"
	fake := newHeldModel(t, map[string]*releaseGate{"HOLD one": release, "HOLD kill": release2})
	askedFor := fake.count
	a, b, c := clusterInstance(t, fake.Server, url), clusterInstance(t, fake.Server, url), clusterInstance(t, fake.Server, url)
	ctx := testCtx(t)

	statusAt := func(s *instance, id string) (rowSC, bool) {
		t.Helper()
		_, rows := callList(t, s, ctx, nil)
		return rowOf(rows, id)
	}

	// A child of A's, its turn running at A, is listed at B and C.
	h, _ := startBackground(t, a, ctx, "held at A", "HOLD one")
	if !waitFor(10*time.Second, func() bool { return askedFor("HOLD one") == 1 }) {
		t.Fatal("the child never called the model")
	}
	for name, s := range map[string]*instance{"A": a, "B": b, "C": c} {
		if r, ok := statusAt(s, h.AgentID); !ok || r.Status != "running" {
			t.Fatalf("%s lists %s as %+v (found %v); want it running", name, h.AgentID, r, ok)
		}
	}
	// A follow-up at B is admitted for A, and runs there after the turn.
	res, sent := callSend(t, b, ctx, h.AgentID, "two", 0)
	if res.IsError || sent.Route != "forwarded" {
		t.Fatalf("send_message at B = %s (%+v); want it forwarded to A", text(res), sent)
	}
	release.open()
	if !waitFor(20*time.Second, func() bool {
		r, ok := statusAt(c, h.AgentID)
		return ok && r.Status == "ready" && r.LastMessage == "answer to two"
	}) {
		r, _ := statusAt(c, h.AgentID)
		t.Fatalf("C lists %+v; want the child settled with the answer to the follow-up; A's log:\n%s", r, a.stderr)
	}
	if strings.Contains(b.stderr.String(), `"msg":"subagent resumed"`) || strings.Contains(c.stderr.String(), `"msg":"subagent resumed"`) {
		t.Errorf("the follow-up sent at B ran elsewhere than at A, its owner")
	}
	if n := askedFor("two"); n != 1 {
		t.Errorf("the follow-up reached the model %d times; want once", n)
	}

	// Killed mid-turn with a follow-up queued: another instance resumes it.
	h2, _ := startBackground(t, a, ctx, "killed at A", "HOLD kill")
	if !waitFor(10*time.Second, func() bool { return askedFor("HOLD kill") == 1 }) {
		t.Fatal("the second child never called the model")
	}
	// Its turn's start is committed (before its model call).
	st := openPG(t, url)
	journaled(t, st, h2.AgentID, "HOLD kill")
	res, sent = callSend(t, b, ctx, h2.AgentID, "after the kill", 0)
	if res.IsError || sent.Route != "forwarded" {
		t.Fatalf("send_message at B = %s (%+v); want it forwarded to A", text(res), sent)
	}
	a.proc.kill()
	killed := time.Now()
	if !waitFor(clusterLease+10*time.Second, func() bool {
		r, ok := statusAt(c, h2.AgentID)
		return ok && r.Status == "ready" && r.LastMessage == "answer to after the kill"
	}) {
		r, _ := statusAt(c, h2.AgentID)
		t.Fatalf("%s after the kill, C lists %+v; want the follow-up answered by another instance; B's and C's logs of it:\n%s\n%s",
			time.Since(killed).Round(time.Millisecond), r, linesWith(b.stderr.String(), h2.AgentID), linesWith(c.stderr.String(), h2.AgentID))
	}
	t.Logf("taken over and answered %s after the kill -9 (lease %s)", time.Since(killed).Round(time.Millisecond), clusterLease)
	if n := askedFor("HOLD kill"); n != 1 {
		t.Errorf("the cut-off turn reached the model %d times; want once (it is closed, not re-run)", n)
	}
	if n := askedFor("after the kill"); n != 1 {
		t.Errorf("the follow-up reached the model %d times; want once", n)
	}
	// The follow-up ran with the child's history.
	for _, r := range fake.Requests() {
		if r.LastUserText() == "after the kill" && !strings.Contains(dumpConversation(nonSystem(r)), "HOLD kill") {
			t.Errorf("the resumed turn's request lacks the cut-off turn's prompt:\n%s", dumpConversation(nonSystem(r)))
		}
	}
}

// openPG opens the instances' database as the test's own reader.
func openPG(t *testing.T, url string) *pgstore.Store {
	t.Helper()
	st, err := pgstore.Open(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// journaled waits until the child's journal in the database holds the
// user message text.
func journaled(t *testing.T, st *pgstore.Store, id, text string) {
	t.Helper()
	if !waitFor(10*time.Second, func() bool {
		events, err := st.Events(context.Background(), id)
		return err == nil && slices.ContainsFunc(events, func(e agent.Event) bool {
			return e.Message != nil && e.Message.Content == text
		})
	}) {
		t.Fatalf("%q never reached the journal of %s in the database", text, id)
	}
}

// An owner paused (SIGSTOP) past its lease mid-turn loses the child to
// another instance; a follow-up sent meanwhile runs there. Woken
// (SIGCONT) with its model answer in hand, the former owner writes
// nothing — its write is refused by the claim's epoch, and it logs that it
// lost the claim — so the transcript holds the cut-off turn and the
// follow-up's, each once, and not the stale answer.
func TestAPausedOwnerLosesItsChild(t *testing.T) {
	url := pgURL(t)
	release := newGate()
	fake := newHeldModel(t, map[string]*releaseGate{"HOLD pause": release})
	a, b, c := clusterInstance(t, fake.Server, url), clusterInstance(t, fake.Server, url), clusterInstance(t, fake.Server, url)
	ctx := testCtx(t)
	st := openPG(t, url)

	h, _ := startBackground(t, a, ctx, "paused at A", "HOLD pause")
	journaled(t, st, h.AgentID, "HOLD pause")
	before, ok, err := st.ClaimOf(ctx, h.AgentID)
	if err != nil || !ok {
		t.Fatalf("ClaimOf = %+v, %v, %v", before, ok, err)
	}
	if err := a.proc.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = a.proc.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	// Another instance takes it over once A's lease ran out.
	if !waitFor(clusterLease+10*time.Second, func() bool {
		cl, ok, err := st.ClaimOf(ctx, h.AgentID)
		return err == nil && (!ok || cl.Epoch > before.Epoch)
	}) {
		t.Fatalf("nobody took the child over within %s of A's pause", clusterLease+10*time.Second)
	}
	res, sent := callSend(t, b, ctx, h.AgentID, "while A sleeps", 20)
	if res.IsError || sent.Outcome == nil || sent.Outcome.Output != "answer to while A sleeps" {
		t.Fatalf("send_message at B = %s (%+v); want the follow-up answered", text(res), sent)
	}
	// A wakes with its model answer: its write is refused.
	release.open()
	if err := a.proc.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	want := "lost the claim of child " + h.AgentID + " to another owner"
	if !waitFor(20*time.Second, func() bool { return strings.Contains(a.stderr.String(), want) }) {
		t.Fatalf("A's log does not say %q:\n%s", want, linesWith(a.stderr.String(), h.AgentID))
	}
	events, err := st.Events(ctx, h.AgentID)
	if err != nil {
		t.Fatal(err)
	}
	var inputs []string
	open := false
	for _, e := range events {
		switch {
		case e.Kind == agent.EventTurnStart:
			if open {
				t.Fatalf("a turn starts inside another:\n%+v", events)
			}
			open = true
		case e.Kind == agent.EventTurnEnd:
			open = false
		case e.Message != nil && e.Message.Content == "answer to HOLD pause":
			t.Fatalf("the journal holds the paused owner's stale answer:\n%+v", events)
		case e.Message != nil && e.Message.Role == "user":
			inputs = append(inputs, e.Message.Content)
		}
	}
	if open || strings.Join(inputs, "|") != "HOLD pause|while A sleeps" {
		t.Fatalf("turn inputs %q (a turn open: %v); want the cut-off turn, then the follow-up, each once", inputs, open)
	}
	if _, rows := callList(t, c, ctx, nil); len(rows) == 0 {
		t.Fatal("C lists nothing")
	}
}

// PostgreSQL stopped mid-turn and started again: every call made while it
// is down comes back within 30 s (an error saying what failed, or an
// answer), and nothing acknowledged is lost — a follow-up admitted before
// the outage, and any admitted during it, run once the database is back
// (the owner, whose writes failed, closes the cut-off turn and runs them).
func TestPostgreSQLRestartMidTurn(t *testing.T) {
	srv, url := pgServer(t)
	release := newGate()
	fake := newHeldModel(t, map[string]*releaseGate{"HOLD pg": release})
	a, b := clusterInstance(t, fake.Server, url), clusterInstance(t, fake.Server, url)
	ctx := testCtx(t)
	st := openPG(t, url)

	h, _ := startBackground(t, a, ctx, "through an outage", "HOLD pg")
	journaled(t, st, h.AgentID, "HOLD pg")
	res, sent := callSend(t, b, ctx, h.AgentID, "queued before", 0)
	if res.IsError || sent.MessageID == "" {
		t.Fatalf("send_message at B = %s", text(res))
	}
	acked := []string{"queued before"}

	srv.Stop(t)
	release.open() // A's turn ends while the database is down: its writes fail
	bounded := func(s *instance, name string, args map[string]any) (*mcp.CallToolResult, error) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		req := mcp.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = name, args
		began := time.Now()
		r, err := s.client.CallTool(cctx, req)
		if cctx.Err() != nil {
			t.Fatalf("%s hung past 30s while PostgreSQL was down", name)
		}
		t.Logf("%s during the outage: %s after %s", name, func() string {
			if err != nil {
				return err.Error()
			}
			return text(r)
		}(), time.Since(began).Round(time.Millisecond))
		return r, err
	}
	for _, s := range []*instance{a, b} {
		if r, err := bounded(s, "list_agents", map[string]any{}); err == nil && r.IsError && !strings.Contains(strings.ToLower(text(r)), "store") {
			t.Errorf("list_agents failed without saying the store failed: %s", text(r))
		}
		r, err := bounded(s, "send_message", map[string]any{"subagent_id": h.AgentID, "message": "during " + s.url})
		switch {
		case err != nil:
		case r.IsError:
			if !strings.Contains(strings.ToLower(text(r)), "store") {
				t.Errorf("send_message failed without saying the store failed: %s", text(r))
			}
		default:
			acked = append(acked, "during "+s.url)
		}
	}

	srv.Start(t)
	if !waitFor(45*time.Second, func() bool {
		return !slices.ContainsFunc(acked, func(m string) bool { return fake.count(m) == 0 })
	}) {
		t.Fatalf("after the restart, the acknowledged messages %q did not all reach the model; A's log:\n%s", acked, linesWith(a.stderr.String(), h.AgentID))
	}
	for _, m := range acked {
		if n := fake.count(m); n != 1 {
			t.Errorf("%q reached the model %d times; want once", m, n)
		}
	}
	res, sent = callSend(t, b, ctx, h.AgentID, "after the outage", 20)
	if res.IsError || sent.Outcome == nil || sent.Outcome.Output != "answer to after the outage" {
		t.Fatalf("send_message after the restart = %s (%+v)", text(res), sent)
	}
}

// Two instances on one PostgreSQL database: a task-augmented send_message
// at B, for a child whose turn runs at A, is a task whose result is A's
// answer to it; tasks/get answers it at A as at B, working until then
// (A does not resolve B's task as one a stop left).
func TestATaskAtAnotherInstance(t *testing.T) {
	url := pgURL(t)
	release := newGate()
	fake := newHeldModel(t, map[string]*releaseGate{"HOLD task": release})
	a, b := clusterInstance(t, fake.Server, url), clusterInstance(t, fake.Server, url)
	ctx := testCtx(t)
	h, _ := startBackground(t, a, ctx, "held at A", "HOLD task")
	if !waitFor(10*time.Second, func() bool { return fake.count("HOLD task") == 1 }) {
		t.Fatal("the child never called the model")
	}
	atA, atB := httpClient(t, a.url, a.token, true), httpClient(t, b.url, b.token, true)
	handle := atB.callTool(ctx, "send_message", map[string]any{"subagent_id": h.AgentID, "message": "task at B", "wait_seconds": 300})
	id, _ := handle["taskId"].(string)
	if handle["resultType"] != "task" || id == "" {
		t.Fatalf("send_message at B answered %v; want a task handle", handle)
	}
	if got := atA.result(ctx, "tasks/get", map[string]any{"taskId": id}); got["status"] != "working" {
		t.Fatalf("tasks/get at A of B's task = %v; want working", got)
	}
	// The child's transcript as a resource at B, which does not hold it:
	// from the database, with the owner's status and the turn in flight.
	read := atB.result(ctx, "resources/read", map[string]any{"uri": "subagent://agents/" + h.AgentID + "/transcript"})
	if b, _ := json.Marshal(read); !strings.Contains(string(b), "HOLD task") || !strings.Contains(string(b), `\"status\":\"running\"`) {
		t.Fatalf("resources/read of the transcript at B = %s; want the turn held at A, running", b)
	}
	release.open()
	for name, c := range map[string]*rawClient{"B": atB, "A": atA} {
		done := pollTask(t, ctx, c, id, 30*time.Second)
		if b, _ := json.Marshal(done["result"]); done["status"] != "completed" || !strings.Contains(string(b), "answer to task at B") {
			t.Fatalf("tasks/get at %s = %v; want completed with A's answer to the message", name, done)
		}
	}
}
