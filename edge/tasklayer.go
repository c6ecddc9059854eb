package edge

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
	"github.com/mcp-subagent/mcp-subagent/tasks/taskstore"
)

// TasksExtension is the Tasks extension's identifier (SEP-2663).
const TasksExtension = "io.modelcontextprotocol/tasks"

// Defaults of TaskOptions.
const (
	DefaultTaskTTL          = time.Hour
	DefaultTaskPollInterval = 2 * time.Second
	DefaultTaskSweepEvery   = 10 * time.Minute
	DefaultTaskHeartbeat    = 10 * time.Second
)

// Error codes the extension uses beside JSON-RPC's own.
const (
	// CodeMissingCapability is -32021, Missing Required Client Capability.
	CodeMissingCapability = -32021
)

// Manager is what the layer asks of the manager.
type TaskManager interface {
	AwaitTurn(childID, msgID string, step func(string)) manager.Turn
	AwaitSent(sent *manager.Sent, step func(string)) manager.Turn
	FollowupAwaited(ctx context.Context, caller seam.ParentRef, childID, content string, budget *seam.Budget) (*manager.Sent, error)
	Interrupt(caller seam.ParentRef, childID string) error
	LastOutcome(ctx context.Context, childID string) (seam.Result, error)
}

// TaskOptions configures a TaskLayer. Zero values mean the defaults given.
type TaskOptions struct {
	Store   taskstore.Store // required
	Manager TaskManager     // required
	// TTL is how long a settled task is kept; zero: DefaultTaskTTL.
	TTL time.Duration
	// PollInterval is the polling interval suggested to clients; zero:
	// DefaultTaskPollInterval.
	PollInterval time.Duration
	// SweepEvery is how often, once Recover ran, expired tasks are
	// deleted: a settled task nobody asks about again would otherwise stay
	// stored until the next start. Zero: DefaultTaskSweepEvery.
	SweepEvery time.Duration
	// Instance names this instance when the store is shared by several
	// (PostgreSQL): a task records the instance whose call waits on it,
	// which rewrites the record's beat every Heartbeat while it works, and
	// another instance leaves such a task working (tasks/get answers it
	// from the store, Recover skips it) until its beat is three Heartbeats
	// old. Empty: the store is this instance's alone, and a working task
	// no call here runs was left by a stop, resolved at once.
	Instance string
	// Heartbeat is the beat's period; zero: DefaultTaskHeartbeat.
	Heartbeat time.Duration
	// Now is the clock (tests inject one); nil: time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Next is the MCP server's handling of one message (mcp-go's
// MCPServer.HandleMessage): what the layer hands everything else to. An
// alias, so TaskLayer.Handle is an Intercept as it stands.
type Next = func(ctx context.Context, raw json.RawMessage) mcp.JSONRPCMessage

// TaskLayer is the Tasks extension in front of the MCP server: it sees every
// request first, answers tasks/get, tasks/update and tasks/cancel, turns a
// declaring client's subagent or send_message call into a task, and hands
// everything else on unchanged.
type TaskLayer struct {
	store taskstore.Store
	mgr   TaskManager
	ttl   time.Duration
	poll  time.Duration
	every time.Duration // the expiry sweep's period
	inst  string        // TaskOptions.Instance
	beat  time.Duration // TaskOptions.Heartbeat
	now   func() time.Time
	log   *slog.Logger

	ctx      context.Context // ends at Close: the calls of live tasks give up their wait
	cancel   context.CancelFunc
	wg       sync.WaitGroup // one per call the layer runs, and the sweep
	sweeping sync.Once

	mu   sync.Mutex
	live map[string]*liveTask // working tasks whose call runs in this process
	// calls are the task-eligible calls not answered yet, by the client's
	// request id in its session: a notifications/cancelled naming one
	// ends it. Once a call is answered (with a task handle or its
	// result) it is no longer here, and a later cancel of its id reaches
	// nothing: a task is cancelled only through tasks/cancel.
	calls map[callKey]*inflight
	// modes are the task-eligible calls running through the MCP server,
	// by the layer's own request id, which the inner call names in its
	// _meta (taskCallMeta): how its handler learns it is in task mode.
	modes map[string]*taskMode
}

// callKey is a client's request id within its session.
type callKey struct{ session, id string }

// inflight is an unanswered task-eligible call: cancel ends it.
type inflight struct{ cancel context.CancelFunc }

// liveTask is a task whose call runs here: its record, kept current in
// memory, and the call's progress.
type liveTask struct {
	rec             taskstore.Record
	call            *taskMode
	cancelRequested bool
	// settledElsewhere: another instance resolved the stored task (this
	// instance's beat was stale): beats stop, the stored task stands.
	settledElsewhere bool
}

// New builds a layer over a store and a manager.
func NewTaskLayer(o TaskOptions) *TaskLayer {
	l := &TaskLayer{store: o.Store, mgr: o.Manager, ttl: o.TTL, poll: o.PollInterval, every: o.SweepEvery, now: o.Now, log: o.Logger, live: map[string]*liveTask{}, calls: map[callKey]*inflight{}, modes: map[string]*taskMode{},
		inst: o.Instance, beat: o.Heartbeat}
	if l.beat <= 0 {
		l.beat = DefaultTaskHeartbeat
	}
	if l.every <= 0 {
		l.every = DefaultTaskSweepEvery
	}
	if l.ttl <= 0 {
		l.ttl = DefaultTaskTTL
	}
	if l.poll <= 0 {
		l.poll = DefaultTaskPollInterval
	}
	if l.now == nil {
		l.now = time.Now
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	return l
}

// Capabilities is the extension as server capabilities advertise it
// (mcp-go's server.WithExtensions): no settings, an empty object.
func TaskCapabilities() map[string]any { return map[string]any{TasksExtension: map[string]any{}} }

// Close stops the layer: the calls of live tasks stop waiting (their
// children go on, and their tasks stay working in the store for the next
// start to resolve), and it returns once they have.
func (l *TaskLayer) Close() {
	l.cancel()
	l.wg.Wait()
}

// request is what the layer reads of a JSON-RPC message.
type request struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Name      string                     `json:"name"`
		TaskID    string                     `json:"taskId"`
		RequestID json.RawMessage            `json:"requestId"` // notifications/cancelled
		Meta      map[string]json.RawMessage `json:"_meta"`
	} `json:"params"`
}

