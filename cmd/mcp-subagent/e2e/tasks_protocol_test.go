//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// wantHandle checks a tools/call answer is the extension's task handle
// (CreateTaskResult, flat) and returns its task id.
func wantHandle(t *testing.T, m map[string]any, agentIDNot string) string {
	t.Helper()
	id, _ := m["taskId"].(string)
	if m["resultType"] != "task" || m["status"] != "working" || !regexp.MustCompile(`^task-[0-9a-f]{32}$`).MatchString(id) {
		t.Fatalf("not a task handle (resultType task, status working, an unguessable taskId): %v", m)
	}
	if agentIDNot != "" && strings.Contains(id, agentIDNot) {
		t.Fatalf("the task id %s carries the agent id", id)
	}
	for _, k := range []string{"createdAt", "lastUpdatedAt"} {
		s, _ := m[k].(string)
		if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
			t.Fatalf("%s = %v is not an ISO 8601 time: %v", k, m[k], err)
		}
	}
	for _, k := range []string{"ttlMs", "pollIntervalMs"} {
		if n, ok := m[k].(float64); !ok || n <= 0 {
			t.Fatalf("%s = %v, want a positive number of milliseconds", k, m[k])
		}
	}
	if msg, _ := m["statusMessage"].(string); msg == "" {
		t.Fatalf("the handle has no statusMessage (the child's latest step): %v", m)
	}
	return id
}

// agentOf is the agent id a task's statusMessage ("started agent-…")
// names.
func agentOf(m map[string]any) string {
	msg, _ := m["statusMessage"].(string)
	return regexp.MustCompile(`agent-[0-9a-z]+`).FindString(msg)
}

func structuredOf(t *testing.T, result any) map[string]any {
	t.Helper()
	r, _ := result.(map[string]any)
	sc, _ := r["structuredContent"].(map[string]any)
	if sc == nil {
		t.Fatalf("the result has no structuredContent: %v", result)
	}
	return sc
}

// TestTasksProtocol drives the extension over stdio (through the daemon)
// and HTTP with a raw client of the 2026-07-28 protocol: the capability
// is advertised; a call without the declaration is answered as today; a
// declaring subagent call gets a task handle once its child is committed,
// tasks/get answers working then completed with the foreground result
// (an error result stays an error result inside completed), tasks/update
// is acknowledged, tasks/cancel interrupts the child, and unknown or
// undeclared task requests get the spec's errors.
func TestTasksProtocol(t *testing.T) {
	transports(t, func(t *testing.T, httpT bool) {
		ctx, child, srv, c := taskSetup(t, httpT)

		disc := c.result(ctx, "server/discover", nil)
		caps, _ := disc["capabilities"].(map[string]any)
		ext, _ := caps["extensions"].(map[string]any)
		if _, ok := ext[tasksExt]; !ok {
			t.Fatalf("server/discover does not advertise %s: %v", tasksExt, disc)
		}

		// Without the declaration: the foreground answer, no task.
		plain := srv.client(false, "")
		r := plain.callTool(ctx, "subagent", subagentArgs(child, "plain"))
		if r["resultType"] == "task" || r["taskId"] != nil {
			t.Fatalf("a call that did not declare the extension got a task: %v", r)
		}
		if sc := structuredOf(t, r); sc["kind"] != "foreground" || !strings.Contains(fmt.Sprint(sc["output"]), child.Closing("plain")) {
			t.Fatalf("undeclared call: %v", sc)
		}
		if _, rerr := plain.do(ctx, "tasks/get", map[string]any{"taskId": "task-x"}); rerr == nil || rerr.Code != -32021 {
			t.Fatalf("tasks/get without the declaration = %v, want -32021 (missing required client capability)", rerr)
		}

		// A declaring call: the handle while the child is held.
		child.Hold("bg")
		h := c.callTool(ctx, "subagent", subagentArgs(child, "bg"))
		agent := agentOf(h)
		id := wantHandle(t, h, agent)
		if agent == "" {
			t.Fatalf("the handle's statusMessage names no agent: %v", h)
		}
		<-child.Arrived("bg")
		g := c.result(ctx, "tasks/get", map[string]any{"taskId": id})
		if g["status"] != "working" || g["resultType"] != "complete" || g["taskId"] != id || g["result"] != nil {
			t.Fatalf("tasks/get of a running task = %v, want status working, resultType complete, no result", g)
		}
		if u := c.result(ctx, "tasks/update", map[string]any{"taskId": id, "inputResponses": map[string]any{}}); u["resultType"] != "complete" {
			t.Fatalf("tasks/update = %v, want an empty acknowledgement", u)
		}
		// The parent's session goes on meanwhile.
		if l := c.callTool(ctx, "list_agents", map[string]any{}); !strings.Contains(fmt.Sprint(l), agent) {
			t.Fatalf("list_agents during the task lacks %s: %v", agent, l)
		}
		child.Release("bg")
		done := pollTask(t, ctx, c, id, 30*time.Second)
		if done["status"] != "completed" {
			t.Fatalf("the task did not complete: %v\n%s", done, srv.diag())
		}
		sc := structuredOf(t, done["result"])
		if sc["kind"] != "foreground" || sc["agent_id"] != agent || sc["stop_reason"] != "completed" || !strings.Contains(fmt.Sprint(sc["output"]), child.Closing("bg")) {
			t.Fatalf("the completed task's result is not the foreground result: %v", sc)
		}

		// An error result stays an error result, inside completed: a
		// child stopped by interrupt_agent (not by tasks/cancel) ends
		// aborted, an isError result.
		child.Hold("over")
		ho := c.callTool(ctx, "subagent", subagentArgs(child, "over"))
		fid := wantHandle(t, ho, "")
		<-child.Arrived("over")
		c.callTool(ctx, "interrupt_agent", map[string]any{"agent_id": agentOf(ho)})
		failed := pollTask(t, ctx, c, fid, 30*time.Second)
		fr, _ := failed["result"].(map[string]any)
		if failed["status"] != "completed" || fr["isError"] != true || structuredOf(t, fr)["stop_reason"] != "aborted" {
			t.Fatalf("a task whose child was interrupted = %v, want completed with an isError result (stop_reason aborted)", failed)
		}

		// A call that starts no child (a refused argument) is answered as
		// it would be: an error result, no task.
		refused := c.callTool(ctx, "subagent", map[string]any{"description": "refused", "prompt": "x", "provider": "spawn", "cwd": "/nonexistent-dir"})
		if refused["resultType"] == "task" || refused["isError"] != true {
			t.Fatalf("a refused call = %v, want an error result and no task", refused)
		}

		// Unknown ids: the spec's -32602.
		for _, m := range []string{"tasks/get", "tasks/cancel", "tasks/update"} {
			if _, rerr := c.do(ctx, m, map[string]any{"taskId": "task-00000000000000000000000000000000"}); rerr == nil || rerr.Code != -32602 {
				t.Fatalf("%s of an unknown task = %v, want -32602", m, rerr)
			}
		}

		// tasks/cancel interrupts the child's turn: cancelled, and the
		// child is not running.
		child.Hold("stop")
		h2 := c.callTool(ctx, "subagent", subagentArgs(child, "stop"))
		id2 := wantHandle(t, h2, "")
		agent2 := agentOf(h2)
		<-child.Arrived("stop")
		if a := c.result(ctx, "tasks/cancel", map[string]any{"taskId": id2}); a["resultType"] != "complete" {
			t.Fatalf("tasks/cancel = %v", a)
		}
		cancelled := pollTask(t, ctx, c, id2, 30*time.Second)
		if cancelled["status"] != "cancelled" || cancelled["result"] != nil {
			t.Fatalf("the cancelled task = %v, want status cancelled (no result)", cancelled)
		}
		other := srv.client(false, "")
		rows := other.callTool(ctx, "list_agents", map[string]any{})
		if row := listedRow(rows, agent2); row == nil || row["status"] == "running" {
			t.Fatalf("after tasks/cancel the child %s is %v, want listed and not running", agent2, row)
		}
	})
}

