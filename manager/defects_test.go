package manager_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/managertest"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// A child left active whose journal cannot be read keeps its active mark
// (so a repaired file still announces the epoch), lists as corrupt, and
// its parent is told.
func TestRecoverKeepsAndAnnouncesAnUnreadableActiveChild(t *testing.T) {
	dir, root, childID := crashMidTurn(t, nil)
	ctx := context.Background()
	db, err := bolt.Open(filepath.Join(dir, persist.FileName), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("journals")).Bucket([]byte(childID)).Put([]byte{0, 0, 0, 0, 0, 0, 0, 0}, []byte("\x00garbage{"))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	st, err := persist.Open(dir, persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := manager.New(manager.Options{Store: st})
	defer m.Close(ctx)
	if err := m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if act, _ := st.Residents(ctx); len(act) != 1 || act[0].ChildID != childID {
		t.Errorf("claims after recovery = %v, want the unreadable child's kept", act)
	}
	rows, err := managertest.ListChildren(m, root)
	if err != nil || len(rows) != 1 || rows[0].Kind != "diagnostic" || rows[0].Reason != "corrupt" {
		t.Errorf("listing = %+v, %v; want the child as a corrupt diagnostic", rows, err)
	}
	ns := m.TakeNotices("p", "")
	if len(ns) != 1 || ns[0].ChildID != childID || !strings.Contains(ns[0].Text, "mcp-subagent doctor") || ns[0].StopReason != agent.StopError {
		t.Errorf("notices = %+v; want one saying the child cannot be read and how to repair the store", ns)
	}
}

// brokenReads is a store whose reads of one child fail as a broken disk
// would (not "no such child").
type brokenReads struct {
	seam.Store
	id string
}

var errDisk = errors.New("input/output error")

func (b brokenReads) Header(ctx context.Context, id string) (seam.Header, error) {
	if id == b.id {
		return seam.Header{}, errDisk
	}
	return b.Store.Header(ctx, id)
}

// Interrupt tells "no such child" (a no-op) from a store that cannot say
// (an error naming the cause).
func TestInterruptReportsAStoreErrorAsSuch(t *testing.T) {
	m := manager.New(manager.Options{Store: brokenReads{memstore.New(), "agent-broken"}})
	defer m.Close(context.Background())
	root := seam.ParentRef{Principal: "p", Cwd: "/work"}
	if err := m.Interrupt(root, "agent-missing"); err != nil {
		t.Errorf("interrupting a missing child = %v, want an accepted no-op", err)
	}
	err := m.Interrupt(root, "agent-broken")
	if !errors.Is(err, seam.ErrPersistenceUnavailable) || !errors.Is(err, errDisk) {
		t.Errorf("interrupting a child the store cannot read = %v, want PERSISTENCE_UNAVAILABLE wrapping the cause", err)
	}
}

// A one-shot start that completes while the server drains disposes the
// run and revokes the callback token minted for it.
func TestStartDuringDrainRevokesTheCallbackToken(t *testing.T) {
	var minted, revoked atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	p := &fakeProvider{name: "p", driver: func(ctx context.Context, req seam.DriverRequest) (seam.Driver, error) {
		close(entered)
		<-release
		return newWatchDriver(req.Journal), nil
	}}
	m := manager.New(manager.Options{Callback: func(seam.ParentRef) (seam.Callback, func()) {
		minted.Add(1)
		return seam.Callback{URL: "http://127.0.0.1:1/mcp", Token: "t"}, func() { revoked.Add(1) }
	}})
	if err := m.Register(p); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := m.Start(context.Background(), "p", prompt("go"))
		errc <- err
	}()
	<-entered
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(release)
	wantCode(t, <-errc, seam.ErrDraining)
	if minted.Load() != 1 || revoked.Load() != 1 {
		t.Errorf("tokens minted %d, revoked %d; want the one minted revoked", minted.Load(), revoked.Load())
	}
}

// progressDriver's first turn waits for go, then calls a tool (a progress
// note), then says so on noted.
type progressDriver struct {
	j      *agent.Journal
	goOn   chan struct{}
	noted  chan struct{}
	finish chan struct{}
}

func (d *progressDriver) Journal() *agent.Journal { return d.j }
func (d *progressDriver) Close() error            { return nil }
func (d *progressDriver) RunTurn(ctx context.Context, in []agent.Input) agent.TurnResult {
	d.j.Append(agent.Event{Kind: agent.EventTurnStart, Turn: 1})
	d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: 1, Source: in[0].Source, Message: &seam.Message{Role: seam.RoleUser, Content: in[0].Text}})
	<-d.goOn
	d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: 1, Message: &seam.Message{Role: seam.RoleAssistant,
		ToolCalls: []seam.ToolCall{{ID: "c1", Name: "read_file", Arguments: "{}"}}}})
	close(d.noted)
	<-d.finish
	d.j.Append(agent.Event{Kind: agent.EventTurnEnd, Turn: 1, StopReason: agent.StopCompleted})
	return agent.TurnResult{Output: "ok", StopReason: agent.StopCompleted}
}

