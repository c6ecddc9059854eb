package edge

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
	"github.com/mcp-subagent/mcp-subagent/tasks/taskstore"
)

// Two instances' task layers on one shared store: a task whose call runs
// at i1 is not resolved by i2 (neither its Recover at start nor a
// tasks/get there) while i1's heartbeat is fresh; it answers from the
// store as working, then with i1's result once i1 stores it. A working
// task whose runner's beat is stale is resolved, as one a stop left.
func TestATaskRunAtAnotherInstanceIsNotResolvedThere(t *testing.T) {
	st := memstore.New()
	l1 := NewTaskLayer(TaskOptions{Store: st, Manager: idleManager{}, Instance: "i1", Heartbeat: 20 * time.Millisecond})
	t.Cleanup(l1.Close)
	l2 := NewTaskLayer(TaskOptions{Store: st, Manager: idleManager{}, Instance: "i2", Heartbeat: time.Hour})
	t.Cleanup(l2.Close)
	ms, calls, release := callServer(t, l1, true)
	var once sync.Once
	done := func() { once.Do(func() { close(release) }) }
	t.Cleanup(done) // before l1's Close, which waits for the call
	ctx := WithPrincipal(context.Background(), "local")

	_, handle := responseID(t, l1.Handle(ctx, taskCall(1), ms.HandleMessage))
	id, _ := handle["taskId"].(string)
	if handle["resultType"] != "task" || id == "" {
		t.Fatalf("the call at i1 answered %v; want a task handle", handle)
	}
	nextCall(t, calls)
	first, err := st.Task(ctx, id)
	if err != nil || first.Runner != "i1" || first.Beat.IsZero() {
		t.Fatalf("the stored task = %+v, %v; want it run by i1 with a beat", first, err)
	}
	// i1's heartbeat moves the beat on while its call waits.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if rec, err := st.Task(ctx, id); err == nil && rec.Beat.After(first.Beat) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("i1 never rewrote the task's beat within 30s")
		}
	}

	get := func(l *TaskLayer, id string) map[string]any {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": map[string]any{"taskId": id, "_meta": declaredMeta}})
		_, res := responseID(t, l.Handle(ctx, b, ms.HandleMessage))
		return res
	}
	if err := l2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if got := get(l2, id); got["status"] != string(taskstore.StatusWorking) {
		t.Fatalf("tasks/get at i2 of i1's running task = %v; want working", got)
	}
	done()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		got := get(l2, id)
		if got["status"] == string(taskstore.StatusCompleted) {
			break
		}
		if got["status"] != string(taskstore.StatusWorking) || time.Now().After(deadline) {
			t.Fatalf("tasks/get at i2 = %v; want working, then completed with i1's result", got)
		}
	}

	// A runner whose beat is stale (it died): resolved at i2.
	now := time.Now()
	stale := taskstore.Record{ID: "task-stale", Principal: "local", Tool: "send_message", AgentID: "child-9", Status: taskstore.StatusWorking,
		CreatedAt: now, UpdatedAt: now, TTL: time.Hour, Runner: "i9", Beat: now.Add(-4 * time.Hour)}
	if err := st.PutTask(ctx, stale); err != nil {
		t.Fatal(err)
	}
	if got := get(l2, stale.ID); got["status"] != string(taskstore.StatusFailed) {
		t.Fatalf("tasks/get at i2 of a task whose runner's beat is stale = %v; want it resolved (failed)", got)
	}
}

// interruptManager records the Interrupt a task cancel makes, as the
// manager's interrupt of the child's turn.
type interruptManager struct {
	idleManager
	once        sync.Once
	interrupted chan struct{}
	mu          sync.Mutex
	caller      seam.ParentRef
	child       string
}

func (m *interruptManager) Interrupt(caller seam.ParentRef, childID string) error {
	m.mu.Lock()
	m.caller, m.child = caller, childID
	m.mu.Unlock()
	m.once.Do(func() { close(m.interrupted) })
	return nil
}