func (r request) isRequest() bool { return len(r.ID) > 0 && !bytes.Equal(r.ID, []byte("null")) }

func (r request) id() mcp.RequestId {
	var v any
	_ = json.Unmarshal(r.ID, &v)
	return mcp.NewRequestId(v)
}

// declares reports whether the request declares the extension in its
// per-request client capabilities, as the extension requires of each
// request a task may answer (an earlier declaration does not count).
func (r request) declares() bool {
	var caps struct {
		Extensions map[string]json.RawMessage `json:"extensions"`
	}
	if json.Unmarshal(r.Params.Meta["io.modelcontextprotocol/clientCapabilities"], &caps) != nil {
		return false
	}
	v, ok := caps.Extensions[TasksExtension]
	return ok && bytes.HasPrefix(bytes.TrimSpace(v), []byte("{"))
}

// taskable reports whether the request is a tool call the layer may
// answer with a task.
func (r request) taskable() bool {
	return r.Method == string(mcp.MethodToolsCall) && (r.Params.Name == "subagent" || r.Params.Name == "send_message") && r.declares()
}

func isTaskMethod(m string) bool {
	return m == "tasks/get" || m == "tasks/update" || m == "tasks/cancel"
}

// Handle is the layer in front of next: a task method or a task-eligible
// call it answers itself; any other message goes to next unchanged.
func (l *TaskLayer) Handle(ctx context.Context, raw json.RawMessage, next Next) mcp.JSONRPCMessage {
	var r request
	if json.Unmarshal(raw, &r) != nil {
		return next(ctx, raw)
	}
	if !r.isRequest() {
		if r.Method == string(mcp.MethodNotificationCancelled) {
			l.cancelCall(ctx, r.Params.RequestID)
		}
		return next(ctx, raw)
	}
	switch {
	case isTaskMethod(r.Method):
		return l.taskMethod(ctx, r)
	case r.taskable() && Principal(ctx) != "":
		return l.call(ctx, r, raw, next)
	}
	return next(ctx, raw)
}

// HTTP is the layer in front of mcp-go's streamable HTTP handler: a POST
// the layer answers is answered with one JSON body; any other request
// reaches next as it came. handle is the MCP server's HandleMessage, which
// the layer calls for a task's call itself.
func (l *TaskLayer) HTTP(next http.Handler, handle Next) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, hr *http.Request) {
		if hr.Method != http.MethodPost || hr.Body == nil {
			next.ServeHTTP(w, hr)
			return
		}
		body, err := io.ReadAll(hr.Body)
		if err != nil {
			http.Error(w, "Bad Request: reading the request body failed", http.StatusBadRequest)
			return
		}
		hr.Body = io.NopCloser(bytes.NewReader(body))
		var r request
		if json.Unmarshal(body, &r) != nil || !r.isRequest() || !(isTaskMethod(r.Method) || r.taskable()) {
			next.ServeHTTP(w, hr)
			return
		}
		resp := l.Handle(hr.Context(), body, handle)
		w.Header().Set("Content-Type", "application/json")
		// The base protocol: a missing required client capability is a
		// 400 over HTTP (spec.types.ts, MissingRequiredClientCapabilityError).
		if e, ok := resp.(mcp.JSONRPCError); ok && e.Error.Code == CodeMissingCapability {
			w.WriteHeader(http.StatusBadRequest)
		}
		if err := json.NewEncoder(w).Encode(resp); err != nil {
			l.log.Debug("writing a task answer failed", "err", err)
		}
	})
}

