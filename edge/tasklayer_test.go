package edge_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/edge"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
	"github.com/mcp-subagent/mcp-subagent/tasks/taskstore"
)

// fakeManager answers LastOutcome from a table; AwaitTurn and Interrupt
// are not reached by these tests (the call path is tested end to end in
// cmd/mcp-subagent).
type fakeManager struct {
	mu       sync.Mutex
	outcomes map[string]seam.Result
}

func (f *fakeManager) AwaitTurn(string, string, func(string)) manager.Turn { panic("not reached") }
func (f *fakeManager) Interrupt(seam.ParentRef, string) error              { panic("not reached") }
func (f *fakeManager) AwaitSent(*manager.Sent, func(string)) manager.Turn  { panic("not reached") }
func (f *fakeManager) FollowupAwaited(context.Context, seam.ParentRef, string, string, *seam.Budget) (*manager.Sent, error) {
	panic("not reached")
}
func (f *fakeManager) LastOutcome(_ context.Context, id string) (seam.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.outcomes[id]
	if !ok {
		return seam.Result{}, seam.ErrNotFound
	}
	return r, nil
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func newLayer(t *testing.T, m edge.TaskManager) (*edge.TaskLayer, *persist.Store, *clock) {
	t.Helper()
	st, err := persist.Open(t.TempDir(), persist.Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	c := &clock{now: t0}
	l := edge.NewTaskLayer(edge.TaskOptions{Store: st, Manager: m, TTL: time.Minute, PollInterval: time.Second, Now: c.Now})
	t.Cleanup(l.Close)
	return l, st, c
}

func rpc(method string, params map[string]any, declare bool) json.RawMessage {
	meta := map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
	if declare {
		meta["io.modelcontextprotocol/clientCapabilities"] = map[string]any{"extensions": map[string]any{edge.TasksExtension: map[string]any{}}}
	}
	params["_meta"] = meta
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
	return b
}

// answer decodes what the layer answered.
func answer(t *testing.T, m mcp.JSONRPCMessage) (map[string]any, *taskstore.RPCError) {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var a struct {
		Result map[string]any      `json:"result"`
		Error  *taskstore.RPCError `json:"error"`
	}
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatal(err)
	}
	return a.Result, a.Error
}

func noNext(t *testing.T) edge.Next {
	return func(context.Context, json.RawMessage) mcp.JSONRPCMessage {
		t.Fatal("a task request reached the MCP server")
		return nil
	}
}

// Without the declaration (or without a root principal) a call reaches
// the MCP server byte for byte, and its answer comes back untouched.
func TestUndeclaredPassesThrough(t *testing.T) {
	l, _, _ := newLayer(t, &fakeManager{})
	cases := map[string]struct {
		ctx context.Context
		raw json.RawMessage
	}{
		"undeclared subagent call":       {edge.WithPrincipal(context.Background(), "local"), rpc("tools/call", map[string]any{"name": "subagent", "arguments": map[string]any{"prompt": "x"}}, false)},
		"declared, no root principal":    {context.Background(), rpc("tools/call", map[string]any{"name": "subagent"}, true)},
		"declared, another tool":         {edge.WithPrincipal(context.Background(), "local"), rpc("tools/call", map[string]any{"name": "list_agents"}, true)},
		"server/discover":                {edge.WithPrincipal(context.Background(), "local"), rpc("server/discover", map[string]any{}, true)},
		"a notification":                 {context.Background(), json.RawMessage(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`)},
		"bytes that are not JSON-RPC":    {context.Background(), json.RawMessage(`not json`)},
		"extension not an object":        {edge.WithPrincipal(context.Background(), "local"), json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"subagent","_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":true}}}}}`)},
		"spacing kept exactly, verbatim": {edge.WithPrincipal(context.Background(), "local"), json.RawMessage(`{ "jsonrpc" : "2.0", "id" : 1, "method" : "tools/call", "params" : { "name" : "subagent" } }`)},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			want := &mcp.JSONRPCResponse{JSONRPC: "2.0", Result: "sentinel"}
			var got json.RawMessage
			resp := l.Handle(c.ctx, c.raw, func(_ context.Context, raw json.RawMessage) mcp.JSONRPCMessage {
				got = raw
				return want
			})
			if string(got) != string(c.raw) {
				t.Fatalf("next got %s, want the message verbatim %s", got, c.raw)
			}
			if resp != want {
				t.Fatalf("the answer was not next's, untouched: %#v", resp)
			}
		})
	}
}