type progressProvider struct {
	stubbornProvider
	d *progressDriver
}

func (p progressProvider) NewDriver(_ context.Context, r seam.DriverRequest) (seam.Driver, error) {
	p.d.j = r.Journal
	return p.d, nil
}

// Progress notes belong to the request that waits: once its wait expires
// and Wait returns, the child's later steps send none.
func TestProgressStopsWhenTheWaitReturns(t *testing.T) {
	d := &progressDriver{goOn: make(chan struct{}), noted: make(chan struct{}), finish: make(chan struct{})}
	m := manager.New(manager.Options{Store: memstore.New()})
	if err := m.Register(progressProvider{d: d}); err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	defer close(d.finish)
	var mu sync.Mutex
	var notes []string
	req := seam.StartRequest{Label: "l", Prompt: "p", Parent: seam.ParentRef{Principal: "p", Cwd: "/work"},
		Progress: func(n string) { mu.Lock(); notes = append(notes, n); mu.Unlock() }}
	st, err := m.StartContinuable(context.Background(), "stubborn", req, true)
	if err != nil {
		t.Fatal(err)
	}
	expired, cancel := context.WithCancel(context.Background())
	cancel() // wait_seconds ran out
	if _, ok := st.Wait(expired); ok {
		t.Fatal("the turn ended before it was let go")
	}
	mu.Lock()
	before := len(notes) // the manager's "started <id>", sent once the record was committed
	mu.Unlock()
	close(d.goOn)
	<-d.noted // the tool call is journaled (listeners run on Append)
	mu.Lock()
	defer mu.Unlock()
	if len(notes) != before {
		t.Errorf("progress notes after the wait returned: %q", notes[before:])
	}
}

// A question a crashed epoch left pending is closed when the epoch is:
// recorded as cancelled by the turn's end, never as a person's answer,
// and the child no longer lists as input_required.
func TestRecoverCancelsAQuestionLeftPending(t *testing.T) {
	// The question its turn held when the server died.
	dir, root, childID := crashMidTurn(t, func(st *persist.Store, childID string) {
		q := seam.Question{ID: "q-left", ChildID: childID, Kind: seam.QuestionApproval, Message: "permission to run: Write notes.txt",
			Choices: []string{"Allow once", "Reject once"}, Created: time.Now()}
		if err := st.PutQuestion(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	})
	ctx := context.Background()

	st, err := persist.Open(dir, persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := manager.New(manager.Options{Store: st})
	defer m.Close(ctx)
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	qs, err := st.Questions(ctx, childID)
	if err != nil || len(qs) != 1 {
		t.Fatalf("questions after recovery: %+v, %v", qs, err)
	}
	if a := qs[0].Answer; a == nil || a.By != seam.ByInterrupt || a.Outcome != seam.OutcomeCancelled {
		t.Errorf("the question left pending reads %+v after recovery; want cancelled by the turn's end", qs[0].Answer)
	}
	rows, err := managertest.ListChildren(m, root)
	if err != nil || len(rows) != 1 || rows[0].Status == manager.StatusInputRequired || rows[0].Questions != nil {
		t.Errorf("listing after recovery = %+v, %v; want the child without a waiting question", rows, err)
	}
}

// crashMidTurn starts a continuable child in a bbolt store and leaves it as
// a crash would, mid-turn and claimed; during runs, if set, while the turn
// is held. It returns the store's directory, the root caller and the id.
func crashMidTurn(t *testing.T, during func(st *persist.Store, childID string)) (string, seam.ParentRef, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := persist.Open(dir, persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := manager.New(manager.Options{Store: st})
	p := &scriptProvider{m: m, out: &handedOut{}, blocked: make(chan string, 1)}
	if err := m.Register(p); err != nil {
		t.Fatal(err)
	}
	root := seam.ParentRef{Principal: "p", Cwd: "/work"}
	ctx := context.Background()
	s, err := m.StartContinuable(ctx, "script", seam.StartRequest{Label: "l", Prompt: "block", Parent: root}, false)
	if err != nil {
		t.Fatal(err)
	}
	<-p.blocked
	if during != nil {
		during(st, s.ChildID)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = m.Close(cctx) // as a crash would: the claim stays
	st.Close()
	return dir, root, s.ChildID
}
