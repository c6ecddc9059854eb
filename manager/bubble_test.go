package manager_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/managertest"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// The tests in this file run in a synctest bubble: synctest.Wait returns
// once every goroutine of the manager is blocked, so what a test then
// reads (which turns began, with what inputs, what is pending) is the
// settled state, not a race with the manager's goroutines, and "nothing
// happened" is a fact, not a sleep.

// bubbleProvider runs continuable children whose turns record their
// inputs and hold until the test ends them or they are cancelled.
type bubbleProvider struct {
	mu    sync.Mutex
	turns []*bubbleTurn
	// onTurn, when set, runs at the start of every turn (to delegate from
	// inside a turn, as a model would).
	onTurn func(self seam.ParentRef, inputs []agent.Input)
}

type bubbleTurn struct {
	child  string
	self   seam.ParentRef
	inputs []agent.Input
	end    chan agent.StopReason // the test sends how the turn ends
	ended  agent.StopReason      // set once it has ended
}

func (*bubbleProvider) Name() string                    { return "bubble" }
func (*bubbleProvider) Capabilities() seam.Capabilities { return seam.Capabilities{} }
func (*bubbleProvider) InheritsParentContext() bool     { return false }
func (*bubbleProvider) Continuable()                    {}
func (*bubbleProvider) Prepare(context.Context, seam.StartRequest) (seam.CreationInputs, error) {
	return seam.CreationInputs{}, nil
}
func (p *bubbleProvider) NewDriver(_ context.Context, r seam.DriverRequest) (seam.Driver, error) {
	return &bubbleDriver{p: p, j: r.Journal, self: r.Self}, nil
}

type bubbleDriver struct {
	p    *bubbleProvider
	j    *agent.Journal
	self seam.ParentRef
}

// RunTurn records the turn in the journal as a real driver does: its
// inputs as user-side messages, one assistant message, the turn's end.
func (d *bubbleDriver) RunTurn(ctx context.Context, in []agent.Input) agent.TurnResult {
	bt := &bubbleTurn{child: d.self.AgentID, self: d.self, inputs: slices.Clone(in), end: make(chan agent.StopReason, 1)}
	d.p.mu.Lock()
	d.p.turns = append(d.p.turns, bt)
	onTurn := d.p.onTurn
	d.p.mu.Unlock()
	n := d.j.NextTurn()
	d.j.Append(agent.Event{Kind: agent.EventTurnStart, Turn: n})
	for _, x := range in {
		d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: n, Source: x.Source, Message: &seam.Message{Role: seam.RoleUser, Content: x.Text}})
	}
	if onTurn != nil {
		onTurn(d.self, in)
	}
	stop := agent.StopCompleted
	select {
	case stop = <-bt.end:
	case <-ctx.Done():
		stop = agent.StopAborted
	}
	out := fmt.Sprintf("turn %d of %s", n, d.self.AgentID)
	d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: n, Message: &seam.Message{Role: seam.RoleAssistant, Content: out}})
	d.j.Append(agent.Event{Kind: agent.EventTurnEnd, Turn: n, StopReason: stop})
	d.p.mu.Lock()
	bt.ended = stop
	d.p.mu.Unlock()
	return agent.TurnResult{Output: out, StopReason: stop}
}
func (d *bubbleDriver) Journal() *agent.Journal { return d.j }
func (*bubbleDriver) Close() error              { return nil }

// of returns the turns of child so far, in order.
func (p *bubbleProvider) of(child string) []*bubbleTurn {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*bubbleTurn
	for _, t := range p.turns {
		if t.child == child {
			out = append(out, t)
		}
	}
	return out
}

// only returns child's single turn in flight; the test fails if there is
// none or more than one.
func (p *bubbleProvider) current(t *testing.T, child string) *bubbleTurn {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	var open []*bubbleTurn
	for _, bt := range p.turns {
		if bt.child == child && bt.ended == "" {
			open = append(open, bt)
		}
	}
	if len(open) != 1 {
		t.Fatalf("%s has %d turns in flight, want 1", child, len(open))
	}
	return open[0]
}

// texts is a turn's input texts.
func (bt *bubbleTurn) texts() []string {
	var out []string
	for _, in := range bt.inputs {
		out = append(out, in.Source+": "+in.Text)
	}
	return out
}

