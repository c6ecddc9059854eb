package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/tasks/taskstore"
)

// serialStore is a shared task store whose calls take turns, as
// memstore's do (its read lock waits for a write), and which counts the
// calls waiting for their turn.
type serialStore struct {
	taskstore.Store
	mu      sync.Mutex
	waiters atomic.Int32
}

func (s *serialStore) turn() (done func()) {
	s.waiters.Add(1)
	s.mu.Lock()
	s.waiters.Add(-1)
	return s.mu.Unlock
}

func (s *serialStore) PutTask(ctx context.Context, r taskstore.Record) error {
	defer s.turn()()
	return s.Store.PutTask(ctx, r)
}

func (s *serialStore) Task(ctx context.Context, id string) (taskstore.Record, error) {
	defer s.turn()()
	return s.Store.Task(ctx, id)
}

func (s *serialStore) UpdateTask(ctx context.Context, id string, fn func(taskstore.Record) (taskstore.Record, error)) (taskstore.Record, error) {
	defer s.turn()()
	return s.Store.UpdateTask(ctx, id, fn)
}

func (s *serialStore) DeleteTask(ctx context.Context, id string) error {
	defer s.turn()()
	return s.Store.DeleteTask(ctx, id)
}

func (s *serialStore) Tasks(ctx context.Context) ([]taskstore.Record, error) {
	defer s.turn()()
	return s.Store.Tasks(ctx)
}

// stepStore is one instance's handle on the shared store, which a test
// stops in the middle of that instance's next write: pauseNext's hook runs
// where the write has read the record and not yet written it, inside
// UpdateTask's function (so within the store's transaction: the other
// instance's calls wait) or before a plain PutTask (after the read of a
// read-then-write, holding nothing). inTx is whether the hook runs inside
// a transaction.
type stepStore struct {
	taskstore.Store
	mu    sync.Mutex
	pause func()
	inTx  atomic.Bool
}

func (s *stepStore) pauseNext(hook func()) {
	s.mu.Lock()
	s.pause = hook
	s.mu.Unlock()
}

func (s *stepStore) paused() {
	s.mu.Lock()
	hook := s.pause
	s.pause = nil
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
}

func (s *stepStore) PutTask(ctx context.Context, r taskstore.Record) error {
	s.paused()
	return s.Store.PutTask(ctx, r)
}

func (s *stepStore) UpdateTask(ctx context.Context, id string, fn func(taskstore.Record) (taskstore.Record, error)) (taskstore.Record, error) {
	return s.Store.UpdateTask(ctx, id, func(r taskstore.Record) (taskstore.Record, error) {
		s.inTx.Store(true)
		s.paused()
		s.inTx.Store(false)
		return fn(r)
	})
}

// cancelRace is a task run at instance i1 and cancelled at i2, both on one
// memstore: i1 beats only when the test calls its heartbeat, and the
// child's turn ends on its own at end, or aborted by an interrupt.
type cancelRace struct {
	l1, l2 *TaskLayer
	w1, w2 *stepStore
	st     *serialStore
	mgr    *interruptManager
	ms     *server.MCPServer
	end    func()
	id     string
}

var raceCtx = WithPrincipal(context.Background(), "local")

func newCancelRace(t *testing.T) *cancelRace { t.Helper(); return newCancelRaceAt(t, time.Now) }

// newCancelRaceAt is newCancelRace with i2's clock.
func newCancelRaceAt(t *testing.T, i2now func() time.Time) *cancelRace {
	t.Helper()
	st := &serialStore{Store: memstore.New()}
	r := &cancelRace{st: st, w1: &stepStore{Store: st}, w2: &stepStore{Store: st}, mgr: &interruptManager{interrupted: make(chan struct{})}}
	r.l1 = NewTaskLayer(TaskOptions{Store: r.w1, Manager: r.mgr, Instance: "i1", Heartbeat: time.Hour})
	t.Cleanup(r.l1.Close)
	r.l2 = NewTaskLayer(TaskOptions{Store: r.w2, Manager: idleManager{}, Instance: "i2", Heartbeat: time.Hour, Now: i2now})
	t.Cleanup(r.l2.Close)
	finish := make(chan struct{})
	var once sync.Once
	r.end = func() { once.Do(func() { close(finish) }) }
	t.Cleanup(r.end) // before l1's Close, which waits for the call
	r.ms = server.NewMCPServer("test", "1", server.WithToolCapabilities(false))
	s := &Server{opts: Options{Tasks: r.l1}}
	r.ms.AddTool(mcp.NewTool("subagent"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if p := s.taskMode(req); p != nil && p.claim() {
			p.started <- started{childID: "child-1", msgID: "msg-1"}
		}
		select {
		case <-finish:
			return mcp.NewToolResultText("done"), nil
		case <-r.mgr.interrupted:
			return mcp.NewToolResultError("aborted: interrupted"), nil
		}
	})
	_, handle := responseID(t, r.l1.Handle(raceCtx, taskCall(1), r.ms.HandleMessage))
	r.id, _ = handle["taskId"].(string)
	if handle["resultType"] != "task" || r.id == "" {
		t.Fatalf("the call at i1 answered %v; want a task handle", handle)
	}
	return r
}

