package manager_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// authorityTree is the tree every cell of TestWhoMayDoWhatToWhom acts in:
// principal p's root child g, g's children pa and u, pa's children t (the
// target) and s. Every turn holds until the manager closes.
type authorityTree struct {
	m         *manager.Manager
	p         *gateProvider
	root      seam.ParentRef
	g, pa, u  *gateTurn
	t, s      *gateTurn
	callbacks map[string]seam.ParentRef // the identity each child's callback token was minted for
}

func newAuthorityTree(t *testing.T) *authorityTree {
	t.Helper()
	tr := &authorityTree{p: newGateProvider(), root: seam.ParentRef{Principal: "p", Cwd: t.TempDir()},
		callbacks: map[string]seam.ParentRef{}}
	var mu sync.Mutex
	tr.m = manager.New(manager.Options{Store: memstore.New(), Callback: func(self seam.ParentRef) (seam.Callback, func()) {
		mu.Lock()
		tr.callbacks[self.AgentID] = self
		mu.Unlock()
		return seam.Callback{URL: "http://127.0.0.1:1/mcp", Token: "token-of-" + self.AgentID}, func() {}
	}})
	if err := tr.m.Register(tr.p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.m.Close(context.Background()) })
	start := func(parent seam.ParentRef) *gateTurn {
		t.Helper()
		st, err := tr.m.StartContinuable(context.Background(), "gate", seam.StartRequest{Label: "l", Prompt: "work", Parent: parent}, false)
		if err != nil {
			t.Fatal(err)
		}
		return tr.p.turn(t, st.ChildID)
	}
	tr.g = start(tr.root)
	tr.pa = start(tr.g.self)
	tr.u = start(tr.g.self)
	tr.t = start(tr.pa.self)
	tr.s = start(tr.pa.self)
	mu.Lock()
	defer mu.Unlock()
	for _, c := range []*gateTurn{tr.g, tr.pa, tr.u, tr.t, tr.s} {
		if _, ok := tr.callbacks[c.self.AgentID]; !ok {
			t.Fatalf("no callback was minted for %s", c.self.AgentID)
		}
	}
	return tr
}

