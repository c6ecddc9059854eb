package edge

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// idleManager is a Manager the cancel tests never reach.
type idleManager struct{}

func (idleManager) AwaitTurn(string, string, func(string)) manager.Turn { panic("not reached") }
func (idleManager) Interrupt(seam.ParentRef, string) error              { panic("not reached") }
func (idleManager) AwaitSent(*manager.Sent, func(string)) manager.Turn  { panic("not reached") }
func (idleManager) FollowupAwaited(context.Context, seam.ParentRef, string, string, *seam.Budget) (*manager.Sent, error) {
	panic("not reached")
}
func (idleManager) LastOutcome(context.Context, string) (seam.Result, error) {
	return seam.Result{}, seam.ErrNotFound
}

// callServer is an MCP server whose subagent tool hands the context of
// each call to calls, says it started a child when startChild (and its
// request is in l's task mode), and then waits for its context to end or
// release to close.
func callServer(t *testing.T, l *TaskLayer, startChild bool) (ms *server.MCPServer, calls <-chan context.Context, release chan struct{}) {
	t.Helper()
	ch := make(chan context.Context, 4)
	release = make(chan struct{})
	ms = server.NewMCPServer("test", "1", server.WithToolCapabilities(false))
	s := &Server{opts: Options{Tasks: l}}
	ms.AddTool(mcp.NewTool("subagent"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if p := s.taskMode(req); startChild && p != nil && p.claim() {
			p.started <- started{childID: "child-1", msgID: "msg-1"}
		}
		ch <- ctx
		select {
		case <-ctx.Done():
			return mcp.NewToolResultError("the call was cancelled"), nil
		case <-release:
			return mcp.NewToolResultText("done"), nil
		}
	})
	return ms, ch, release
}

func cancelLayer(t *testing.T) *TaskLayer {
	t.Helper()
	l := NewTaskLayer(TaskOptions{Store: memstore.New(), Manager: idleManager{}})
	t.Cleanup(l.Close)
	return l
}

func taskCall(id int) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": map[string]any{
		"name": "subagent", "arguments": map[string]any{},
		"_meta": map[string]any{
			"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
			"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}},
		},
	}})
	return b
}

func cancelled(id int) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": map[string]any{"requestId": id}})
	return b
}

func responseID(t *testing.T, m mcp.JSONRPCMessage) (id any, result map[string]any) {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		ID     any            `json:"id"`
		Result map[string]any `json:"result"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v.ID, v.Result
}

func nextCall(t *testing.T, calls <-chan context.Context) context.Context {
	t.Helper()
	select {
	case ctx := <-calls:
		return ctx
	case <-time.After(10 * time.Second):
		t.Fatal("the call never reached the tool")
		return nil
	}
}

// A notifications/cancelled naming a call already answered with a task
// handle does not reach the call: the task's child goes on, and only
// tasks/cancel cancels it.
func TestCancelOfAnsweredCallIsANoOp(t *testing.T) {
	l := cancelLayer(t)
	ms, calls, release := callServer(t, l, true)
	defer close(release)
	ctx := WithPrincipal(context.Background(), "local")

	resp := l.Handle(ctx, taskCall(7), ms.HandleMessage)
	id, res := responseID(t, resp)
	if id != float64(7) || res["resultType"] != "task" {
		t.Fatalf("the call answered id %v, %v; want a task handle for id 7", id, res)
	}
	callCtx := nextCall(t, calls)

	if got := l.Handle(ctx, cancelled(7), ms.HandleMessage); got != nil {
		t.Fatalf("a notification was answered: %#v", got)
	}
	// A cancel takes effect synchronously (the server cancels the call's
	// context before it returns), so this is the whole effect.
	if err := callCtx.Err(); err != nil {
		t.Fatalf("a cancel of the answered request id reached the task's call: its context ended (%v)", err)
	}
}

// Before its handle is answered, a call stays the client's to cancel: a
// notifications/cancelled naming its id ends it, and its answer carries
// the client's id.
func TestCancelOfUnansweredCallEndsIt(t *testing.T) {
	l := cancelLayer(t)
	ms, calls, release := callServer(t, l, false)
	defer close(release)
	ctx := WithPrincipal(context.Background(), "local")

	answered := make(chan mcp.JSONRPCMessage, 1)
	go func() { answered <- l.Handle(ctx, taskCall(8), ms.HandleMessage) }()
	callCtx := nextCall(t, calls)
	l.Handle(ctx, cancelled(8), ms.HandleMessage)
	select {
	case <-callCtx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a cancel of the unanswered call did not end it")
	}
	select {
	case resp := <-answered:
		if id, _ := responseID(t, resp); id != float64(8) {
			t.Fatalf("the call answered id %v, want the client's 8", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled call was never answered")
	}
}