// taskSetup is a test's context, child model, server on one transport
// and a declaring client of it.
func taskSetup(t *testing.T, httpT bool) (context.Context, *childModel, *taskServer, *rawClient) {
	ctx := testCtx(t)
	child := newChildModel(t)
	srv := newTaskServer(t, httpT, child, "")
	return ctx, child, srv, srv.client(true, "")
}

// listedRow is agentID's row in a list_agents result.
func listedRow(res map[string]any, agentID string) map[string]any {
	sc, _ := res["structuredContent"].(map[string]any)
	agents, _ := sc["agents"].([]any)
	for _, a := range agents {
		if row, _ := a.(map[string]any); row["id"] == agentID {
			return row
		}
	}
	return nil
}

// TestTasksSurviveSessionAndKill: a task outlives the session that
// created it (another session of the principal reads its result), and a
// kill -9 of the server: after the restart, tasks/get answers from the
// store, and a task whose child the kill stopped is failed with the
// diagnostic, never working forever.
func TestTasksSurviveSessionAndKill(t *testing.T) {
	transports(t, func(t *testing.T, httpT bool) {
		ctx, child, srv, a := taskSetup(t, httpT)
		child.Hold("outlive")
		id := wantHandle(t, a.callTool(ctx, "subagent", subagentArgs(child, "outlive")), "")
		<-child.Arrived("outlive")
		a.close() // the session ends; the task and its child go on
		child.Release("outlive")
		b := srv.client(true, "")
		done := pollTask(t, ctx, b, id, 30*time.Second)
		if done["status"] != "completed" || !strings.Contains(fmt.Sprint(structuredOf(t, done["result"])["output"]), child.Closing("outlive")) {
			t.Fatalf("the task, read from another session = %v\n%s", done, srv.diag())
		}

		child.Hold("killed")
		id2 := wantHandle(t, b.callTool(ctx, "subagent", subagentArgs(child, "killed")), "")
		<-child.Arrived("killed")
		srv.kill9()
		srv.start()
		c := srv.client(true, "")
		// The completed task is still there, from the store.
		if again := c.result(ctx, "tasks/get", map[string]any{"taskId": id}); again["status"] != "completed" {
			t.Fatalf("after kill -9 the completed task = %v", again)
		}
		got := c.result(ctx, "tasks/get", map[string]any{"taskId": id2})
		errObj, _ := got["error"].(map[string]any)
		if got["status"] != "failed" || errObj == nil || !strings.Contains(fmt.Sprint(got["statusMessage"]), "server stopped") {
			t.Fatalf("after kill -9 the task whose child it stopped = %v, want failed with the diagnostic\n%s", got, srv.diag())
		}
	})
}

