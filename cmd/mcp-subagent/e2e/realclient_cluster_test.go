//go:build realcli

package e2e

import (
	"context"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeanthropic"
)

// Two serve --http instances on one PostgreSQL database, each the server
// of a real Claude Code over streamable HTTP, as a team running a shared
// service registers it. The first session, at A, starts two background
// children and ends while both are held. The second session, at B:
//   - lists them, running at A;
//   - sends one a follow-up and waits: B forwards it to A, the owner,
//     which runs it after the first turn; the answer reaches B's model
//     in the send_message result, once (no settlement notice repeats it,
//     as on one instance);
//   - waits in list_agents while the other child finishes at A: its
//     settlement notice, which went to the principal when the first
//     session had ended, reaches B's model exactly once.
func TestRealClaudeAtTwoInstancesOfOneStore(t *testing.T) {
	bin := findCLI(t, "claude")
	ctx := testContext(t, realCLITimeout)
	url := pgURL(t)
	child := newChildModel(t)
	child.Hold("fwd")
	child.Hold("heard")
	a, b := start(t, child.Server, clusterOpts(url)), start(t, child.Server, clusterOpts(url))

	var ids [2]atomic.Value // the children's ids, once the first session has them
	idOf := func(i int) string { s, _ := ids[i].Load().(string); return s }
	// The forwarded child's first turn ends only once B has admitted the
	// follow-up for A: a child whose turn ended with nothing queued is
	// released by its owner, and a send after that resumes it where it
	// is sent.
	releaseOnceForwarded := func() {
		go func() {
			waitFor(time.Minute, func() bool {
				return strings.Contains(b.stderr.String(), "follow-up admitted for the child's owner")
			})
			child.Release("fwd")
		}()
	}
	const first, second = "SESSION-A-5521", "SESSION-B-5521"
	api := fakeanthropic.New(bySession(map[string]fakeanthropic.Handler{
		first: claudeParent([]claudeStep{
			{tool: "mcp__subagent__subagent", input: map[string]any{"description": "forwarded", "prompt": child.Task("fwd"), "run_in_background": true}},
			{tool: "mcp__subagent__subagent", input: map[string]any{"description": "heard", "prompt": child.Task("heard"), "run_in_background": true}},
		}, "Started them."),
		second: claudeParent([]claudeStep{
			{tool: "mcp__subagent__list_agents", input: map[string]any{}},
			{tool: "mcp__subagent__send_message", inputOf: func(fakeanthropic.Request) any {
				return map[string]any{"subagent_id": idOf(0), "message": child.Task("two"), "wait_seconds": 90}
			}, onCall: releaseOnceForwarded},
			{tool: "mcp__subagent__list_agents", input: map[string]any{"wait_seconds": 90}, onCall: func() { child.Release("heard") }},
		}, "done"),
	}))
	t.Cleanup(api.Close)

	// One Claude Code home per instance: each registers its instance's
	// address with the principal's bearer token.
	homeAt := func(s *instance) *claudeHome {
		h := newClaudeHome(t, bin, api)
		h.registerHTTP(t, s.url, s.token)
		return h
	}
	ha, hb := homeAt(a), homeAt(b)
	ws := realDir(t)

	run1 := ha.run(t, ws, first+": start two background tasks and end")
	run1.wait(t, ctx)
	rs1 := claudeReceived(api, first)
	var started []received
	for _, r := range rs1 {
		if r.tool == "subagent" {
			started = append(started, r)
		}
	}
	if len(started) != 2 || started[0].agentID() == "" || started[1].agentID() == "" {
		t.Fatalf("the background calls at A did not hand back two handles:\n%s\n%s", quote(rs1), run1.diag())
	}
	fwd, heard := started[0].agentID(), started[1].agentID()
	ids[0].Store(fwd)
	ids[1].Store(heard)

	run2 := hb.run(t, ws, second+": continue the earlier tasks")
	run2.wait(t, ctx)
	rs2 := claudeReceived(api, second)
	diag := func() string { return quote(rs2) + run2.diag() + "\n--- A:\n" + tail(a.stderr.String(), 4000) }

	var lists []received
	for _, r := range rs2 {
		if r.tool == "list_agents" {
			lists = append(lists, r)
		}
	}
	if len(lists) != 2 {
		t.Fatalf("the model at B received %d list_agents results, want 2:\n%s", len(lists), diag())
	}
	for _, id := range []string{fwd, heard} {
		if row := rowIn(lists[0], id); row == nil || row["status"] != "running" {
			t.Errorf("B's first list_agents row of %s = %v; want it listed, running at A", id, row)
		}
	}
	sent := resultOf(t, rs2, "send_message", "the follow-up at B", run2)
	if !strings.Contains(sent.text, child.Closing("two")) {
		t.Errorf("send_message at B did not hand back the follow-up's answer %q:\n%s", child.Closing("two"), diag())
	}
	if sent.obj["route"] != "forwarded" {
		t.Errorf("send_message at B: route %v, want forwarded (to A, the owner)", sent.obj["route"])
	}
	if strings.Contains(b.stderr.String(), `"msg":"subagent resumed"`) {
		t.Errorf("a child of A's ran at B")
	}
	settled := func(id string) (n int) {
		for _, r := range rs2 {
			for _, x := range r.notices() {
				if x.SourceKind == "subagent-settled" && x.AgentID == id {
					n++
				}
			}
		}
		return n
	}
	if n := settled(fwd); n != 0 {
		t.Errorf("the model at B received %d settlement notices of %s, whose answer it had in band; want none, as on one instance:\n%s", n, fwd, diag())
	}
	if _, err := settlementOf(rs2, heard, child.Closing("heard"), "completed"); err != nil {
		t.Errorf("at B: %v\n%s", err, diag())
	} else if n := settled(heard); n != 1 {
		t.Errorf("the settlement notice of %s reached the model at B %d times, want once:\n%s", heard, n, diag())
	}
}

// registerHTTP is the recipe for a server reached over HTTP:
//
//	claude mcp add -s user --transport http subagent URL --header "Authorization: Bearer TOKEN"
//
// with the same pre-approving permission as register.
func (h *claudeHome) registerHTTP(t *testing.T, url, token string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.bin, "mcp", "add", "-s", "user", "--transport", "http", "subagent", url, "--header", "Authorization: Bearer "+token)
	cmd.Env, cmd.Dir = h.env(), h.home
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("claude mcp add --transport http: %v\n%s", err, out)
	}
	h.allowOurTools(t)
}

// rowIn is agentID's row in a list_agents result, or nil.
func rowIn(r received, agentID string) map[string]any {
	agents, _ := r.obj["agents"].([]any)
	for _, a := range agents {
		if row, _ := a.(map[string]any); row["id"] == agentID {
			return row
		}
	}
	return nil
}
