package manager_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/internal/managertest"
	"github.com/mcp-subagent/mcp-subagent/llm/openai"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/providers/spawn"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// A message queued behind a running turn was handed an id, so it survives
// the server going down mid-turn: the next resume runs it first, in order,
// before the message that woke the child.
func TestQueuedMessagesSurviveAStopAndRunFirstOnResume(t *testing.T) {
	release := make(chan struct{})
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		if req.LastUserText() == "first" {
			select {
			case <-release:
			case <-time.After(10 * time.Second):
			}
		}
		return fakeopenai.Reply{Text: "done: " + req.LastUserText()}
	})
	defer fake.Close()
	defer close(release)
	client := openai.New(transport.Config{BaseURL: fake.URL(), APIKey: "k", RetryBaseDelay: time.Millisecond})
	st, err := persist.Open(t.TempDir(), persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	newMgr := func() *manager.Manager {
		m := manager.New(manager.Options{Store: st})
		if err := m.Register(spawn.New(spawn.Options{Client: client, Model: "m"})); err != nil {
			t.Fatal(err)
		}
		if err := m.Recover(context.Background()); err != nil {
			t.Fatal(err)
		}
		return m
	}
	root := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
	ctx := context.Background()

	m1 := newMgr()
	started, err := m1.StartContinuable(ctx, "spawn", seam.StartRequest{Label: "l", Prompt: "first", Parent: root}, false)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; len(fake.Requests()) == 0; i++ { // the first turn is running
		if i > 500 {
			t.Fatal("the first turn never reached the model")
		}
		time.Sleep(10 * time.Millisecond)
	}
	sent, err := m1.Followup(ctx, root, started.ChildID, "second", false)
	if err != nil || sent.Route != manager.RouteQueued {
		t.Fatalf("followup = %+v, %v; want queued", sent, err)
	}
	// The server stops mid-turn (as a crash would leave it: active mark and
	// queue stored).
	closeCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := m1.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	if q, err := st.Queued(ctx, started.ChildID); err != nil || len(q) != 1 || q[0].ID != sent.MessageID || q[0].Text != "second" {
		t.Fatalf("stored inbox after the stop = %+v, %v; want the queued message", q, err)
	}

	m2 := newMgr()
	defer m2.Close(ctx)
	third, err := m2.Followup(ctx, root, started.ChildID, "third", true)
	if err != nil || third.Route != manager.RouteResumed {
		t.Fatalf("followup after restart = %+v, %v", third, err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	res, ok := third.Wait(wctx)
	if !ok || res.Output != "done: third" {
		t.Fatalf("third turn = %+v, %v", res, ok)
	}
	var order []string
	for _, r := range fake.Requests() {
		order = append(order, r.LastUserText())
	}
	want := []string{"first", "second", "third"}
	if len(order) != 3 || order[0] != want[0] || order[1] != want[1] || order[2] != want[2] {
		t.Errorf("model saw turns %q, want %q", order, want)
	}
	// The claims are written behind the turns: stop the manager (it drains
	// every child's writer) before reading the store.
	if err := m2.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	if q, _ := st.Queued(ctx, started.ChildID); len(q) != 0 {
		t.Errorf("stored inbox after the turns ran = %+v, want empty", q)
	}
}

// A mangled journal lists as corrupt as soon as it is read: at once for a
// child without a current checkpoint (the listing folds its journal), and
// after the failed resume for one whose checkpoint spared the read. Its
// healthy sibling lists and resumes normally throughout.
func TestMangledJournalListsAsCorrupt(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "done"}))
	defer fake.Close()
	client := openai.New(transport.Config{BaseURL: fake.URL(), APIKey: "k", RetryBaseDelay: time.Millisecond})
	dir := t.TempDir()
	root := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
	ctx := context.Background()
	open := func() (*persist.Store, *manager.Manager) { return openSpawn(t, dir, client) }
	st, m := open()
	var ids []string
	for _, p := range []string{"a", "b", "c"} {
		s, err := m.StartContinuable(ctx, "spawn", seam.StartRequest{Label: p, Prompt: p, Parent: root}, false)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ChildID)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for got := 0; got < 3; {
		ns := m.WaitNotices(wctx, "p", "")
		if wctx.Err() != nil {
			t.Fatalf("only %d of 3 children settled", got)
		}
		got += len(ns)
	}
	_ = m.Close(ctx)
	st.Close()

	// Mangle a's and b's journals; b also loses its checkpoint.
	db, err := bolt.Open(filepath.Join(dir, persist.FileName), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, id := range ids[:2] {
			j := tx.Bucket([]byte("journals")).Bucket([]byte(id))
			if err := j.Put([]byte{0, 0, 0, 0, 0, 0, 0, 1}, []byte("\x00garbage{")); err != nil {
				return err
			}
		}
		return tx.Bucket([]byte("checkpoints")).Delete([]byte(ids[1]))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	st, m = open()
	defer st.Close()
	defer m.Close(ctx)
	kinds := func() map[string]string {
		rows, err := managertest.ListChildren(m, root)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, r := range rows {
			out[r.ID] = r.Kind + "/" + r.Reason + r.Status
		}
		return out
	}
	got := kinds()
	if got[ids[0]] != "child/ready" || got[ids[1]] != "diagnostic/corrupt" || got[ids[2]] != "child/ready" {
		t.Fatalf("before any resume: %v (a, b, c = %v)", got, ids)
	}
	if _, err := m.Followup(ctx, root, ids[0], "more", false); !errors.Is(err, seam.ErrNotResumable) {
		t.Fatalf("resuming the mangled child: %v, want NOT_RESUMABLE", err)
	}
	if got := kinds(); got[ids[0]] != "diagnostic/corrupt" || got[ids[2]] != "child/ready" {
		t.Errorf("after the failed resume: %v", got)
	}
	if s, err := m.Followup(ctx, root, ids[2], "more", false); err != nil || s.Route != manager.RouteResumed {
		t.Errorf("the healthy sibling: %+v, %v", s, err)
	}
}

