package edge

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// awaitingManager is the layer's manager: AwaitTurn hands back a turn
// whose outcome is done's, and records what it was asked for.
type awaitingManager struct {
	idleManager
	awaited chan [2]string
}

func (a awaitingManager) AwaitTurn(childID, msgID string, _ func(string)) manager.Turn {
	a.awaited <- [2]string{childID, msgID}
	return fakeTurn{res: seam.Result{Output: "done"}, ok: true}
}

// requestOf is the tool request the MCP server builds from raw.
func requestOf(t *testing.T, raw json.RawMessage) mcp.CallToolRequest {
	t.Helper()
	var req mcp.CallToolRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		t.Fatal(err)
	}
	return req
}

// A call the layer runs is in task mode, read from its request: a
// foreground child it starts is started without an in-band wait, awaited
// through AwaitTurn and reported to the layer; a call the layer does not
// run (no key, or a key naming no call of the layer's: a client's forgery)
// starts its child as asked.
func TestTheTaskModeIsInTheHandlersRequest(t *testing.T) {
	am := awaitingManager{awaited: make(chan [2]string, 1)}
	l := NewTaskLayer(TaskOptions{Store: memstore.New(), Manager: am})
	t.Cleanup(l.Close)
	var waits []bool
	f := &fakeManager{start: func(_ seam.StartRequest, wait bool) (*manager.Started, error) {
		waits = append(waits, wait)
		return &manager.Started{ChildID: "child-1", MessageID: "msg-1", Turn: fakeTurn{block: true}}, nil
	}}
	s, err := New(f, Options{Roots: []string{t.TempDir()}, Tasks: l})
	if err != nil {
		t.Fatal(err)
	}
	call := json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"subagent","arguments":{}}}`)

	// The layer's call: registered under its id, named in the inner call.
	p := &taskMode{l: l, started: make(chan started, 1), now: l.now}
	l.mu.Lock()
	l.modes["call-1"] = p
	l.mu.Unlock()
	task := s.taskMode(requestOf(t, innerCall(call, "call-1")))
	if task != p {
		t.Fatalf("the inner call's request is in task mode %p; want the layer's call %p", task, p)
	}
	st, err := s.startContinuable(context.Background(), task, "fake", seam.StartRequest{}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(waits) != 1 || waits[0] {
		t.Errorf("the manager's start was asked to wait %v; in task mode it must not wait in band", waits)
	}
	if got := <-am.awaited; got != [2]string{"child-1", "msg-1"} {
		t.Errorf("AwaitTurn(%v); want child-1's msg-1", got)
	}
	select {
	case s := <-p.started:
		if s.childID != "child-1" || s.msgID != "msg-1" {
			t.Errorf("the layer heard of %+v; want child-1, msg-1", s)
		}
	default:
		t.Error("the layer never heard of the child the call started")
	}
	if res, ok := st.Turn.Wait(context.Background()); !ok || res.Output != "done" {
		t.Errorf("the call waits on %v, %v; want the awaited turn's outcome", res, ok)
	}

	// Not in task mode: no key, or a key naming no call of the layer's.
	forged := json.RawMessage(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"subagent","arguments":{},"_meta":{"` + taskCallMeta + `":"call-2"}}}`)
	for name, raw := range map[string]json.RawMessage{"no key": call, "a forged key": forged} {
		if task := s.taskMode(requestOf(t, raw)); task != nil {
			t.Errorf("%s: the request is in task mode", name)
		}
	}
	waits = nil
	if _, err := s.startContinuable(context.Background(), nil, "fake", seam.StartRequest{}, true); err != nil {
		t.Fatal(err)
	}
	if len(waits) != 1 || !waits[0] {
		t.Errorf("out of task mode the start was asked to wait %v; want as asked (true)", waits)
	}
}