// ---- the call ----

// taskMode is a task-eligible call in flight, as its tool handler sees
// it (call.task): the handler's start of a foreground child
// (Server.startContinuable, Server.followup) reports the child here, and
// the child's steps.
type taskMode struct {
	l       *TaskLayer
	started chan started // buffered 1: the first start only

	mu      sync.Mutex
	claimed bool
	step    string
	stepAt  time.Time
	now     func() time.Time
}

type started struct{ childID, msgID string }

func (p *taskMode) claim() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ok := !p.claimed
	p.claimed = true
	return ok
}

func (p *taskMode) setStep(s string) {
	p.mu.Lock()
	p.step, p.stepAt = s, p.now()
	p.mu.Unlock()
}

func (p *taskMode) latest() (string, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.step, p.stepAt
}

// call runs a task-eligible tool call through next on a goroutine the
// layer owns. If the call starts a child (a continuable subagent, or a
// send_message that waits), the task record is committed and the task
// handle answers the request while the call goes on; its answer becomes
// the task's result. A call that starts none (a one-shot provider, a
// refused argument, a send without a wait) is answered as it would have
// been. Until the handle is sent the request's end, or a
// notifications/cancelled naming it, ends the call; after, nothing of the
// request does.
//
// The call reaches next under a request id of the layer's own, never the
// client's: the MCP server keeps a call's id registered for
// notifications/cancelled until the call returns, which for a task is
// long after its handle answered the id (and the client may reuse it).
func (l *TaskLayer) call(ctx context.Context, r request, raw json.RawMessage, next Next) mcp.JSONRPCMessage {
	p := &taskMode{l: l, started: make(chan started, 1), now: l.now}
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	detach := context.AfterFunc(ctx, hcancel)
	key, in := callKey{sessionOf(ctx), idKey(r.ID)}, &inflight{cancel: hcancel}
	l.mu.Lock()
	l.calls[key] = in
	l.mu.Unlock()
	defer func() { // answered: a cancel of the client's id no longer reaches the call
		l.mu.Lock()
		if l.calls[key] == in {
			delete(l.calls, key)
		}
		l.mu.Unlock()
	}()
	done := make(chan mcp.JSONRPCMessage, 1)
	callID := newCallID()
	inner := innerCall(raw, callID)
	l.mu.Lock()
	l.modes[callID] = p
	l.mu.Unlock()
	l.wg.Go(func() {
		defer hcancel()
		defer func() {
			l.mu.Lock()
			delete(l.modes, callID)
			l.mu.Unlock()
		}()
		done <- next(hctx, inner)
	})
	id := r.id()
	var s started
	select {
	case resp := <-done:
		detach()
		return withID(resp, id)
	case s = <-p.started:
	}
	if !detach() { // the request ended first, and that reached the call
		return withID(<-done, id)
	}
	now := l.now()
	rec := taskstore.Record{ID: newTaskID(), Principal: Principal(ctx), Tool: r.Params.Name, AgentID: s.childID, MessageID: s.msgID,
		Status: taskstore.StatusWorking, StatusMessage: "started " + s.childID, CreatedAt: now, UpdatedAt: now, TTL: l.ttl,
		Runner: l.inst}
	if l.inst != "" {
		rec.Beat = now
	}
	lt := &liveTask{rec: rec, call: p}
	l.mu.Lock()
	l.live[rec.ID] = lt
	l.mu.Unlock()
	if err := l.store.PutTask(context.WithoutCancel(ctx), rec); err != nil {
		// Not durable, so no task: the call answers as it would have,
		// the request's end governing it again.
		l.log.Error("storing a task failed; answering the call without one", "agent_id", s.childID, "err", err)
		l.drop(rec.ID)
		stop := context.AfterFunc(ctx, hcancel)
		defer stop()
		return withID(<-done, id)
	}
	l.log.Info("task created", "task_id", rec.ID, "tool", rec.Tool, "agent_id", rec.AgentID, "principal", rec.Principal)
	l.wg.Go(func() { l.settle(rec.ID, done) })
	return mcp.JSONRPCResponse{JSONRPC: mcp.JSONRPC_VERSION, ID: id, Result: l.wire(lt, "task")}
}

// cancelCall ends the unanswered task-eligible call the client's
// notifications/cancelled names, if there is one in its session.
func (l *TaskLayer) cancelCall(ctx context.Context, requestID json.RawMessage) {
	if len(requestID) == 0 {
		return
	}
	l.mu.Lock()
	in := l.calls[callKey{sessionOf(ctx), idKey(requestID)}]
	l.mu.Unlock()
	if in != nil {
		in.cancel()
	}
}

// sessionOf is the MCP session of a message ("" when it has none, as a
// layer's HTTP request).
func sessionOf(ctx context.Context) string {
	if s := server.ClientSessionFromContext(ctx); s != nil {
		return s.SessionID()
	}
	return ""
}