// Two instances' task layers on one shared store: tasks/cancel at i2 of a
// task whose call runs at i1 is recorded in the task's record, and i1
// honours it at its next beat as a tasks/cancel of its own: the child's
// turn is interrupted, and the task ends cancelled with the call's
// aborted result.
func TestATaskCancelledAtAnotherInstanceIsCancelledAtItsRunner(t *testing.T) {
	st := memstore.New()
	mgr := &interruptManager{interrupted: make(chan struct{})}
	l1 := NewTaskLayer(TaskOptions{Store: st, Manager: mgr, Instance: "i1", Heartbeat: 10 * time.Millisecond})
	t.Cleanup(l1.Close)
	l2 := NewTaskLayer(TaskOptions{Store: st, Manager: idleManager{}, Instance: "i2", Heartbeat: time.Hour})
	t.Cleanup(l2.Close)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) }) // before l1's Close, which waits for the call
	ms := server.NewMCPServer("test", "1", server.WithToolCapabilities(false))
	s := &Server{opts: Options{Tasks: l1}}
	ms.AddTool(mcp.NewTool("subagent"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if p := s.taskMode(req); p != nil && p.claim() {
			p.started <- started{childID: "child-1", msgID: "msg-1"}
		}
		select { // the child's turn, until an interrupt aborts it
		case <-stop:
			return mcp.NewToolResultText("never interrupted"), nil
		case <-mgr.interrupted:
			return mcp.NewToolResultError("aborted: interrupted"), nil
		}
	})
	ctx := WithPrincipal(context.Background(), "local")
	_, handle := responseID(t, l1.Handle(ctx, taskCall(1), ms.HandleMessage))
	id, _ := handle["taskId"].(string)
	if handle["resultType"] != "task" || id == "" {
		t.Fatalf("the call at i1 answered %v; want a task handle", handle)
	}
	methodAs := func(ctx context.Context, l *TaskLayer, m string) map[string]any {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 2, "method": m, "params": map[string]any{"taskId": id, "_meta": declaredMeta}})
		_, res := responseID(t, l.Handle(ctx, b, ms.HandleMessage))
		return res
	}
	method := func(l *TaskLayer, m string) map[string]any { t.Helper(); return methodAs(ctx, l, m) }

	// Another principal's cancel at i2 requests nothing of i1: the task is
	// not theirs, as if unknown.
	methodAs(WithPrincipal(context.Background(), "other"), l2, "tasks/cancel")
	if rec, err := st.Task(ctx, id); err != nil || rec.CancelRequested {
		t.Fatalf("after another principal's tasks/cancel at i2 the stored task = %+v, %v; want no cancel requested", rec, err)
	}

	if got := method(l2, "tasks/cancel"); got["resultType"] != "complete" {
		t.Fatalf("tasks/cancel at i2 = %v; want it acknowledged", got)
	}
	select {
	case <-mgr.interrupted:
	case <-time.After(30 * time.Second):
		t.Fatal("tasks/cancel at i2 never interrupted the child's turn at i1 (its runner) within 30s")
	}
	mgr.mu.Lock()
	caller, child := mgr.caller, mgr.child
	mgr.mu.Unlock()
	if caller.Principal != "local" || child != "child-1" {
		t.Fatalf("i1 interrupted %q as %+v; want child-1 as the task's principal", child, caller)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		got := method(l2, "tasks/get")
		if got["status"] == string(taskstore.StatusCancelled) {
			break
		}
		if got["status"] != string(taskstore.StatusWorking) || time.Now().After(deadline) {
			t.Fatalf("tasks/get at i2 = %v; want working, then cancelled", got)
		}
	}
	rec, err := st.Task(ctx, id)
	if err != nil || rec.Status != taskstore.StatusCancelled || !isErrorResult(rec.Result) || !rec.CancelRequested {
		t.Fatalf("the stored task = %+v, %v; want cancelled with the aborted call's result and the request kept", rec, err)
	}
}