// bubble runs f with a manager over store with p registered, inside a
// synctest bubble, and closes the manager before the bubble ends (which
// also proves the manager leaves no goroutine behind).
func bubble(t *testing.T, store seam.Store, p *bubbleProvider, f func(m *manager.Manager)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		m := manager.New(manager.Options{Store: store})
		if err := m.Register(p); err != nil {
			t.Fatal(err)
		}
		f(m)
		if err := m.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

var bubbleRoot = seam.ParentRef{Principal: "p", Cwd: "/work"}

func startBubble(t *testing.T, m *manager.Manager, parent seam.ParentRef, text string, wait bool) *manager.Started {
	t.Helper()
	st, err := m.StartContinuable(context.Background(), "bubble", seam.StartRequest{Label: "l", Prompt: text, Parent: parent}, wait)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func send(t *testing.T, m *manager.Manager, caller seam.ParentRef, id, text string) *manager.Sent {
	t.Helper()
	s, err := m.Followup(context.Background(), caller, id, text, false)
	if err != nil {
		t.Fatalf("Followup(%s, %q): %v", id, text, err)
	}
	return s
}

// delegating is an onTurn that starts a grandchild (through m0) from a
// depth-1 child's turn whose last input is "delegate", and sets *id to it.
func delegating(id *string) func(self seam.ParentRef, in []agent.Input) {
	return func(self seam.ParentRef, in []agent.Input) {
		if self.Depth == 1 && in[len(in)-1].Text == "delegate" {
			st, err := m0.StartContinuable(context.Background(), "bubble", seam.StartRequest{Label: "g", Prompt: "grandchild work", Parent: self}, false)
			if err != nil {
				panic(err)
			}
			*id = st.ChildID
		}
	}
}

// A follow-up is routed by residency alone: queued behind a running turn,
// waking an idle resident child (one that owns a running child), and a
// cold resume once the child settled. Each message runs as its own turn,
// in order, and the grandchild's settlement reaches its parent exactly
// once, as a turn of its own.
func TestFollowupRoutingInABubble(t *testing.T) {
	p := &bubbleProvider{}
	var grandchild string
	p.onTurn = delegating(&grandchild)
	bubble(t, memstore.New(), p, func(m *manager.Manager) {
		m0 = m
		a := startBubble(t, m, bubbleRoot, "delegate", false).ChildID
		synctest.Wait()
		if grandchild == "" {
			t.Fatal("the child's first turn did not start its grandchild")
		}
		if got := send(t, m, bubbleRoot, a, "second").Route; got != manager.RouteQueued {
			t.Errorf("route during a turn = %s, want queued", got)
		}
		p.current(t, a).end <- agent.StopCompleted
		synctest.Wait()
		if got := p.current(t, a).texts(); !slices.Equal(got, []string{"user: second"}) {
			t.Errorf("the queued message's turn got %q", got)
		}
		p.current(t, a).end <- agent.StopCompleted
		synctest.Wait()
		// a is idle but resident: it owns the grandchild, still working.
		if got := send(t, m, bubbleRoot, a, "third").Route; got != manager.RouteWoken {
			t.Errorf("route of an idle resident child = %s, want woken", got)
		}
		synctest.Wait()
		p.current(t, a).end <- agent.StopCompleted
		synctest.Wait()
		// The grandchild settles: its parent hears it once, in a turn.
		p.current(t, grandchild).end <- agent.StopCompleted
		synctest.Wait()
		notice := p.current(t, a)
		if len(notice.inputs) != 1 || notice.inputs[0].Source != agent.SourceSettled {
			t.Fatalf("the parent's turn after the grandchild settled got %q, want one settlement notice", notice.texts())
		}
		notice.end <- agent.StopCompleted
		synctest.Wait()
		if got := len(p.of(a)); got != 4 {
			t.Errorf("a ran %d turns, want 4 (three messages and one notice)", got)
		}
		// a settled and left: the next message resumes it cold.
		if got := send(t, m, bubbleRoot, a, "fourth").Route; got != manager.RouteResumed {
			t.Errorf("route of a settled child = %s, want resumed", got)
		}
		synctest.Wait()
		if got := p.current(t, a).texts(); !slices.Equal(got, []string{"user: fourth"}) {
			t.Errorf("the resumed turn got %q", got)
		}
		p.current(t, a).end <- agent.StopCompleted
		synctest.Wait()
		settled := 0
		for _, bt := range p.of(a) {
			for _, in := range bt.inputs {
				if in.Source == agent.SourceSettled {
					settled++
				}
			}
		}
		if settled != 1 {
			t.Errorf("the grandchild's settlement reached its parent %d times, want once", settled)
		}
	})
}

// m0 lets a turn hook reach the bubble's manager.
var m0 *manager.Manager

// An interrupt stops the current turn and parks the rest of the queue:
// the claimed message is not re-run, no turn starts while parked, and the
// next message wakes the queue, which then runs in order.
func TestInterruptParksTheQueueInABubble(t *testing.T) {
	p := &bubbleProvider{}
	bubble(t, memstore.New(), p, func(m *manager.Manager) {
		a := startBubble(t, m, bubbleRoot, "first", false).ChildID
		synctest.Wait()
		send(t, m, bubbleRoot, a, "second")
		send(t, m, bubbleRoot, a, "third")
		if err := m.Interrupt(bubbleRoot, a); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		turns := p.of(a)
		if len(turns) != 1 || turns[0].ended != agent.StopAborted {
			t.Fatalf("after the interrupt: %d turns, the first ended %q; want one, aborted, and the queue parked", len(turns), turns[0].ended)
		}
		rows, err := managertest.ListChildren(m, bubbleRoot)
		if err != nil || len(rows) != 1 {
			t.Fatalf("ListChildren = %v, %v", rows, err)
		}
		send(t, m, bubbleRoot, a, "fourth")
		var got []string
		for range 3 {
			synctest.Wait()
			bt := p.current(t, a)
			got = append(got, bt.texts()...)
			bt.end <- agent.StopCompleted
		}
		synctest.Wait()
		if want := []string{"user: second", "user: third", "user: fourth"}; !slices.Equal(got, want) {
			t.Errorf("after the wake the turns ran %q, want %q (the interrupted message not re-run)", got, want)
		}
		if n := len(p.of(a)); n != 4 {
			t.Errorf("a ran %d turns, want 4", n)
		}
	})
}

// A root child's settlement notice is handed out exactly once: in band to
// the waiting caller's principal on the first take, never again, and not
// again after a restart on the same store, which recovers the child left
// active by the first server and announces that epoch once.
func TestSettlementNoticeExactlyOnceInABubble(t *testing.T) {
	store := memstore.New()
	p := &bubbleProvider{}
	var done, open string
	bubble(t, store, p, func(m *manager.Manager) {
		done = startBubble(t, m, bubbleRoot, "finish", false).ChildID
		open = startBubble(t, m, bubbleRoot, "keep going", false).ChildID
		synctest.Wait()
		p.current(t, done).end <- agent.StopCompleted
		synctest.Wait()
		ns := m.TakeNotices("p", "")
		if len(ns) != 1 || ns[0].ChildID != done || ns[0].Source != agent.SourceSettled || ns[0].StopReason != agent.StopCompleted {
			t.Fatalf("first take = %+v, want the one settlement of %s", ns, done)
		}
		if ns := m.TakeNotices("p", ""); len(ns) != 0 {
			t.Errorf("second take = %+v, want nothing", ns)
		}
		// Close leaves open's epoch active, as a crash would.
	})
	for restart := range 2 {
		bubble(t, store, p, func(m *manager.Manager) {
			if err := m.Recover(context.Background()); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			ns := m.TakeNotices("p", "")
			if restart == 0 && (len(ns) != 1 || ns[0].ChildID != open || ns[0].StopReason != agent.StopAborted) {
				t.Errorf("after the first restart: %+v, want one notice that %s was stopped", ns, open)
			}
			if restart == 1 && len(ns) != 0 {
				t.Errorf("after the second restart: %+v, want nothing announced twice", ns)
			}
		})
	}
}

// A live ancestor agent may interrupt a grandchild's turn (another
// principal may not); the agent in between keeps running, and the grandchild's queued work stays parked
// until its own parent sends again.
func TestAncestorInterruptInABubble(t *testing.T) {
	p := &bubbleProvider{}
	var b seam.ParentRef
	var c string
	p.onTurn = func(self seam.ParentRef, in []agent.Input) {
		switch in[len(in)-1].Text {
		case "delegate":
			b = self
			c = startBubble(t, m0, self, "grandchild", false).ChildID
		}
	}
	bubble(t, memstore.New(), p, func(m *manager.Manager) {
		m0 = m
		aSt := startBubble(t, m, bubbleRoot, "top", false)
		synctest.Wait()
		a := p.current(t, aSt.ChildID).self
		startBubble(t, m, a, "delegate", false)
		synctest.Wait()
		if c == "" {
			t.Fatal("b did not start its child")
		}
		send(t, m, b, c, "queued for c")
		wantCode(t, m.Interrupt(seam.ParentRef{Principal: "another"}, c), seam.ErrUnauthorized)
		if err := m.Interrupt(a, c); err != nil {
			t.Fatalf("the grandparent's interrupt: %v", err)
		}
		synctest.Wait()
		if got := p.of(c); len(got) != 1 || got[0].ended != agent.StopAborted {
			t.Fatalf("c's turns after the interrupt: %d, want its one turn aborted", len(got))
		}
		// b and a go on.
		p.current(t, b.AgentID)
		p.current(t, a.AgentID)
		// Only b's next message wakes c's parked queue.
		send(t, m, b, c, "wake up")
		synctest.Wait()
		if got := p.current(t, c).texts(); !slices.Equal(got, []string{"user: queued for c"}) {
			t.Errorf("c's turn after the wake got %q", got)
		}
	})
}