// idKey is a request id as a map key: its JSON type and value, so the
// string "1" and the number 1 differ and 1 and 1.0 do not.
func idKey(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	return fmt.Sprintf("%T:%v", v, v)
}

// newCallID is the request id a task-eligible call reaches the MCP server
// under: the layer's own, unguessable, so no client id matches it.
func newCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "tasks-layer-call-" + hex.EncodeToString(b[:])
}

// withID is resp answering the client's request id rather than the one
// the call reached the MCP server under.
func withID(resp mcp.JSONRPCMessage, id mcp.RequestId) mcp.JSONRPCMessage {
	switch m := resp.(type) {
	case mcp.JSONRPCResponse:
		m.ID = id
		return m
	case *mcp.JSONRPCResponse:
		c := *m
		c.ID = id
		return &c
	case mcp.JSONRPCError:
		m.ID = id
		return m
	case *mcp.JSONRPCError:
		c := *m
		c.ID = id
		return &c
	}
	return resp
}

// settle waits for a task's call to answer and stores the answer as the
// task's result; meanwhile, in a shared store, it rewrites the working
// record's beat every Heartbeat (in this goroutine, so a beat never lands
// after the settled record).
func (l *TaskLayer) settle(id string, done <-chan mcp.JSONRPCMessage) {
	var beat <-chan time.Time
	if l.inst != "" {
		t := time.NewTicker(l.beat)
		defer t.Stop()
		beat = t.C
	}
	var resp mcp.JSONRPCMessage
	for waiting := true; waiting; {
		select {
		case resp = <-done:
			waiting = false
		case <-beat:
			l.heartbeat(id)
		}
	}
	if l.ctx.Err() != nil {
		return // closing: the call stopped waiting, not the child
	}
	b, _ := json.Marshal(resp)
	var env struct {
		Result json.RawMessage     `json:"result"`
		Error  *taskstore.RPCError `json:"error"`
	}
	_ = json.Unmarshal(b, &env)
	l.mu.Lock()
	lt := l.live[id]
	if lt == nil {
		l.mu.Unlock()
		return
	}
	final, localCancel := lt.rec, lt.cancelRequested
	l.mu.Unlock()
	now := l.now()
	final.UpdatedAt, final.SettledAt = now, now
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A conditional write: it applies only while the stored task works
	// (another instance may have resolved it while this one's beat was
	// stale), and it honours a cancel request another instance committed
	// before it.
	stored, err := l.store.UpdateTask(ctx, id, func(cur taskstore.Record) (taskstore.Record, error) {
		if cur.Status != taskstore.StatusWorking {
			return cur, errDeclined
		}
		out := final
		out.CancelRequested = cur.CancelRequested || final.CancelRequested
		settleAs(&out, env.Result, env.Error, localCancel, cur.CancelRequested)
		return out, nil
	})
	switch {
	case errors.Is(err, errDeclined):
		l.log.Warn("a task's call answered after another instance had settled it (this instance's beat was stale); the stored task stands", "task_id", id)
	case err != nil:
		// Kept in memory: this process still answers it; a restart
		// resolves the stored working record from the child.
		l.log.Error("storing a settled task failed", "task_id", id, "err", err)
		l.mu.Lock()
		settleAs(&lt.rec, env.Result, env.Error, localCancel, false)
		lt.rec.UpdatedAt, lt.rec.SettledAt = now, now
		l.mu.Unlock()
		return
	default:
		l.log.Info("task settled", "task_id", id, "status", stored.Status, "agent_id", stored.AgentID)
	}
	l.drop(id)
}

// settleAs makes rec the settled task of a call that answered result or
// rpcErr: failed for a JSON-RPC error; cancelled when a cancel request
// another instance committed before this write stands (requested), or
// when a tasks/cancel here (localCancel) interrupted the turn (an error
// result); else completed. A turn that ended on its own before a local
// cancel stays completed; a request stored first is ordered before the
// result by the store, which every instance reads alike.
func settleAs(rec *taskstore.Record, result json.RawMessage, rpcErr *taskstore.RPCError, localCancel, requested bool) {
	switch {
	case rpcErr != nil:
		rec.Status, rec.Error, rec.StatusMessage = taskstore.StatusFailed, rpcErr, rpcErr.Message
	case localCancel && isErrorResult(result):
		rec.Status, rec.Result = taskstore.StatusCancelled, result
		rec.StatusMessage = "cancelled: the subagent's turn was interrupted"
	case requested:
		rec.Status, rec.Result = taskstore.StatusCancelled, result
		rec.StatusMessage = "cancelled: requested at another instance before the task's result was stored"
	default:
		rec.Status, rec.Result = taskstore.StatusCompleted, result
		rec.StatusMessage = ""
	}
}

// errDeclined is how the layer's UpdateTask functions decline to write:
// the stored record is no longer what the write was for (settled, or its
// cancel already requested).
var errDeclined = errors.New("the stored task is unchanged")

