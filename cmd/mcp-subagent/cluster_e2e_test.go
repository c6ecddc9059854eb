//go:build e2e

package main

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/persist/pgstore"
)

// clusterLease is the instances' cluster.lease_seconds in the cluster test:
// short, so a takeover after a kill -9 comes within the test's patience.
const clusterLease = 2 * time.Second

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
	var mu sync.Mutex
	asked := map[string]int{} // model requests by their last user text
	fake := fakeopenai.New(func(_ int, req fakeopenai.Request) fakeopenai.Reply {
		lu := req.LastUserText()
		mu.Lock()
		asked[lu]++
		mu.Unlock()
		switch lu {
		case "HOLD one":
			release.wait(2 * time.Minute)
		case "HOLD kill":
			release2.wait(2 * time.Minute)
		}
		return fakeopenai.Reply{Text: "answer to " + lu}
	})
	defer fake.Close()
	defer release.open()
	defer release2.open()
	askedFor := func(text string) int {
		mu.Lock()
		defer mu.Unlock()
		return asked[text]
	}
	cfg := `{"cluster":{"lease_seconds":` + strings.TrimSuffix(clusterLease.String(), "s") + `},` +
		`"http":{"tokens":[{"principal":"alice","token_env":"ALICE_TOKEN"}]}}`
	newInstance := func() *instance {
		return start(t, fake, serverOpts{http: true, token: aliceTok, config: cfg, env: []string{"ALICE_TOKEN=" + aliceTok},
			args: []string{"--store", url}})
	}
	a, b, c := newInstance(), newInstance(), newInstance()
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
	// Its turn's start is committed (A's writer commits events nobody
	// waits for a moment later; a kill before that loses them, and the
	// prompt, still queued, would run again): read from the database.
	st, err := pgstore.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !waitFor(10*time.Second, func() bool {
		events, err := st.Events(ctx, h2.AgentID)
		return err == nil && slices.ContainsFunc(events, func(e agent.Event) bool {
			return e.Message != nil && e.Message.Content == "HOLD kill"
		})
	}) {
		t.Fatal("the turn's start never reached the database")
	}
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

// linesWith are the lines of log that mention s.
func linesWith(log, s string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
