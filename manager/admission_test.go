package manager_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/llm/openai"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/providers/spawn"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// heldModel is a fake chat API that holds every request it is told to
// until the test releases one, and counts the requests in flight at the
// fake (a high-water mark).
type heldModel struct {
	fake    *fakeopenai.Server
	arrived chan string   // the last user text of each held request, in arrival order
	release chan struct{} // one token lets one held request answer
	stop    chan struct{} // closed at cleanup: every held request answers

	mu       sync.Mutex
	inFlight int
	high     int
	order    []string
}

// newHeldModel answers requests that reply passes over (ok false) at
// once, and holds the others.
func newHeldModel(t *testing.T, reply func(req fakeopenai.Request) (fakeopenai.Reply, bool)) *heldModel {
	h := &heldModel{arrived: make(chan string, 100), release: make(chan struct{}, 100), stop: make(chan struct{})}
	h.fake = fakeopenai.New(func(_ int, req fakeopenai.Request) fakeopenai.Reply {
		if r, held := reply(req); !held {
			return r
		}
		text := req.LastUserText()
		h.mu.Lock()
		h.inFlight++
		h.high = max(h.high, h.inFlight)
		h.order = append(h.order, text)
		h.mu.Unlock()
		h.arrived <- text
		select {
		case <-h.release:
		case <-h.stop:
		}
		h.mu.Lock()
		h.inFlight--
		h.mu.Unlock()
		return fakeopenai.Reply{Text: "done: " + text}
	})
	t.Cleanup(h.fake.Close)
	t.Cleanup(func() { close(h.stop) }) // runs first: nothing stays held
	return h
}

// holdAll holds every request.
func holdAll(fakeopenai.Request) (fakeopenai.Reply, bool) { return fakeopenai.Reply{}, true }

func (h *heldModel) client() llm.Client {
	return openai.New(transport.Config{BaseURL: h.fake.URL(), APIKey: "k", RetryBaseDelay: time.Millisecond})
}

// next waits for the next held request and checks whose it is.
func (h *heldModel) next(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-h.arrived:
		if got != want {
			t.Fatalf("the next request to reach the model is %q's, want %q's (order so far %q)", got, want, h.seen())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no request for %q reached the model within 10s (order so far %q)", want, h.seen())
	}
}

func (h *heldModel) releaseOne() { h.release <- struct{}{} }

// handOn lets one held request answer, then waits for the next, once per
// text: each turn that ends lets the next one in.
func (h *heldModel) handOn(t *testing.T, texts ...string) {
	t.Helper()
	for _, text := range texts {
		h.releaseOne()
		h.next(t, text)
	}
}

func (h *heldModel) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.order)
}

func (h *heldModel) highWater() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.high
}

// notices counts the settlement notices root principals get, by child.
type notices struct {
	mu  sync.Mutex
	n   map[string][]seam.Notice
	got chan seam.Notice
}

func newNotices() *notices {
	return &notices{n: map[string][]seam.Notice{}, got: make(chan seam.Notice, 100)}
}

func (ns *notices) on(_ string, n seam.Notice) {
	ns.mu.Lock()
	ns.n[n.ChildID] = append(ns.n[n.ChildID], n)
	ns.mu.Unlock()
	ns.got <- n
}

// wait waits for count notices.
func (ns *notices) wait(t *testing.T, count int) []seam.Notice {
	t.Helper()
	var out []seam.Notice
	for len(out) < count {
		select {
		case n := <-ns.got:
			out = append(out, n)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d notices within 10s", len(out), count)
		}
	}
	return out
}

// oneCompleted fails unless each child got exactly one notice, completed.
func (ns *notices) oneCompleted(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if got := ns.of(id); len(got) != 1 || got[0].StopReason != agent.StopCompleted {
			t.Errorf("child %s got notices %+v, want one completed", id, got)
		}
	}
}

func (ns *notices) of(id string) []seam.Notice {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return slices.Clone(ns.n[id])
}

// spawnManager is a manager running spawn children on client.
func spawnManager(t *testing.T, opts manager.Options, client llm.Client, tools func(m *manager.Manager, self seam.ParentRef) []agent.Tool) *manager.Manager {
	t.Helper()
	if opts.Store == nil {
		opts.Store = memstore.New()
	}
	var m *manager.Manager
	so := spawn.Options{Client: client, Model: "m"}
	if tools != nil {
		so.DelegationTools = func(self seam.ParentRef) []agent.Tool { return tools(m, self) }
	}
	m = newManager(t, opts, spawn.New(so))
	return m
}