// heartbeat rewrites a working task's beat: its call here still runs.
// The write is conditional (only while the stored task works) and
// changes the beat alone, so a cancel another instance requested is kept,
// and honoured here, as a tasks/cancel of this instance's own.
func (l *TaskLayer) heartbeat(id string) {
	ctx, cancel := context.WithTimeout(l.ctx, l.beat)
	defer cancel()
	l.mu.Lock()
	lt := l.live[id]
	working := lt != nil && lt.rec.Status == taskstore.StatusWorking && !lt.settledElsewhere
	l.mu.Unlock()
	if !working {
		return
	}
	now := l.now()
	stored, err := l.store.UpdateTask(ctx, id, func(cur taskstore.Record) (taskstore.Record, error) {
		if cur.Status != taskstore.StatusWorking {
			return cur, errDeclined
		}
		cur.Beat = now
		return cur, nil
	})
	switch {
	case errors.Is(err, errDeclined):
		l.log.Warn("another instance settled a task whose call runs here (this instance's beat was stale); the stored task stands", "task_id", id)
		l.mu.Lock()
		lt.settledElsewhere = true // said once; no more beats
		l.mu.Unlock()
		return
	case err != nil:
		if l.ctx.Err() == nil {
			l.log.Warn("storing a task's heartbeat failed; other instances resolve it as stopped once its beat is stale", "task_id", id, "err", err)
		}
		return
	}
	l.mu.Lock()
	lt.rec.Beat = now
	requested := stored.CancelRequested && !lt.cancelRequested
	l.mu.Unlock()
	if requested {
		l.cancelTask(ctx, lt)
	}
}

// orphaned reports whether a stored working task has no call waiting on
// it anywhere: run here (not live, so a stop or a failed write left it),
// in a store that is this instance's alone, or by an instance whose beat
// is three Heartbeats old.
func (l *TaskLayer) orphaned(rec taskstore.Record) bool {
	return l.inst == "" || rec.Runner == "" || rec.Runner == l.inst || l.now().Sub(rec.Beat) > 3*l.beat
}

func (l *TaskLayer) drop(id string) {
	l.mu.Lock()
	delete(l.live, id)
	l.mu.Unlock()
}

func isErrorResult(raw json.RawMessage) bool {
	var r struct {
		IsError bool `json:"isError"`
	}
	return json.Unmarshal(raw, &r) == nil && r.IsError
}

// taskCallMeta is the _meta key of an inner call (innerCall) naming the
// layer's call: the handler's request carries its task mode with it
// (Server.taskMode). A client that sends the key itself names no call of
// the layer's (the ids are random and live only while their call runs).
const taskCallMeta = "io.github.mcp-subagent/task-call"

// innerCall is the call as it reaches the MCP server: under request id
// id (see TaskLayer.call), in task mode (_meta[taskCallMeta] = id), and
// without its progress token (a task's progress is its statusMessage,
// and the token's request is answered).
func innerCall(raw json.RawMessage, id string) json.RawMessage {
	var msg map[string]json.RawMessage
	if json.Unmarshal(raw, &msg) != nil {
		return raw
	}
	msg["id"], _ = json.Marshal(id)
	var params map[string]json.RawMessage
	if json.Unmarshal(msg["params"], &params) == nil && params != nil {
		var meta map[string]json.RawMessage
		if json.Unmarshal(params["_meta"], &meta) != nil || meta == nil {
			meta = map[string]json.RawMessage{}
		}
		delete(meta, "progressToken")
		meta[taskCallMeta], _ = json.Marshal(id)
		params["_meta"], _ = json.Marshal(meta)
		msg["params"], _ = json.Marshal(params)
	}
	out, err := json.Marshal(msg)
	if err != nil {
		return raw
	}
	return out
}

func newTaskID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "task-" + hex.EncodeToString(b[:])
}

// ---- tasks/get, tasks/update, tasks/cancel ----

func (l *TaskLayer) taskMethod(ctx context.Context, r request) mcp.JSONRPCMessage {
	if !r.declares() {
		return mcp.NewJSONRPCError(r.id(), CodeMissingCapability, "Missing required client capability: declare the "+TasksExtension+" extension in the request's _meta clientCapabilities",
			map[string]any{"requiredCapabilities": map[string]any{"extensions": TaskCapabilities()}})
	}
	if r.Params.TaskID == "" {
		return mcp.NewJSONRPCError(r.id(), mcp.INVALID_PARAMS, "field \"taskId\": missing; give the taskId a task handle returned", nil)
	}
	lt, err := l.lookup(ctx, r.Params.TaskID, Principal(ctx))
	if err != nil {
		return mcp.NewJSONRPCError(r.id(), mcp.INVALID_PARAMS, err.Error(), nil)
	}
	switch r.Method {
	case "tasks/cancel":
		l.cancelTask(ctx, lt)
		return mcp.JSONRPCResponse{JSONRPC: mcp.JSONRPC_VERSION, ID: r.id(), Result: map[string]any{"resultType": "complete"}}
	case "tasks/update":
		// Reserved: no task of ours asks for input yet, so there is no
		// outstanding request an inputResponse could answer; the spec
		// has the server ignore those.
		return mcp.JSONRPCResponse{JSONRPC: mcp.JSONRPC_VERSION, ID: r.id(), Result: map[string]any{"resultType": "complete"}}
	}
	return mcp.JSONRPCResponse{JSONRPC: mcp.JSONRPC_VERSION, ID: r.id(), Result: l.wire(lt, "complete")}
}