// cancelAtI2 sends tasks/cancel at i2 in a goroutine; the channel gets its
// answer.
func (r *cancelRace) cancelAtI2() <-chan mcp.JSONRPCMessage {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tasks/cancel", "params": map[string]any{"taskId": r.id, "_meta": declaredMeta}})
	out := make(chan mcp.JSONRPCMessage, 1)
	go func() { out <- r.l2.Handle(raceCtx, b, r.ms.HandleMessage) }()
	return out
}

// runningAtI1 reports whether i1 still runs the task (its settle has not
// finished).
func (r *cancelRace) runningAtI1() bool {
	r.l1.mu.Lock()
	defer r.l1.mu.Unlock()
	return r.l1.live[r.id] != nil
}

// waitsBehind reports whether a call waits on the store while w's write
// is paused inside its transaction.
func (r *cancelRace) waitsBehind(w *stepStore) bool {
	return w.inTx.Load() && r.st.waiters.Load() > 0
}

// waitUntil waits for cond.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
	}
}

func (r *cancelRace) stored(t *testing.T) shownTask {
	t.Helper()
	rec, err := r.st.Task(context.Background(), r.id)
	if err != nil {
		t.Fatal(err)
	}
	return shownTask(rec)
}

// shownTask is a record whose failure message shows its result as text.
type shownTask taskstore.Record

func (r shownTask) String() string {
	return fmt.Sprintf("{status %s, message %q, cancel requested %v, result %s}", r.Status, r.StatusMessage, r.CancelRequested, r.Result)
}