func background(t *testing.T, m *manager.Manager, parent seam.ParentRef, text string) string {
	t.Helper()
	st, err := m.StartContinuable(context.Background(), "spawn", seam.StartRequest{Label: text, Prompt: text, Parent: parent}, false)
	if err != nil {
		t.Fatalf("starting %q: %v", text, err)
	}
	return st.ChildID
}

// statusIDs lists the caller's children with a status, in creation order;
// waitStatus waits (bounded) until it is want.
func statusIDs(t *testing.T, m *manager.Manager, caller seam.ParentRef, status string) []string {
	t.Helper()
	page, err := m.List(caller, manager.ListQuery{Status: status})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range page.Rows {
		ids = append(ids, r.ID)
	}
	return ids
}

func waitStatus(t *testing.T, m *manager.Manager, caller seam.ParentRef, status string, want []string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := statusIDs(t, m, caller, status)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("children listed %s = %q, want %q", status, got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// With max_running_children 3, ten background children of slow turns
// never have more than three model requests in flight, reach the model in
// the order they were started, list as queued while they wait, and all
// settle with exactly one notice each.
func TestAdmissionCapsTurnsInFlightInFIFOOrder(t *testing.T) {
	h := newHeldModel(t, holdAll)
	ns := newNotices()
	m := spawnManager(t, manager.Options{MaxRunningChildren: 3, OnNotice: ns.on}, h.client(), nil)
	root := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
	var ids, want []string
	for i := range 10 {
		text := fmt.Sprintf("c%d", i)
		ids, want = append(ids, background(t, m, root, text)), append(want, text)
		if i < 3 { // the first three run at once, in order
			h.next(t, text)
		}
	}
	waitStatus(t, m, root, manager.StatusQueued, ids[3:])
	if got := statusIDs(t, m, root, manager.StatusRunning); !slices.Equal(got, ids[:3]) {
		t.Fatalf("running = %q, want %q", got, ids[:3])
	}
	h.handOn(t, want[3:]...)
	for range 3 {
		h.releaseOne()
	}
	ns.wait(t, 10)
	if got := h.seen(); !slices.Equal(got, want) {
		t.Errorf("requests reached the model in the order %q, want %q", got, want)
	}
	if hw := h.highWater(); hw != 3 {
		t.Errorf("at most %d model requests were in flight, want 3", hw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ns.oneCompleted(t, ids...)
}

// Interrupting a queued child takes its turn out of the queue: it settles
// aborted with its notice, no request of it ever reaches the model, its
// journal keeps the prompt as an aborted turn, and the child queued behind
// it runs next.
func TestAdmissionInterruptOfAQueuedChild(t *testing.T) {
	h := newHeldModel(t, holdAll)
	ns := newNotices()
	st := memstore.New()
	m := spawnManager(t, manager.Options{Store: st, MaxRunningChildren: 1, OnNotice: ns.on}, h.client(), nil)
	root := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
	a := background(t, m, root, "a")
	h.next(t, "a")
	b := background(t, m, root, "b")
	c := background(t, m, root, "c")
	waitStatus(t, m, root, manager.StatusQueued, []string{b, c})
	if err := m.Interrupt(root, b); err != nil {
		t.Fatal(err)
	}
	n := ns.wait(t, 1)[0]
	if n.ChildID != b || n.StopReason != agent.StopAborted {
		t.Fatalf("first notice = %+v, want %s aborted", n, b)
	}
	waitStatus(t, m, root, manager.StatusQueued, []string{c})
	h.handOn(t, "c")
	h.releaseOne()
	ns.wait(t, 2)
	if got := h.seen(); !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("requests reached the model for %q, want a and c only", got)
	}
	ns.oneCompleted(t, a, c)
	if got := ns.of(b); len(got) != 1 {
		t.Errorf("the interrupted child got %d notices, want 1", len(got))
	}
	events, err := st.Events(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	out := agent.LastOutcome(events)
	if out.StopReason != agent.StopAborted || len(agent.Messages(events)) != 1 || agent.Messages(events)[0].Content != "b" {
		t.Errorf("the interrupted child's journal: last outcome %+v, messages %+v; want its prompt in an aborted turn", out, agent.Messages(events))
	}
	if q, _ := st.Queued(context.Background(), b); len(q) != 0 {
		t.Errorf("the interrupted child's stored inbox = %+v, want empty", q)
	}
}

// A root's foreground wait that runs out while the child is queued hands
// back (Wait reports false); the child stays queued and runs later, and
// its outcome comes as a notice.
func TestAdmissionForegroundWaitWhileQueuedHandsBack(t *testing.T) {
	h := newHeldModel(t, holdAll)
	ns := newNotices()
	m := spawnManager(t, manager.Options{MaxRunningChildren: 1, OnNotice: ns.on}, h.client(), nil)
	root := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
	background(t, m, root, "a")
	h.next(t, "a")
	st, err := m.StartContinuable(context.Background(), "spawn", seam.StartRequest{Label: "fg", Prompt: "fg", Parent: root}, true)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if res, ok := st.Wait(wctx); ok {
		t.Fatalf("the wait returned %+v; want it to run out while the child is queued", res)
	}
	waitStatus(t, m, root, manager.StatusQueued, []string{st.ChildID})
	h.handOn(t, "fg")
	h.releaseOne()
	ns.wait(t, 2)
	ns.oneCompleted(t, st.ChildID)
}

// delegateTool is a delegation tool that starts a foreground child and
// waits for its first turn, as the subagent tool does.
type delegateTool struct {
	m    *manager.Manager
	self seam.ParentRef
}

func (d delegateTool) Def() llm.ToolDef {
	return llm.ToolDef{Name: "delegate", Description: "run a child", Parameters: json.RawMessage(`{"type":"object","properties":{"prompt":{"type":"string"}}}`)}
}

func (d delegateTool) Call(ctx context.Context, args json.RawMessage) (string, error) {
	var in struct{ Prompt string }
	if err := json.Unmarshal(args, &in); err != nil {
		return "", err
	}
	st, err := d.m.StartContinuable(ctx, "spawn", seam.StartRequest{Label: in.Prompt, Prompt: in.Prompt, Parent: d.self}, true)
	if err != nil {
		return "", err
	}
	res, ok := st.Wait(ctx)
	if !ok {
		return "", fmt.Errorf("no outcome")
	}
	return res.Output, nil
}

// Three parents at the cap of three, each waiting for a foreground child,
// do not deadlock: each child runs on its waiting parent's slot, so all
// three children are in flight at once, and the parents finish.
func TestAdmissionNestedForegroundBorrowsTheCallersSlot(t *testing.T) {
	h := newHeldModel(t, func(req fakeopenai.Request) (fakeopenai.Reply, bool) {
		text := req.LastUserText()
		switch {
		case len(text) > 3 && text[:3] == "kid":
			return fakeopenai.Reply{}, true
		case req.Messages[len(req.Messages)-1].Role == "tool":
			return fakeopenai.Reply{Text: "parent done"}, false
		}
		return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "delegate", Arguments: `{"prompt":"kid of ` + text + `"}`}}}, false
	})
	ns := newNotices()
	m := spawnManager(t, manager.Options{MaxRunningChildren: 3, OnNotice: ns.on}, h.client(),
		func(m *manager.Manager, self seam.ParentRef) []agent.Tool {
			return []agent.Tool{delegateTool{m, self}}
		})
	root := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
	var kids []string
	for i := range 3 {
		background(t, m, root, fmt.Sprintf("p%d", i))
		kids = append(kids, fmt.Sprintf("kid of p%d", i))
	}
	// All three kids reach the model while their parents wait, none queued.
	for range 3 {
		select {
		case <-h.arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("only %q reached the model: the tree deadlocked at its cap", h.seen())
		}
	}
	if got := h.seen(); !slices.Equal(slices.Sorted(slices.Values(got)), kids) {
		t.Fatalf("held requests = %q, want %q", got, kids)
	}
	if got := statusIDs(t, m, root, manager.StatusQueued); len(got) != 0 {
		t.Errorf("queued children = %q, want none", got)
	}
	for range 3 {
		h.releaseOne()
	}
	for _, n := range ns.wait(t, 3) {
		if n.StopReason != agent.StopCompleted {
			t.Errorf("parent notice %+v, want completed", n)
		}
	}
}

// max_running_total caps turns across principals, FIFO across them: a
// principal under its own cap still waits for the total, behind whoever
// queued first.
func TestAdmissionTotalCapAcrossPrincipals(t *testing.T) {
	h := newHeldModel(t, holdAll)
	ns := newNotices()
	m := spawnManager(t, manager.Options{MaxRunningChildren: 5, MaxRunningTotal: 3, OnNotice: ns.on}, h.client(), nil)
	p1 := seam.ParentRef{Principal: "p1", Cwd: t.TempDir()}
	p2 := seam.ParentRef{Principal: "p2", Cwd: t.TempDir()}
	for _, s := range []struct {
		p    seam.ParentRef
		text string
	}{{p1, "p1-a"}, {p1, "p1-b"}, {p2, "p2-a"}} {
		background(t, m, s.p, s.text)
		h.next(t, s.text)
	}
	late1 := background(t, m, p1, "p1-c")
	waitStatus(t, m, p1, manager.StatusQueued, []string{late1})
	late2 := background(t, m, p2, "p2-b")
	waitStatus(t, m, p2, manager.StatusQueued, []string{late2})
	h.handOn(t, "p1-c", "p2-b")
	for range 3 {
		h.releaseOne()
	}
	ns.wait(t, 5)
	if hw := h.highWater(); hw != 3 {
		t.Errorf("at most %d model requests were in flight across principals, want 3", hw)
	}
}

// Turns queued when the server stops are not lost: after the restart each
// child is announced as stopped and keeps its prompt in the store, and a
// send resumes it and runs the queued prompt first.
func TestAdmissionQueuedTurnsSurviveARestart(t *testing.T) {
	h := newHeldModel(t, holdAll)
	st, err := persist.Open(t.TempDir(), persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ns := newNotices()
	opts := manager.Options{Store: st, MaxRunningChildren: 1, OnNotice: ns.on}
	root := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
	m1 := spawnManager(t, opts, h.client(), nil)
	background(t, m1, root, "a")
	h.next(t, "a")
	var queued []string
	for _, text := range []string{"b", "c"} {
		queued = append(queued, background(t, m1, root, text))
	}
	waitStatus(t, m1, root, manager.StatusQueued, queued)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	h.releaseOne() // a's request, abandoned by the stop
	for i, id := range queued {
		if q, err := st.Queued(ctx, id); err != nil || len(q) != 1 || q[0].Text != []string{"b", "c"}[i] || q[0].At == 0 {
			t.Fatalf("stored inbox of %s after the stop = %+v, %v; want its stamped prompt", id, q, err)
		}
	}
	m2 := spawnManager(t, opts, h.client(), nil)
	if err := m2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range ns.wait(t, 3) {
		if n.StopReason != agent.StopAborted {
			t.Errorf("the recovery announced %+v, want stopped", n)
		}
	}
	sent, err := m2.Followup(ctx, root, queued[1], "go on", true)
	if err != nil || sent.Route != manager.RouteResumed {
		t.Fatalf("send after the restart = %+v, %v", sent, err)
	}
	h.next(t, "c")
	h.handOn(t, "go on")
	h.releaseOne()
	if res, ok := sent.Wait(ctx); !ok || res.Output != "done: go on" {
		t.Fatalf("the resumed turn = %+v, %v", res, ok)
	}
}

// One-shot runs take seats like any turn: past the cap they wait, FIFO
// with continuable children's turns.
func TestAdmissionCountsOneShotRuns(t *testing.T) {
	h := newHeldModel(t, holdAll)
	ns := newNotices()
	m := spawnManager(t, manager.Options{MaxRunningChildren: 1, OnNotice: ns.on}, h.client(), nil)
	root := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
	ctx := context.Background()
	first, err := m.Start(ctx, "spawn", seam.StartRequest{Label: "o1", Prompt: "o1", Parent: root})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Dispose()
	h.next(t, "o1")
	second, err := m.Start(ctx, "spawn", seam.StartRequest{Label: "o2", Prompt: "o2", Parent: root})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Dispose()
	c := background(t, m, root, "c")
	waitStatus(t, m, root, manager.StatusQueued, []string{c})
	h.handOn(t, "o2", "c")
	h.releaseOne()
	waitDone(t, first)
	waitDone(t, second)
	ns.wait(t, 1)
	if r := second.Result(); r.StopReason != agent.StopCompleted || r.Output != "done: o2" {
		t.Errorf("the queued one-shot run ended %+v", r)
	}
	if hw := h.highWater(); hw != 1 {
		t.Errorf("at most %d model requests were in flight, want 1", hw)
	}
}