// The spec's wording of the -32602 errors, capitals included.
var (
	errNotFound = errors.New("Failed to retrieve task: Task not found")   //lint:ignore ST1005 the spec's wording
	errExpired  = errors.New("Failed to retrieve task: Task has expired") //lint:ignore ST1005 the spec's wording
)

// lookup finds principal's task id: live here, else stored (a stored
// working task nobody here runs is resolved from its child first). Another
// principal's task is not found, as an unknown one is. An expired task is
// deleted.
func (l *TaskLayer) lookup(ctx context.Context, id, principal string) (*liveTask, error) {
	if principal == "" {
		return nil, errNotFound
	}
	l.mu.Lock()
	if lt := l.live[id]; lt != nil {
		l.mu.Unlock()
		if lt.rec.Principal != principal {
			return nil, errNotFound
		}
		return lt, nil
	}
	l.mu.Unlock()
	rec, err := l.store.Task(ctx, id)
	if errors.Is(err, taskstore.ErrNotFound) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("Failed to retrieve task: the session store failed: %v", err) //lint:ignore ST1005 the spec's wording
	}
	if rec.Principal != principal {
		return nil, errNotFound
	}
	if rec.Expired(l.now()) {
		if err := l.store.DeleteTask(ctx, id); err != nil {
			l.log.Warn("deleting an expired task failed", "task_id", id, "err", err)
		}
		return nil, errExpired
	}
	if rec.Status == taskstore.StatusWorking && l.orphaned(rec) {
		rec = l.resolve(ctx, rec)
	}
	return &liveTask{rec: rec}, nil
}

// resolve settles a stored working task whose call no longer runs (the
// server stopped while it waited): completed with the result rebuilt from
// the child's stored outcome when its last turn completed (a subagent
// call; the crash came after the turn and before the task's write), else
// failed with the diagnostic. Never working forever.
func (l *TaskLayer) resolve(ctx context.Context, rec taskstore.Record) taskstore.Record {
	now := l.now()
	rec.UpdatedAt, rec.SettledAt = now, now
	res, err := l.mgr.LastOutcome(ctx, rec.AgentID)
	if err == nil && res.StopReason == agent.StopCompleted && rec.Tool == "subagent" {
		if b, err := completeResult(ForegroundResult(rec.AgentID, res)); err == nil {
			rec.Status, rec.Result, rec.StatusMessage = taskstore.StatusCompleted, b, ""
		}
	}
	if rec.Status == taskstore.StatusWorking {
		why := "its turn ended " + string(res.StopReason)
		switch {
		case err != nil:
			why = "its outcome cannot be read: " + err.Error()
		case res.StopReason == "":
			why = "no turn of it ended"
		}
		if res.Diagnostic != "" {
			why += ": " + res.Diagnostic
		}
		msg := fmt.Sprintf("the server stopped while this task waited for subagent %s (%s); the subagent is kept and resumable: send_message gives it more work", rec.AgentID, why)
		rec.Status, rec.StatusMessage, rec.Error = taskstore.StatusFailed, msg, &taskstore.RPCError{Code: mcp.INTERNAL_ERROR, Message: msg}
	}
	// Conditional: the runner may have settled it, or beaten again,
	// since rec was read; then the stored record stands.
	var cur taskstore.Record
	stored, err := l.store.UpdateTask(ctx, rec.ID, func(c taskstore.Record) (taskstore.Record, error) {
		cur = c
		if c.Status != taskstore.StatusWorking || !l.orphaned(c) {
			return c, errDeclined
		}
		c.Status, c.Result, c.Error, c.StatusMessage = rec.Status, rec.Result, rec.Error, rec.StatusMessage
		c.UpdatedAt, c.SettledAt = rec.UpdatedAt, rec.SettledAt
		return c, nil
	})
	switch {
	case errors.Is(err, errDeclined):
		return cur
	case err != nil:
		l.log.Warn("storing a resolved task failed; it is resolved again on the next read", "task_id", rec.ID, "err", err)
		return rec
	}
	return stored
}

// completeResult is a CallToolResult as a 2026-07-28 answer carries it.
func completeResult(r *mcp.CallToolResult) (json.RawMessage, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	m["resultType"] = json.RawMessage(`"complete"`)
	return json.Marshal(m)
}