// A settled task expires TTL after it settled: until then tasks/get
// answers it, with ttlMs counted from createdAt to the expiry; after, it
// is -32602 "Task has expired" and the record is gone. Recover deletes
// expired records too.
func TestExpiry(t *testing.T) {
	ctx := edge.WithPrincipal(context.Background(), "alice")
	l, st, c := newLayer(t, &fakeManager{})
	settled := t0.Add(10 * time.Second)
	rec := taskstore.Record{ID: "task-e", Principal: "alice", Tool: "subagent", AgentID: "agent-e", Status: taskstore.StatusCompleted,
		CreatedAt: t0, UpdatedAt: settled, SettledAt: settled, TTL: time.Minute, Result: json.RawMessage(`{"content":[],"isError":false}`)}
	if err := st.PutTask(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	c.Set(settled.Add(59 * time.Second))
	res, rerr := answer(t, l.Handle(ctx, rpc("tasks/get", map[string]any{"taskId": "task-e"}, true), noNext(t)))
	if rerr != nil || res["status"] != "completed" || res["ttlMs"] != float64(70000) || res["pollIntervalMs"] != float64(1000) {
		t.Fatalf("before expiry: %v, %v; want completed with ttlMs 70000 (created to expiry) and pollIntervalMs 1000", res, rerr)
	}
	c.Set(settled.Add(time.Minute))
	_, rerr = answer(t, l.Handle(ctx, rpc("tasks/get", map[string]any{"taskId": "task-e"}, true), noNext(t)))
	if rerr == nil || rerr.Code != -32602 || rerr.Message != "Failed to retrieve task: Task has expired" {
		t.Fatalf("at expiry: %v, want -32602 Task has expired", rerr)
	}
	if _, err := st.Task(context.Background(), "task-e"); !errors.Is(err, taskstore.ErrNotFound) {
		t.Fatalf("an expired task is still stored: %v", err)
	}
	// Recover sweeps expired records; a live one stays.
	old := rec
	old.ID = "task-old"
	fresh := rec
	fresh.ID, fresh.SettledAt = "task-fresh", c.Now()
	for _, r := range []taskstore.Record{old, fresh} {
		if err := st.PutTask(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Task(context.Background(), "task-old"); !errors.Is(err, taskstore.ErrNotFound) {
		t.Fatalf("Recover left an expired task: %v", err)
	}
	if _, err := st.Task(context.Background(), "task-fresh"); err != nil {
		t.Fatalf("Recover removed a task that has not expired: %v", err)
	}
}

// Recover resolves the working tasks a stop left: completed with the
// foreground result rebuilt from the child's stored outcome when its last
// turn completed, else failed with the diagnostic; another principal
// still cannot see them.
func TestRecoverResolvesWorking(t *testing.T) {
	fm := &fakeManager{outcomes: map[string]seam.Result{
		"agent-done": {StopReason: agent.StopCompleted, Output: "the answer"},
		"agent-cut":  {StopReason: agent.StopAborted, Diagnostic: "the turn was cut by a restart"},
	}}
	l, st, _ := newLayer(t, fm)
	for _, id := range []string{"done", "cut", "gone"} {
		r := taskstore.Record{ID: "task-" + id, Principal: "local", Tool: "subagent", AgentID: "agent-" + id, Status: taskstore.StatusWorking, CreatedAt: t0, UpdatedAt: t0, TTL: time.Hour}
		if err := st.PutTask(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := edge.WithPrincipal(context.Background(), "local")
	get := func(id string) (map[string]any, *taskstore.RPCError) {
		return answer(t, l.Handle(ctx, rpc("tasks/get", map[string]any{"taskId": id}, true), noNext(t)))
	}
	done, _ := get("task-done")
	res, _ := done["result"].(map[string]any)
	sc, _ := res["structuredContent"].(map[string]any)
	if done["status"] != "completed" || res["resultType"] != "complete" || sc["kind"] != "foreground" || sc["output"] != "the answer" || sc["agent_id"] != "agent-done" {
		t.Fatalf("a task whose child's turn had completed = %v", done)
	}
	for _, id := range []string{"task-cut", "task-gone"} {
		got, _ := get(id)
		e, _ := got["error"].(map[string]any)
		if got["status"] != "failed" || e["code"] != float64(-32603) || got["statusMessage"] == nil {
			t.Fatalf("%s = %v, want failed with the diagnostic", id, got)
		}
	}
	cut, _ := get("task-cut")
	if msg, _ := cut["statusMessage"].(string); !containsAll(msg, "agent-cut", "aborted", "cut by a restart") {
		t.Fatalf("the failed task's diagnostic %q does not say what happened", msg)
	}
	other := edge.WithPrincipal(context.Background(), "mallory")
	_, rerr := answer(t, l.Handle(other, rpc("tasks/get", map[string]any{"taskId": "task-done"}, true), noNext(t)))
	if rerr == nil || rerr.Code != -32602 || rerr.Message != "Failed to retrieve task: Task not found" {
		t.Fatalf("another principal's tasks/get = %v, want -32602 Task not found", rerr)
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// After Recover, a settled task nobody asks about is deleted by the
// periodic sweep once it expires, without waiting for the next start; a
// working one and one not yet expired stay; Close ends the sweep.
func TestSweepDeletesExpiredTasks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		l := edge.NewTaskLayer(edge.TaskOptions{Store: st, Manager: &fakeManager{}, TTL: time.Minute, SweepEvery: 10 * time.Second})
		now := time.Now()
		for _, r := range []taskstore.Record{
			{ID: "task-soon", Status: taskstore.StatusCompleted, SettledAt: now, TTL: 15 * time.Second},
			{ID: "task-later", Status: taskstore.StatusCompleted, SettledAt: now, TTL: time.Hour},
			{ID: "task-working", Status: taskstore.StatusWorking, TTL: time.Second},
		} {
			r.Principal, r.Tool, r.AgentID, r.CreatedAt, r.UpdatedAt = "local", "subagent", "agent-x", now, now
			if err := st.PutTask(context.Background(), r); err != nil {
				t.Fatal(err)
			}
		}
		// task-working resolves (failed: the fake knows no outcome) and
		// then has its own TTL to live from now.
		if err := l.Recover(context.Background()); err != nil {
			t.Fatal(err)
		}
		stored := func(id string) bool { _, err := st.Task(context.Background(), id); return err == nil }
		time.Sleep(11 * time.Second) // one sweep: task-soon has 4 s left
		synctest.Wait()
		if !stored("task-soon") || !stored("task-later") {
			t.Fatal("a sweep deleted a task before it expired")
		}
		time.Sleep(10 * time.Second) // the next sweep: task-soon expired 6 s ago
		synctest.Wait()
		if stored("task-soon") {
			t.Error("the sweep left an expired task")
		}
		if !stored("task-later") {
			t.Error("the sweep deleted a task that has not expired")
		}
		l.Close()
	})
}
