package edge

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/managertest"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
	"github.com/mcp-subagent/mcp-subagent/tasks/taskstore"
)

// Calls at an instance that does not hold the child (two managers on one
// shared store, the MCP server at B, the child resident at A): an MCP
// task awaiting a forwarded follow-up, and the transcript resource.

// atB is instance B of two sharing one store: its MCP server, behind a
// tasks layer, and principal local's session s1 there. The child held at
// A (its first turn holding) is childID; pa releases it.
type atB struct {
	ms      *server.MCPServer
	layer   *TaskLayer
	ctx     context.Context // session s1 of principal local
	notes   chan mcp.JSONRPCNotification
	childID string
	pa      *managertest.Hold
}

func twoInstances(t *testing.T) *atB {
	t.Helper()
	st := memstore.New()
	open := func(owner, label string) (*manager.Manager, *managertest.Hold) {
		m := manager.New(manager.Options{Store: st, OwnerID: owner, LeaseTTL: time.Minute})
		p := managertest.NewHold(label)
		if err := m.Register(p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = m.Close(ctx)
		})
		return m, p
	}
	a, pa := open("server-a", "A")
	b, _ := open("server-b", "B")
	l := NewTaskLayer(TaskOptions{Store: memstore.New(), Manager: b})
	t.Cleanup(l.Close)
	ts, err := New(b, Options{Roots: []string{t.TempDir()}, NoWorkingDirRoot: true, Tasks: l})
	if err != nil {
		t.Fatal(err)
	}
	ms := server.NewMCPServer("test", "1", server.WithResourceCapabilities(true, false), server.WithHooks(ts.Hooks()))
	ts.Register(ms)
	ctx := context.Background()
	st1, err := a.StartContinuable(ctx, "hold", seam.StartRequest{Label: "l", Prompt: "hold: first", Parent: ts.rootCaller(ctx, "local")}, false)
	if err != nil {
		t.Fatal(err)
	}
	<-pa.Holding
	// The held turn's start is committed (A's writer lingers over it, and
	// holding says only that the driver began it).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		es, err := st.Events(ctx, st1.ChildID)
		if err == nil && slices.ContainsFunc(es, func(e agent.Event) bool { return e.Message != nil && e.Message.Content == "hold: first" }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the held turn's start is not in the store after 30s")
		}
	}
	se := &testSession{id: "s1", notes: make(chan mcp.JSONRPCNotification, 16)}
	if err := ms.RegisterSession(ctx, se); err != nil {
		t.Fatal(err)
	}
	x := &atB{ms: ms, layer: l, ctx: WithPrincipal(ms.WithContext(ctx, se), "local"), notes: se.notes, childID: st1.ChildID, pa: pa}
	x.rpc(t, "initialize", map[string]any{"protocolVersion": mcp.LATEST_LEGACY_PROTOCOL_VERSION, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"}})
	return x
}

// rpc sends one request through B's tasks layer and MCP server; its
// result as JSON.
func (x *atB) rpc(t *testing.T, method string, params map[string]any) map[string]any {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	resp := x.layer.Handle(x.ctx, b, x.ms.HandleMessage)
	if e, ok := resp.(mcp.JSONRPCError); ok {
		t.Fatalf("%s: %+v", method, e.Error)
	}
	raw, _ := json.Marshal(resp)
	var env struct {
		Result map[string]any `json:"result"`
	}
	if err := json.Unmarshal(raw, &env); err != nil || env.Result == nil {
		t.Fatalf("%s: answer %s", method, raw)
	}
	return env.Result
}

var declaredMeta = map[string]any{"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}}

// A task-augmented send_message at B, for a child resident at A, becomes
// a task whose result is A's answer to that message (not the outcome of
// the turn A ran before, nor a wait that ran out).
func TestATaskAtAnotherInstanceAwaitsTheForwardedFollowup(t *testing.T) {
	x := twoInstances(t)
	handle := x.rpc(t, "tools/call", map[string]any{"name": "send_message", "_meta": declaredMeta,
		"arguments": map[string]any{"subagent_id": x.childID, "message": "second", "wait_seconds": 600}})
	id, _ := handle["taskId"].(string)
	if handle["resultType"] != "task" || id == "" {
		t.Fatalf("the call at B answered %v; want a task handle", handle)
	}
	close(x.pa.Release)
	var got map[string]any
	deadline := time.Now().Add(30 * time.Second)
	for tick := time.NewTicker(20 * time.Millisecond); ; <-tick.C {
		got = x.rpc(t, "tasks/get", map[string]any{"taskId": id, "_meta": declaredMeta})
		if got["status"] != string(taskstore.StatusWorking) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task at B still works after 30s: %v", got)
		}
	}
	b, _ := json.Marshal(got["result"])
	if got["status"] != string(taskstore.StatusCompleted) || !strings.Contains(string(b), `"text":"A done: second"`) {
		t.Fatalf("the task at B = %v; want completed with A's answer to the follow-up", got)
	}
}

// The transcript resource of a child resident at A reads at B with A's
// status, is listed there, and a subscription at B is updated when A's
// turn ends.
func TestTheTranscriptResourceAtAnotherInstance(t *testing.T) {
	x := twoInstances(t)
	uri := TranscriptURI(x.childID)
	list := x.rpc(t, "resources/list", map[string]any{})
	if b, _ := json.Marshal(list); !strings.Contains(string(b), uri) {
		t.Errorf("resources/list at B = %s; want %s listed", b, uri)
	}
	read := x.rpc(t, "resources/read", map[string]any{"uri": uri})
	b, _ := json.Marshal(read)
	for _, want := range []string{`hold: first`, `\"status\":\"running\"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("resources/read at B = %s; want %s in it", b, want)
		}
	}
	x.rpc(t, "resources/subscribe", map[string]any{"uri": uri})
	close(x.pa.Release)
	select {
	case n := <-x.notes:
		if n.Method != mcp.MethodNotificationResourceUpdated || n.Params.AdditionalFields["uri"] != uri {
			t.Fatalf("notification %+v; want an update of %s", n, uri)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no update at B of the transcript A's turn ended within 30s")
	}
}
