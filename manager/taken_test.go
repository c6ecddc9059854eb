//go:build postgres

package manager_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// A server killed the moment its child's turn calls the model — its
// writes stop landing there and then, as with kill -9 — has already
// taken the turn's message out of the stored inbox: the server that takes
// the child over closes the cut-off turn and does not run the message
// again. (Before, the turn's start lingered 10 ms in the writer, so a kill
// in that window left the message queued, and it ran twice.)
func TestAKilledTurnsMessageDoesNotRunAgain(t *testing.T) {
	onSharedStores(t, func(t *testing.T, st seam.Store) {
		ctx := context.Background()
		root := seam.ParentRef{Principal: "p", Cwd: "/work"}
		calls := &modelCalls{n: map[string]int{}}
		dead := &killable{Store: st, Waker: st.(seam.Waker), killed: make(chan struct{})}

		a := manager.New(manager.Options{Store: dead, OwnerID: "server-a", LeaseTTL: time.Minute})
		t.Cleanup(func() { _ = a.Close(context.Background()) })
		if err := a.Register(&callProvider{calls: calls, kill: dead.kill}); err != nil {
			t.Fatal(err)
		}
		notices := make(chan seam.Notice, 8)
		b := manager.New(manager.Options{Store: st, OwnerID: "server-b", LeaseTTL: 150 * time.Millisecond,
			OnNotice: func(_ string, n seam.Notice) { notices <- n }})
		t.Cleanup(func() { _ = b.Close(context.Background()) })
		if err := b.Register(&callProvider{calls: calls}); err != nil {
			t.Fatal(err)
		}

		s, err := a.StartContinuable(ctx, "model", seam.StartRequest{Label: "l", Prompt: "first", Parent: root}, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := waitSettled(ctx, st, s.ChildID); err != nil {
			t.Fatal(err)
		}
		// A follow-up resumes the child at A; its turn's model call kills A.
		// (Before the fix the kill could come before the follow-up's own
		// commit; unacknowledged, it must still run at most once.)
		if _, err := a.Followup(ctx, root, s.ChildID, "kill", false); err != nil {
			t.Logf("the follow-up was not acknowledged: %v", err)
		}
		select {
		case <-dead.killed:
		case <-time.After(30 * time.Second):
			t.Fatal("the follow-up's turn never called the model")
		}
		if err := b.Recover(ctx); err != nil { // B sweeps from now on, at each renewal
			t.Fatal(err)
		}
		// A's lease runs out: B's sweep takes the child over.
		if err := st.Renew(ctx, seam.Owner{ID: "server-a", Expires: time.Now().Add(-time.Second)}); err != nil {
			t.Fatal(err)
		}
		if err := waitSettled(ctx, st, s.ChildID); err != nil {
			t.Fatal(err)
		}
		if n := calls.count("kill"); n != 1 {
			t.Fatalf("the follow-up reached the model %d times; want once (the turn the kill cut is closed, not re-run)", n)
		}
		takenOver(t, notices, s.ChildID)
		checkStoredTranscript(t, st, s.ChildID, []string{"first", "kill"}, "done: kill")
	})
}

// modelCalls counts a provider's model calls by their input, across
// servers.
type modelCalls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *modelCalls) add(in string) {
	c.mu.Lock()
	c.n[in]++
	c.mu.Unlock()
}

func (c *modelCalls) count(in string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[in]
}

// callProvider runs continuable children whose turns journal their inputs
// and then call the model (counted): it answers at once, except for the
// input "kill", on which kill (when set) is called first, and the call
// then hangs until the turn is cancelled, like a server that died in it.
type callProvider struct {
	calls *modelCalls
	kill  func()
}

func (p *callProvider) Name() string                    { return "model" }
func (p *callProvider) Capabilities() seam.Capabilities { return seam.Capabilities{} }
func (p *callProvider) InheritsParentContext() bool     { return false }
func (p *callProvider) Continuable()                    {}
func (p *callProvider) Prepare(context.Context, seam.StartRequest) (seam.CreationInputs, error) {
	return seam.CreationInputs{}, nil
}
func (p *callProvider) NewDriver(_ context.Context, r seam.DriverRequest) (seam.Driver, error) {
	return &callDriver{p: p, j: r.Journal}, nil
}

type callDriver struct {
	p *callProvider
	j *agent.Journal
}

func (d *callDriver) Journal() *agent.Journal { return d.j }
func (d *callDriver) Close() error            { return nil }

func (d *callDriver) RunTurn(ctx context.Context, inputs []agent.Input) agent.TurnResult {
	turn := d.j.NextTurn()
	d.j.Append(agent.Event{Kind: agent.EventTurnStart, Turn: turn})
	for _, in := range inputs {
		d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: turn, Source: in.Source, Message: &llm.Message{Role: llm.RoleUser, Content: in.Text}})
	}
	text := inputs[len(inputs)-1].Text
	d.p.calls.add(text)
	if text == "kill" && d.p.kill != nil {
		d.p.kill()
		<-ctx.Done()
		return agent.TurnResult{StopReason: agent.StopAborted}
	}
	d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: turn, Message: &llm.Message{Role: llm.RoleAssistant, Content: "done: " + text}})
	d.j.Append(agent.Event{Kind: agent.EventTurnEnd, Turn: turn, StopReason: agent.StopCompleted})
	return agent.TurnResult{Output: "done: " + text, StopReason: agent.StopCompleted}
}

// killable is a server's store that stops taking writes once killed, as
// the server's process would by dying: nothing it writes after that lands.
type killable struct {
	seam.Store
	seam.Waker
	once   sync.Once
	killed chan struct{}
}

var errKilled = errors.New("the server was killed")

func (k *killable) kill() { k.once.Do(func() { close(k.killed) }) }

func (k *killable) dead() bool {
	select {
	case <-k.killed:
		return true
	default:
		return false
	}
}

func (k *killable) WriteChild(ctx context.Context, id string, w seam.ChildWrite) error {
	if k.dead() {
		return errKilled
	}
	return k.Store.WriteChild(ctx, id, w)
}

func (k *killable) Renew(ctx context.Context, o seam.Owner) error {
	if k.dead() {
		return errKilled
	}
	return k.Store.Renew(ctx, o)
}