// A tasks/cancel at i2 racing i1's writes of the task it runs, each
// interleaving forced: the store orders the request and i1's writes, and
// every instance then reads the outcome that order gives. A result stored
// first stands; a request stored first cancels the task (its result
// kept); a request is never lost to a beat, and the task never reads
// working once its call has answered, nor once another instance resolved
// it. The read-then-write code before UpdateTask failed all but the first
// case: a request stored first was overwritten by the completed record; a
// request read before the result and written after left the task working
// with no call; a request stored between a beat's read and its write was
// erased by the beat; a task resolved at i2 was written working again by
// i1's beat, then completed.
func TestACancelAtAnotherInstanceRacingTheRunnersWrites(t *testing.T) {
	t.Run("a result stored first stands", func(t *testing.T) {
		r := newCancelRace(t)
		r.end()
		waitUntil(t, "i1 to settle the task", func() bool { return !r.runningAtI1() })
		<-r.cancelAtI2()
		if rec := r.stored(t); rec.Status != taskstore.StatusCompleted || rec.CancelRequested {
			t.Fatalf("a cancel at i2 after i1 stored the result: the task = %v; want completed, no request stored", rec)
		}
	})

	t.Run("a request stored first cancels the task", func(t *testing.T) {
		r := newCancelRace(t)
		<-r.cancelAtI2()
		if rec := r.stored(t); !rec.CancelRequested || rec.Status != taskstore.StatusWorking {
			t.Fatalf("after tasks/cancel at i2 the task = %v; want working with the request stored", rec)
		}
		r.end() // the turn ends on its own before i1 beats (and hears of the request)
		waitUntil(t, "i1 to settle the task", func() bool { return !r.runningAtI1() })
		rec := r.stored(t)
		if rec.Status != taskstore.StatusCancelled || !rec.CancelRequested || !bytes.Contains(rec.Result, []byte(`"done"`)) {
			t.Fatalf("i1 settled a task whose cancel was stored first as %v; want cancelled, the request and the call's result kept", rec)
		}
	})

	t.Run("a request read before the result and written after", func(t *testing.T) {
		r := newCancelRace(t)
		paused, resume := make(chan struct{}), make(chan struct{})
		r.w2.pauseNext(func() { close(paused); <-resume })
		answer := r.cancelAtI2()
		<-paused // i2 read the task working
		r.end()
		// i1 stores its result, unless the store makes it wait for i2's
		// write.
		waitUntil(t, "i1 to settle the task or wait on the store", func() bool { return !r.runningAtI1() || r.waitsBehind(r.w2) })
		close(resume)
		<-answer
		waitUntil(t, "i1 to settle the task", func() bool { return !r.runningAtI1() })
		rec := r.stored(t)
		if !rec.Status.Terminal() {
			t.Fatalf("the task reads %v after its call answered; want it settled (a working task nobody runs loses its result)", rec)
		}
		if (rec.Status == taskstore.StatusCancelled) != rec.CancelRequested || !bytes.Contains(rec.Result, []byte(`"done"`)) {
			t.Fatalf("the task = %v; want cancelled with its request stored, or completed without one, the call's result kept", rec)
		}
	})

	t.Run("a request stored between a beat's read and its write", func(t *testing.T) {
		r := newCancelRace(t)
		paused, resume := make(chan struct{}), make(chan struct{})
		r.w1.pauseNext(func() { close(paused); <-resume })
		beaten := make(chan struct{})
		go func() { defer close(beaten); r.l1.heartbeat(r.id) }()
		<-paused // i1's beat read the task
		answer := r.cancelAtI2()
		// i2 stores its request, unless the store makes it wait for the
		// beat's write.
		var answered mcp.JSONRPCMessage
		waitUntil(t, "i2's cancel to be stored or wait on the store", func() bool {
			select {
			case answered = <-answer:
				return true
			default:
				return r.waitsBehind(r.w1)
			}
		})
		close(resume)
		<-beaten
		if answered == nil {
			<-answer
		}
		if rec := r.stored(t); !rec.CancelRequested {
			t.Fatalf("after i1's beat and i2's cancel the task = %v; want the request kept", rec)
		}
		r.l1.heartbeat(r.id) // the next beat hears of it and interrupts the turn
		select {
		case <-r.mgr.interrupted:
		default:
			t.Fatal("i1's next beat did not interrupt the child's turn: the cancel request was lost")
		}
		waitUntil(t, "i1 to settle the task", func() bool { return !r.runningAtI1() })
		if rec := r.stored(t); rec.Status != taskstore.StatusCancelled {
			t.Fatalf("the task = %v; want cancelled", rec)
		}
	})
	t.Run("a task another instance resolved stays settled", func(t *testing.T) {
		// i2's clock is hours ahead: i1's beat looks stale there, as
		// when i1 is paused past three Heartbeats.
		r := newCancelRaceAt(t, func() time.Time { return time.Now().Add(4 * time.Hour) })
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": map[string]any{"taskId": r.id, "_meta": declaredMeta}})
		if _, got := responseID(t, r.l2.Handle(raceCtx, b, r.ms.HandleMessage)); got["status"] != string(taskstore.StatusFailed) {
			t.Fatalf("tasks/get at i2 of a task whose runner's beat is stale = %v; want it resolved (failed)", got)
		}
		r.l1.heartbeat(r.id) // i1 wakes: its beat finds the task settled
		if rec := r.stored(t); rec.Status != taskstore.StatusFailed {
			t.Fatalf("after i1's beat the task resolved at i2 = %v; want it still failed, never working again", rec)
		}
		// Said once: i1 beats the settled task no more.
		touched := false
		r.w1.pauseNext(func() { touched = true })
		r.l1.heartbeat(r.id)
		r.w1.pauseNext(nil)
		if touched {
			t.Error("i1 beat again, in the store, a task it had found settled by another instance")
		}
		r.end()
		waitUntil(t, "i1 to settle the task", func() bool { return !r.runningAtI1() })
		if rec := r.stored(t); rec.Status != taskstore.StatusFailed {
			t.Fatalf("after i1's call answered the task resolved at i2 = %v; want it still failed (a settled task never changes)", rec)
		}
	})
}