// cancelTask interrupts the turn a live working task waits on; its call
// then answers aborted and the task is cancelled. A working task whose
// call runs at another instance (lookup found its runner's beat fresh)
// gets the request recorded in its stored record, which the runner
// honours at its next beat. A task already settled is left as it is: the
// spec makes cancellation cooperative, and acknowledged either way.
func (l *TaskLayer) cancelTask(ctx context.Context, lt *liveTask) {
	l.mu.Lock()
	live := l.live[lt.rec.ID] == lt && lt.rec.Status == taskstore.StatusWorking
	if live {
		lt.cancelRequested = true
		lt.rec.CancelRequested = true
	}
	rec := lt.rec
	l.mu.Unlock()
	if !live {
		if lt.call == nil && rec.Status == taskstore.StatusWorking && l.inst != "" && rec.Runner != "" && rec.Runner != l.inst {
			l.requestCancel(ctx, rec.ID)
		}
		return
	}
	if err := l.mgr.Interrupt(seam.ParentRef{Principal: rec.Principal}, rec.AgentID); err != nil {
		l.log.Warn("interrupting a cancelled task's child failed", "task_id", rec.ID, "agent_id", rec.AgentID, "err", err)
		return
	}
	l.log.Info("task cancel: the child's turn is interrupted", "task_id", rec.ID, "agent_id", rec.AgentID)
}

// requestCancel records a tasks/cancel of a task another instance runs in
// its stored record: a conditional write that applies only while the
// task works, so it never undoes what the runner settled meanwhile, and
// changes nothing else of the record.
func (l *TaskLayer) requestCancel(ctx context.Context, id string) {
	rec, err := l.store.UpdateTask(context.WithoutCancel(ctx), id, func(cur taskstore.Record) (taskstore.Record, error) {
		if cur.Status != taskstore.StatusWorking || cur.CancelRequested {
			return cur, errDeclined
		}
		cur.CancelRequested = true
		return cur, nil
	})
	switch {
	case errors.Is(err, errDeclined):
	case err != nil:
		l.log.Warn("storing a task's cancel request failed; send tasks/cancel again", "task_id", id, "err", err)
	default:
		l.log.Info("task cancel: requested of the instance that runs it", "task_id", id, "runner", rec.Runner)
	}
}

// Recover resolves the stored tasks a stopped server left working (in a
// shared store, those whose runner's beat is stale: another instance's
// working task is its own) and deletes the expired ones; from then on,
// until Close, it does both every SweepEvery. Call it once at start,
// after the manager's Recover (which closes the children such a stop left
// running).
func (l *TaskLayer) Recover(ctx context.Context) error {
	recs, _, err := l.sweep(ctx)
	if err != nil {
		return err
	}
	l.resolveOrphans(ctx, recs)
	l.sweeping.Do(func() { l.wg.Go(l.sweepLoop) })
	return nil
}

// resolveOrphans resolves those of recs that are working and orphaned,
// unless their call runs here.
func (l *TaskLayer) resolveOrphans(ctx context.Context, recs []taskstore.Record) {
	for _, rec := range recs {
		if rec.Status != taskstore.StatusWorking || !l.orphaned(rec) {
			continue
		}
		l.mu.Lock()
		live := l.live[rec.ID] != nil
		l.mu.Unlock()
		if !live {
			rec = l.resolve(ctx, rec)
			l.log.Info("resolved a task a stop left working", "task_id", rec.ID, "status", rec.Status, "agent_id", rec.AgentID, "runner", rec.Runner)
		}
	}
}

// sweepLoop deletes expired tasks, and resolves orphaned ones, every
// l.every until Close.
func (l *TaskLayer) sweepLoop() {
	t := time.NewTicker(l.every)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		kept, n, err := l.sweep(l.ctx)
		switch {
		case err != nil && l.ctx.Err() == nil:
			l.log.Warn("sweeping expired tasks failed", "err", err)
		case n > 0:
			l.log.Debug("deleted expired tasks", "count", n)
		}
		if err == nil && l.inst != "" {
			l.resolveOrphans(l.ctx, kept)
		}
	}
}

// sweep deletes the expired tasks; it returns the records it kept and how
// many it deleted.
func (l *TaskLayer) sweep(ctx context.Context) (kept []taskstore.Record, deleted int, err error) {
	recs, err := l.store.Tasks(ctx)
	if err != nil {
		return nil, 0, err
	}
	now := l.now()
	for _, rec := range recs {
		if !rec.Expired(now) {
			kept = append(kept, rec)
			continue
		}
		if err := l.store.DeleteTask(ctx, rec.ID); err != nil {
			return nil, deleted, err
		}
		deleted++
	}
	return kept, deleted, nil
}