// stubbornDriver ends every turn with a stop reason nobody knows.
type stubbornDriver struct{ j *agent.Journal }

func (d stubbornDriver) RunTurn(ctx context.Context, in []agent.Input) agent.TurnResult {
	return agent.TurnResult{Output: "partial", StopReason: "gave_up"}
}
func (d stubbornDriver) Journal() *agent.Journal { return d.j }
func (stubbornDriver) Close() error              { return nil }

type stubbornProvider struct{}

func (stubbornProvider) Name() string                    { return "stubborn" }
func (stubbornProvider) Capabilities() seam.Capabilities { return seam.Capabilities{} }
func (stubbornProvider) InheritsParentContext() bool     { return false }
func (stubbornProvider) Continuable()                    {}
func (stubbornProvider) Prepare(context.Context, seam.StartRequest) (seam.CreationInputs, error) {
	return seam.CreationInputs{}, nil
}
func (stubbornProvider) NewDriver(_ context.Context, r seam.DriverRequest) (seam.Driver, error) {
	return stubbornDriver{r.Journal}, nil
}

// An unknown stop reason from a continuable child's driver is a failure,
// never success.
func TestUnknownStopReasonOfAContinuableChildIsAnError(t *testing.T) {
	m := manager.New(manager.Options{Store: memstore.New()})
	if err := m.Register(stubbornProvider{}); err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	st, err := m.StartContinuable(context.Background(), "stubborn",
		seam.StartRequest{Label: "l", Prompt: "p", Parent: seam.ParentRef{Principal: "p", Cwd: t.TempDir()}}, true)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, ok := st.Wait(ctx)
	if !ok || res.StopReason != agent.StopError || !strings.Contains(res.Diagnostic, `"gave_up"`) {
		t.Errorf("result = %+v, %v; want error naming the unknown stop reason", res, ok)
	}
}