// Who may do what to whom, one cell per actor and action, each through the
// manager's public method (so a method that skipped its check fails here,
// not only the check). The target is t, a grandchild of the root child g:
//
//	actor                        send  interrupt  read  report  rm worktree
//	root principal p             no    yes        yes   no      yes
//	parent pa                    yes   yes        yes   yes     no
//	pa through its callback      yes   yes        yes   yes     no
//	grandparent g                no    yes        yes   yes     no
//	sibling s                    no    no         no    yes     no
//	t itself                     no    no         no    yes     no
//	another principal q          no    no         no    no      no
//	external child u (callback)  no    no         no    yes     no
//
// A report names no recipient: "yes" is the actor's report reaching its
// own parent (t's actors report to theirs; p and q have none). The
// refusals are UNAUTHORIZED and say what is allowed. The allowed worktree
// removal reaches the next check (t has no worktree: INVALID_REQUEST);
// TestRemoveWorktreeIsTheRootPrincipals removes a real one.
func TestWhoMayDoWhatToWhom(t *testing.T) {
	actors := []struct {
		name string
		ref  func(tr *authorityTree) seam.ParentRef
		may  map[string]bool
	}{
		{"the root principal of the tree", func(tr *authorityTree) seam.ParentRef { return tr.root },
			map[string]bool{"interrupt": true, "read transcript": true, "remove worktree": true}},
		{"the parent", func(tr *authorityTree) seam.ParentRef { return tr.pa.self },
			map[string]bool{"send": true, "interrupt": true, "read transcript": true, "report": true}},
		{"the parent through its callback identity", func(tr *authorityTree) seam.ParentRef { return tr.callbacks[tr.pa.self.AgentID] },
			map[string]bool{"send": true, "interrupt": true, "read transcript": true, "report": true}},
		{"the grandparent", func(tr *authorityTree) seam.ParentRef { return tr.g.self },
			map[string]bool{"interrupt": true, "read transcript": true, "report": true}},
		{"a sibling", func(tr *authorityTree) seam.ParentRef { return tr.s.self },
			map[string]bool{"report": true}},
		{"the child itself", func(tr *authorityTree) seam.ParentRef { return tr.t.self },
			map[string]bool{"report": true}},
		{"another principal", func(tr *authorityTree) seam.ParentRef { return seam.ParentRef{Principal: "q", Cwd: tr.root.Cwd} },
			map[string]bool{}},
		{"an external child through its callback identity", func(tr *authorityTree) seam.ParentRef { return tr.callbacks[tr.u.self.AgentID] },
			map[string]bool{"report": true}},
	}
	ctx := context.Background()
	actions := []struct {
		name    string
		refusal string // what every refusal of this action says is allowed
		// do runs the action as caller against the tree's target and
		// checks an allowed outcome; it returns the error of a refused one.
		do func(t *testing.T, tr *authorityTree, caller seam.ParentRef, allowed bool) error
	}{
		{"send", "you may send only to your direct children", func(t *testing.T, tr *authorityTree, caller seam.ParentRef, allowed bool) error {
			sent, err := tr.m.Followup(ctx, caller, tr.t.self.AgentID, "more", false)
			if err == nil && sent.Route != manager.RouteQueued {
				t.Errorf("route = %s, want queued behind the running turn", sent.Route)
			}
			return err
		}},
		{"interrupt", "you may interrupt only your own descendants", func(t *testing.T, tr *authorityTree, caller seam.ParentRef, allowed bool) error {
			err := tr.m.Interrupt(caller, tr.t.self.AgentID)
			if err == nil {
				tr.t.wantEnd(t, agent.StopAborted)
			}
			return err
		}},
		{"read transcript", "you may read only your own descendants' transcripts", func(t *testing.T, tr *authorityTree, caller seam.ParentRef, allowed bool) error {
			// Watch is a read too: both answer the same.
			w, werr := tr.m.Watch(ctx, caller, tr.t.self.AgentID)
			if werr == nil {
				w.Stop()
			}
			tx, err := tr.m.Transcript(ctx, caller, tr.t.self.AgentID, 0)
			if (err == nil) != (werr == nil) {
				t.Errorf("Transcript = %v but Watch = %v", err, werr)
			}
			if err == nil && tx.ID != tr.t.self.AgentID {
				t.Errorf("Transcript read %s, want %s", tx.ID, tr.t.self.AgentID)
			}
			if err == nil {
				return werr
			}
			return err
		}},
		{"report", "only a running continuable subagent may report, and only to its own parent", func(t *testing.T, tr *authorityTree, caller seam.ParentRef, allowed bool) error {
			id, err := tr.m.ReportFrom(caller, "progress", manager.DeliveryQuiet)
			if err == nil && id == "" {
				t.Error("an accepted report has no message id")
			}
			return err
		}},
		{"remove worktree", "you may remove only your own principal's subagents' worktrees, as a root caller", func(t *testing.T, tr *authorityTree, caller seam.ParentRef, allowed bool) error {
			_, err := tr.m.RemoveWorktree(ctx, caller, tr.t.self.AgentID)
			if allowed {
				wantCode(t, err, seam.ErrInvalidRequest) // past the authority check: t has no worktree
				if !strings.Contains(err.Error(), "has no worktree") {
					t.Errorf("RemoveWorktree = %v, want it past the authority check to \"has no worktree\"", err)
				}
				return nil
			}
			return err
		}},
	}
	for _, ac := range actors {
		for _, act := range actions {
			allowed := ac.may[act.name]
			verdict := "refused"
			if allowed {
				verdict = "allowed"
			}
			t.Run(ac.name+"/"+act.name+"/"+verdict, func(t *testing.T) {
				tr := newAuthorityTree(t)
				err := act.do(t, tr, ac.ref(tr), allowed)
				if allowed {
					if err != nil {
						t.Fatalf("%s by %s = %v, want it allowed", act.name, ac.name, err)
					}
					return
				}
				wantCode(t, err, seam.ErrUnauthorized)
				if !strings.Contains(err.Error(), act.refusal) {
					t.Errorf("refusal %q does not say what is allowed (%q)", err, act.refusal)
				}
			})
		}
	}
}