// wire is a task as the extension's Task shape gives it, with resultType
// "task" for the handle a call answers and "complete" for tasks/get.
func (l *TaskLayer) wire(lt *liveTask, resultType string) map[string]any {
	l.mu.Lock()
	rec := lt.rec
	l.mu.Unlock()
	msg := rec.StatusMessage
	updated := rec.UpdatedAt
	if lt.call != nil && rec.Status == taskstore.StatusWorking {
		if s, at := lt.call.latest(); s != "" {
			msg, updated = s, at
		}
	}
	m := map[string]any{
		"resultType":     resultType,
		"taskId":         rec.ID,
		"status":         rec.Status,
		"createdAt":      rec.CreatedAt.UTC().Format(time.RFC3339Nano),
		"lastUpdatedAt":  updated.UTC().Format(time.RFC3339Nano),
		"ttlMs":          l.ttlMs(rec),
		"pollIntervalMs": l.poll.Milliseconds(),
	}
	if msg != "" {
		m["statusMessage"] = msg
	}
	switch rec.Status {
	case taskstore.StatusCompleted:
		m["result"] = rec.Result
	case taskstore.StatusFailed:
		m["error"] = rec.Error
	}
	return m
}

// ttlMs is the task's time to live counted from its creation, as the
// spec counts it: while it works, at least TTL from now (a task lives as
// long as its child's turn); once settled, until TTL after that.
func (l *TaskLayer) ttlMs(rec taskstore.Record) int64 {
	end := l.now().Add(rec.TTL)
	if !rec.SettledAt.IsZero() {
		end = rec.SettledAt.Add(rec.TTL)
	}
	return end.Sub(rec.CreatedAt).Milliseconds()
}

// ---- task mode: the handlers' side ----

// modeOf is the layer's call that inner call id runs, or nil.
func (l *TaskLayer) modeOf(id string) *taskMode {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.modes[id]
}

// taskMode is the task mode of a tool call: the layer's call its request
// names in _meta (innerCall), or nil when it names none the layer runs.
func (s *Server) taskMode(req mcp.CallToolRequest) *taskMode {
	if s.opts.Tasks == nil || req.Params.Meta == nil {
		return nil
	}
	id, _ := req.Params.Meta.AdditionalFields[taskCallMeta].(string)
	if id == "" {
		return nil
	}
	return s.opts.Tasks.modeOf(id)
}

// startContinuable starts a continuable child. In task mode (task not
// nil) a foreground start is made without an in-band wait, which commits
// the child's record before its id is handed out, then waited on through
// AwaitTurn and reported to the layer, which makes the task; everything
// else is the manager's StartContinuable as asked.
func (s *Server) startInTaskMode(ctx context.Context, task *taskMode, provider string, req seam.StartRequest, wait bool) (*manager.Started, error) {
	if task == nil || !wait || !task.claim() {
		return s.delegate.StartContinuable(ctx, provider, req, wait)
	}
	st, err := s.delegate.StartContinuable(ctx, provider, req, false)
	if err != nil {
		return nil, err
	}
	st.Turn = task.await(st.ChildID, st.MessageID)
	return st, nil
}

// followup sends a child its next message; in task mode a send that
// waits becomes a task as startContinuable's start does.
func (s *Server) followupInTaskMode(ctx context.Context, task *taskMode, caller seam.ParentRef, childID, content string, wait bool, budget *seam.Budget) (*manager.Sent, error) {
	if task == nil || !wait || !task.claim() {
		return s.messenger.FollowupBudget(ctx, caller, childID, content, wait, budget)
	}
	// Sent without a wait but admitted awaited, and then awaited
	// (AwaitSent): a follow-up forwarded to the instance the child is
	// resident on is waited on the store, not on an activation here, and
	// its outcome is the task's result, not also a settlement notice.
	sent, err := task.l.mgr.FollowupAwaited(ctx, caller, childID, content, budget)
	if err != nil {
		return nil, err
	}
	sent.Turn = task.report(childID, sent.MessageID, task.l.mgr.AwaitSent(sent, task.setStep))
	return sent, nil
}

// await is the turn msgID of childID, started in task mode, as the call
// waits on it; the layer hears of the start.
func (p *taskMode) await(childID, msgID string) manager.Turn {
	return p.report(childID, msgID, p.l.mgr.AwaitTurn(childID, msgID, p.setStep))
}

// report tells the layer of the start of turn (msgID of childID), which
// the call waits on until the layer closes.
func (p *taskMode) report(childID, msgID string, turn manager.Turn) manager.Turn {
	t := closingTurn{Turn: turn, l: p.l}
	p.started <- started{childID: childID, msgID: msgID}
	return t
}

// closingTurn is a task's turn, whose wait also ends when the layer
// closes: the call then answers as a wait that ran out, which the layer
// does not store.
type closingTurn struct {
	manager.Turn
	l *TaskLayer
}

func (c closingTurn) Wait(ctx context.Context) (seam.Result, bool) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.l.ctx, cancel)
	defer stop()
	return c.Turn.Wait(ctx)
}
