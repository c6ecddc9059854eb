package manager_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// gateProvider runs continuable children whose turns hold until the test
// releases them (completed) or the turn is cancelled (aborted).
type gateProvider struct {
	mu    sync.Mutex
	turns map[string]*gateTurn // by child id, the latest turn
	began chan string          // child ids, as their turns begin
}

type gateTurn struct {
	self    seam.ParentRef
	release chan struct{}
	ended   chan agent.StopReason
}

func newGateProvider() *gateProvider {
	return &gateProvider{turns: map[string]*gateTurn{}, began: make(chan string, 64)}
}

func (*gateProvider) Name() string                    { return "gate" }
func (*gateProvider) Capabilities() seam.Capabilities { return seam.Capabilities{} }
func (*gateProvider) InheritsParentContext() bool     { return false }
func (*gateProvider) Continuable()                    {}
func (*gateProvider) Prepare(context.Context, seam.StartRequest) (seam.CreationInputs, error) {
	return seam.CreationInputs{}, nil
}
func (p *gateProvider) NewDriver(_ context.Context, r seam.DriverRequest) (seam.Driver, error) {
	return &gateDriver{p: p, j: r.Journal, self: r.Self}, nil
}

// turn waits for the next turn to begin and returns it.
func (p *gateProvider) turn(t *testing.T, id string) *gateTurn {
	t.Helper()
	select {
	case got := <-p.began:
		if got != id {
			t.Fatalf("a turn of %s began, want %s", got, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no turn of %s began", id)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.turns[id]
}

type gateDriver struct {
	p    *gateProvider
	j    *agent.Journal
	self seam.ParentRef
}

func (d *gateDriver) RunTurn(ctx context.Context, in []agent.Input) agent.TurnResult {
	g := &gateTurn{self: d.self, release: make(chan struct{}), ended: make(chan agent.StopReason, 1)}
	d.p.mu.Lock()
	d.p.turns[d.self.AgentID] = g
	d.p.mu.Unlock()
	d.p.began <- d.self.AgentID
	stop := agent.StopCompleted
	select {
	case <-g.release:
	case <-ctx.Done():
		stop = agent.StopAborted
	}
	g.ended <- stop
	return agent.TurnResult{Output: "turn of " + d.self.AgentID, StopReason: stop}
}
func (d *gateDriver) Journal() *agent.Journal { return d.j }
func (*gateDriver) Close() error              { return nil }

func (g *gateTurn) wantEnd(t *testing.T, want agent.StopReason) {
	t.Helper()
	select {
	case got := <-g.ended:
		if got != want {
			t.Fatalf("the turn of %s ended %s, want %s", g.self.AgentID, got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the turn of %s did not end", g.self.AgentID)
	}
}

// Interrupt is authorised for the direct parent and for any ancestor above
// it, agent or root principal, and for nobody else: not a sibling, not a
// descendant, not the child itself.
// An ancestor's interrupt stops that turn only; the agents in between keep
// running.
func TestInterruptByAncestors(t *testing.T) {
	p := newGateProvider()
	m := manager.New(manager.Options{Store: memstore.New()})
	if err := m.Register(p); err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	ctx := context.Background()
	root := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
	start := func(parent seam.ParentRef) *gateTurn {
		t.Helper()
		st, err := m.StartContinuable(ctx, "gate", seam.StartRequest{Label: "l", Prompt: "work", Parent: parent}, false)
		if err != nil {
			t.Fatal(err)
		}
		return p.turn(t, st.ChildID)
	}
	a := start(root)     // root's child
	b := start(a.self)   // a's child
	c := start(b.self)   // a's grandchild
	sib := start(a.self) // b's sibling

	refused := []struct {
		name   string
		caller seam.ParentRef
	}{
		{"a sibling of the parent", sib.self},
		{"the child itself", c.self},
	}
	for _, r := range refused {
		wantCode(t, m.Interrupt(r.caller, c.self.AgentID), seam.ErrUnauthorized)
	}
	// A descendant may not interrupt its ancestors.
	wantCode(t, m.Interrupt(c.self, b.self.AgentID), seam.ErrUnauthorized)
	wantCode(t, m.Interrupt(c.self, a.self.AgentID), seam.ErrUnauthorized)

	if err := m.Interrupt(a.self, c.self.AgentID); err != nil {
		t.Fatalf("the grandparent's interrupt: %v", err)
	}
	c.wantEnd(t, agent.StopAborted)
	// b and a were not cancelled: released, their turns complete.
	close(b.release)
	b.wantEnd(t, agent.StopCompleted)
	close(a.release)
	a.wantEnd(t, agent.StopCompleted)

	// c's turn is over: the ancestor's interrupt is an accepted no-op and
	// a stranger is still refused.
	if err := m.Interrupt(a.self, c.self.AgentID); err != nil {
		t.Errorf("an ancestor's interrupt of an ended turn = %v, want a no-op", err)
	}
	wantCode(t, m.Interrupt(sib.self, c.self.AgentID), seam.ErrUnauthorized)
	close(sib.release)
	sib.wantEnd(t, agent.StopCompleted)
}

// Who may interrupt a grandchild: its ancestors (the root principal of its
// tree, a live ancestor agent, its parent), and nobody else; a refusal
// says what is allowed, and names the target.
func TestInterruptWhoMay(t *testing.T) {
	cases := []struct {
		name    string
		caller  func(root seam.ParentRef, a, b, sib *gateTurn) seam.ParentRef
		allowed bool
	}{
		{"the root principal of its tree", func(root seam.ParentRef, _, _, _ *gateTurn) seam.ParentRef { return root }, true},
		{"another principal", func(seam.ParentRef, *gateTurn, *gateTurn, *gateTurn) seam.ParentRef {
			return seam.ParentRef{Principal: "other"}
		}, false},
		{"a sibling of its parent", func(_ seam.ParentRef, _, _, sib *gateTurn) seam.ParentRef { return sib.self }, false},
		{"a live ancestor agent", func(_ seam.ParentRef, a, _, _ *gateTurn) seam.ParentRef { return a.self }, true},
		{"its parent", func(_ seam.ParentRef, _, b, _ *gateTurn) seam.ParentRef { return b.self }, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newGateProvider()
			m := manager.New(manager.Options{Store: memstore.New()})
			if err := m.Register(p); err != nil {
				t.Fatal(err)
			}
			defer m.Close(context.Background())
			ctx := context.Background()
			root := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
			start := func(parent seam.ParentRef) *gateTurn {
				t.Helper()
				st, err := m.StartContinuable(ctx, "gate", seam.StartRequest{Label: "l", Prompt: "work", Parent: parent}, false)
				if err != nil {
					t.Fatal(err)
				}
				return p.turn(t, st.ChildID)
			}
			a := start(root)     // root's child
			b := start(a.self)   // a's child
			c := start(b.self)   // the target: root's great-grandchild, a's grandchild
			sib := start(a.self) // b's sibling
			err := m.Interrupt(tc.caller(root, a, b, sib), c.self.AgentID)
			if tc.allowed {
				if err != nil {
					t.Fatalf("Interrupt = %v, want it allowed", err)
				}
				c.wantEnd(t, agent.StopAborted)
			} else {
				wantCode(t, err, seam.ErrUnauthorized)
				want := "you may interrupt only your own descendants (your children and theirs); " + c.self.AgentID + " is not one of them"
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("refusal = %q, want it to say %q", err, want)
				}
				close(c.release)
				c.wantEnd(t, agent.StopCompleted)
			}
			for _, g := range []*gateTurn{b, sib, a} {
				close(g.release)
				g.wantEnd(t, agent.StopCompleted)
			}
		})
	}
}