// A continuable child's epoch is one subagent/start and one subagent/end
// event, the end carrying how the epoch ended; a resume is a new pair.
func TestContinuableEpochsEmitStartAndEndEvents(t *testing.T) {
	m := manager.New(manager.Options{Store: memstore.New()})
	if err := m.Register(stubbornProvider{}); err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	var mu sync.Mutex
	var got []string
	m.Subscribe(func(e manager.Event) {
		mu.Lock()
		got = append(got, string(e.Type)+":"+string(e.StopReason))
		mu.Unlock()
	})
	root := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
	st, err := m.StartContinuable(context.Background(), "stubborn", seam.StartRequest{Label: "l", Prompt: "p", Parent: root}, false)
	if err != nil {
		t.Fatal(err)
	}
	wait := func(n int) []string {
		t.Helper()
		for i := 0; i < 500; i++ {
			mu.Lock()
			g := append([]string(nil), got...)
			mu.Unlock()
			if len(g) >= n {
				return g
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("events = %v, want %d", got, n)
		return nil
	}
	if g := wait(2); g[0] != "subagent/start:" || g[1] != "subagent/end:error" {
		t.Errorf("first epoch events = %v", g)
	}
	if _, err := m.Followup(context.Background(), root, st.ChildID, "again", false); err != nil {
		t.Fatal(err)
	}
	if g := wait(4); g[2] != "subagent/start:" || g[3] != "subagent/end:error" {
		t.Errorf("events after a resume = %v", g)
	}
}

// recordingProvider is stubbornProvider that records the depth each
// driver is built with.
type recordingProvider struct {
	stubbornProvider
	mu     sync.Mutex
	depths []int
}

func (p *recordingProvider) NewDriver(ctx context.Context, r seam.DriverRequest) (seam.Driver, error) {
	p.mu.Lock()
	p.depths = append(p.depths, r.Self.Depth, r.Header.Depth)
	p.mu.Unlock()
	return stubbornDriver{r.Journal}, nil
}

// A child's depth is persisted with it and a resume never lowers it, even
// when the caller that sends the follow-up claims a lower depth.
func TestResumeKeepsThePersistedDepth(t *testing.T) {
	p := &recordingProvider{}
	m := manager.New(manager.Options{Store: memstore.New()})
	if err := m.Register(p); err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	parent := seam.ParentRef{Principal: "p", AgentID: "agent-parent", Depth: 2, Cwd: t.TempDir()}
	st, err := m.StartContinuable(context.Background(), "stubborn", seam.StartRequest{Label: "l", Prompt: "p", Parent: parent}, true)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st.Wait(ctx)
	for settled := false; !settled; { // wait for the epoch to settle
		rows, err := managertest.ListChildren(m, parent)
		if err != nil || ctx.Err() != nil {
			t.Fatalf("the child never settled: %v %v", rows, err)
		}
		settled = len(rows) == 1 && rows[0].Status == "ready"
		time.Sleep(5 * time.Millisecond)
	}
	lower := parent
	lower.Depth = 0
	sent, err := m.Followup(ctx, lower, st.ChildID, "again", false)
	if err != nil || sent.Route != manager.RouteResumed {
		t.Fatalf("followup = %+v, %v", sent, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.depths) != 4 || p.depths[0] != 3 || p.depths[1] != 3 || p.depths[2] != 3 || p.depths[3] != 3 {
		t.Errorf("driver depths (self, header) at start and resume = %v, want all 3", p.depths)
	}
}

// reportingDriver reports to its parent during its turn and answers with
// what the report call returned.
type reportingDriver struct {
	j    *agent.Journal
	m    *manager.Manager
	self seam.ParentRef
}

func (d reportingDriver) RunTurn(ctx context.Context, in []agent.Input) agent.TurnResult {
	_, err := d.m.ReportFrom(d.self, "halfway", manager.DeliveryNextStep)
	return agent.TurnResult{Output: fmt.Sprint(err), StopReason: agent.StopCompleted}
}
func (d reportingDriver) Journal() *agent.Journal { return d.j }
func (reportingDriver) Close() error              { return nil }

type reportingProvider struct {
	stubbornProvider
	m *manager.Manager
}

func (p reportingProvider) NewDriver(_ context.Context, r seam.DriverRequest) (seam.Driver, error) {
	return reportingDriver{j: r.Journal, m: p.m, self: r.Self}, nil
}

// A report whose recipient, the persisted parent agent, is not running is
// refused with PARENT_UNAVAILABLE; the child's turn goes on.
func TestReportToAnAbsentParentIsParentUnavailable(t *testing.T) {
	m := manager.New(manager.Options{Store: memstore.New()})
	if err := m.Register(reportingProvider{m: m}); err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	absent := seam.ParentRef{Principal: "p", AgentID: "agent-not-running", Depth: 1, Cwd: t.TempDir()}
	st, err := m.StartContinuable(context.Background(), "stubborn", seam.StartRequest{Label: "l", Prompt: "p", Parent: absent}, true)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, ok := st.Wait(ctx)
	if !ok || res.StopReason != agent.StopCompleted || !strings.Contains(res.Output, "PARENT_UNAVAILABLE") {
		t.Errorf("turn = %+v, %v; want completed with the report refused as PARENT_UNAVAILABLE", res, ok)
	}
}