// TestTasksForeignPrincipal: over HTTP with two tokens, another
// principal's task id is not found (the spec's -32602), for reading and
// for cancelling; its child is not touched.
func TestTasksForeignPrincipal(t *testing.T) {
	ctx := testCtx(t)
	child := newChildModel(t)
	cfg := `{"http":{"tokens":[{"principal":"alice","token":"alice-token-0123456789"},{"principal":"bob","token":"bob-token-0123456789ab"}]}}`
	srv := newTaskServer(t, true, child, cfg)
	alice := srv.client(true, "alice-token-0123456789")
	bob := srv.client(true, "bob-token-0123456789ab")
	child.Hold("alice")
	id := wantHandle(t, alice.callTool(ctx, "subagent", subagentArgs(child, "alice")), "")
	<-child.Arrived("alice")
	for _, m := range []string{"tasks/get", "tasks/cancel", "tasks/update"} {
		_, rerr := bob.do(ctx, m, map[string]any{"taskId": id})
		if rerr == nil || rerr.Code != -32602 || !strings.Contains(rerr.Message, "not found") {
			t.Fatalf("bob's %s of alice's task = %v, want -32602 not found", m, rerr)
		}
	}
	child.Release("alice")
	done := pollTask(t, ctx, alice, id, 30*time.Second)
	if done["status"] != "completed" {
		t.Fatalf("alice's task after bob's cancel = %v, want completed (bob's cancel touched nothing)", done)
	}
	b, _ := json.Marshal(done)
	if !strings.Contains(string(b), child.Closing("alice")) {
		t.Fatalf("alice's task result lacks the closing message: %s", b)
	}
}

// TestTasksSendMessage: a declaring send_message that waits is a task
// too, whose result is the waited send's answer (message id, route and
// the turn's outcome); one that does not wait is answered at once, as
// always.
func TestTasksSendMessage(t *testing.T) {
	transports(t, func(t *testing.T, httpT bool) {
		ctx, child, srv, c := taskSetup(t, httpT)
		bg := subagentArgs(child, "first")
		bg["run_in_background"] = true
		started := c.callTool(ctx, "subagent", bg)
		agent, _ := structuredOf(t, started)["agent_id"].(string)
		if started["resultType"] == "task" || agent == "" {
			t.Fatalf("a background start = %v, want its handle at once (no task: nothing to wait for)", started)
		}
		quick := c.callTool(ctx, "send_message", map[string]any{"subagent_id": agent, "message": child.Task("quick")})
		if quick["resultType"] == "task" {
			t.Fatalf("a send without a wait became a task: %v", quick)
		}
		child.Hold("waited")
		h := c.callTool(ctx, "send_message", map[string]any{"subagent_id": agent, "message": child.Task("waited"), "wait_seconds": 120})
		id := wantHandle(t, h, agent)
		<-child.Arrived("waited")
		if g := c.result(ctx, "tasks/get", map[string]any{"taskId": id}); g["status"] != "working" {
			t.Fatalf("tasks/get while the turn is held = %v", g)
		}
		child.Release("waited")
		done := pollTask(t, ctx, c, id, 30*time.Second)
		if done["status"] != "completed" {
			t.Fatalf("the send's task = %v\n%s", done, srv.diag())
		}
		sc := structuredOf(t, done["result"])
		out, _ := sc["outcome"].(map[string]any)
		if sc["agent_id"] != agent || sc["message_id"] == nil || out["stop_reason"] != "completed" || !strings.Contains(fmt.Sprint(out["output"]), child.Closing("waited")) {
			t.Fatalf("the send's task result is not the waited send's answer: %v", sc)
		}
	})
}

// TestTasksNoDaemon: `serve --no-daemon` serves the extension on stdio
// in process, as a daemon session does.
func TestTasksNoDaemon(t *testing.T) {
	ctx := testCtx(t)
	child := newChildModel(t)
	c := stdioClient(t, serverEnv(child.Server, nil), t.TempDir(), realDir(t), true, "--no-daemon")
	child.Hold("inproc")
	id := wantHandle(t, c.callTool(ctx, "subagent", subagentArgs(child, "inproc")), "")
	<-child.Arrived("inproc")
	child.Release("inproc")
	done := pollTask(t, ctx, c, id, 30*time.Second)
	if done["status"] != "completed" || !strings.Contains(fmt.Sprint(structuredOf(t, done["result"])["output"]), child.Closing("inproc")) {
		t.Fatalf("--no-daemon task = %v", done)
	}
}
