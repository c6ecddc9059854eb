package retention

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// tree is a store of children by id (parent: their Header.Parent) and a
// host that removes from it.
type tree struct {
	mu       sync.Mutex
	children map[string]seam.Header
	last     map[string]time.Time // last journal event
	corrupt  map[string]bool
	claimed  map[string]bool
	resident map[string]bool
	removes  int
}

func (s *tree) add(id, parent string, created, last time.Time) {
	s.children[id] = seam.Header{ID: id, Parent: parent, CreatedAt: created, Label: id}
	s.last[id] = last
}

func (s *tree) Residents(context.Context) ([]seam.Claim, error) {
	var out []seam.Claim
	for id := range s.claimed {
		out = append(out, seam.Claim{ChildID: id})
	}
	return out, nil
}

func (s *tree) Listings(_ context.Context, parent string, _ seam.Page) ([]seam.Listing, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []seam.Listing
	for _, h := range s.children {
		if h.Parent == parent {
			out = append(out, seam.Listing{Header: h, Corrupt: s.corrupt[h.ID]})
		}
	}
	return out, nil
}

func (s *tree) Events(_ context.Context, id string) ([]agent.Event, error) {
	return []agent.Event{{Kind: agent.EventTurnEnd, Time: s.last[id], StopReason: agent.StopCompleted}}, nil
}

func (s *tree) Resident(id string) bool { return s.resident[id] }

func (s *tree) Remove(_ context.Context, root string, subtree []string) ([]string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removes++
	if s.resident[root] {
		return nil, true, nil
	}
	for _, id := range subtree {
		delete(s.children, id)
	}
	return subtree, false, nil
}

func newTree() *tree {
	return &tree{children: map[string]seam.Header{}, last: map[string]time.Time{}, corrupt: map[string]bool{},
		claimed: map[string]bool{}, resident: map[string]bool{}}
}

// TestPruneRemovesOnlyOldSettledSubtrees: an old root goes with its
// descendants; a root active after the cutoff, one with a resident or
// claimed descendant, and a corrupt one stay, each counted.
func TestPruneRemovesOnlyOldSettledSubtrees(t *testing.T) {
	s := newTree()
	old, cutoff, recent := time.Now().Add(-3*time.Hour), time.Now().Add(-time.Hour), time.Now()
	root := seam.PrincipalAddress("alice")
	s.add("old", root, old, old)
	s.add("old-kid", "old", old, old)
	s.add("active", root, old, recent)
	s.add("busy", root, old, old)
	s.add("busy-kid", "busy", old, old)
	s.resident["busy-kid"] = true
	s.add("claimed", root, old, old)
	s.claimed["claimed"] = true
	s.add("mangled", root, old, old)
	s.corrupt["mangled"] = true
	s.add("new", root, recent, recent)
	p := Pruner{Store: s, Host: s, Log: slog.New(slog.DiscardHandler)}

	dry, err := p.Prune(context.Background(), Request{Principals: []string{"alice"}, Before: cutoff, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(dry.Pruned) != 1 || dry.Pruned[0].ID != "old" || dry.Pruned[0].Descendants != 1 || s.removes != 0 {
		t.Fatalf("dry run named %+v and removed %d times; want old (1 descendant), nothing removed", dry.Pruned, s.removes)
	}
	res, err := p.Prune(context.Background(), Request{Principals: []string{"alice"}, Before: cutoff})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Pruned) != 1 || res.Pruned[0].ID != "old" || res.Pruned[0].StopReason != agent.StopCompleted {
		t.Fatalf("pruned %+v, want only old", res.Pruned)
	}
	if res.Resident != 2 || res.Unreadable != 1 {
		t.Fatalf("resident %d, unreadable %d; want 2 (busy, claimed) and 1 (mangled)", res.Resident, res.Unreadable)
	}
	if _, ok := s.children["old-kid"]; ok {
		t.Fatal("the old root's descendant was kept")
	}
}

// TestARootThatBecameResidentIsKept: the Host's refusal at removal time
// counts the child as resident, not pruned.
func TestARootThatBecameResidentIsKept(t *testing.T) {
	s := newTree()
	old := time.Now().Add(-3 * time.Hour)
	s.add("c", seam.PrincipalAddress("alice"), old, old)
	p := Pruner{Store: s, Host: &wakes{s}, Log: slog.New(slog.DiscardHandler)}
	res, err := p.Prune(context.Background(), Request{Principals: []string{"alice"}, Before: time.Now()})
	if err != nil || len(res.Pruned) != 0 || res.Resident != 1 {
		t.Fatalf("Prune = %+v, %v; want the child kept as resident", res, err)
	}
}

// wakes is a host whose child is resumed between the read and the removal.
type wakes struct{ *tree }

func (w *wakes) Remove(context.Context, string, []string) ([]string, bool, error) {
	return nil, false, seam.ErrClaimed
}

func TestPruneRefusesAnUnboundedRequest(t *testing.T) {
	p := Pruner{Store: newTree(), Host: newTree(), Log: slog.New(slog.DiscardHandler)}
	for _, req := range []Request{{Before: time.Now()}, {Principals: []string{"alice"}}} {
		_, err := p.Prune(context.Background(), req)
		var se *seam.Error
		if !errors.As(err, &se) || se.Code != seam.CodeInvalidRequest {
			t.Fatalf("Prune(%+v) = %v, want INVALID_REQUEST", req, err)
		}
	}
}

// TestRunPrunesAtOnceAndUntilItsCtxEnds: a pass at once with the policy's
// cutoff and the default principal; nothing at all when retention is off.
func TestRunPrunesAtOnceAndUntilItsCtxEnds(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	Run(context.Background(), Policy{}, func(context.Context, Request) (Result, error) {
		t.Fatal("retention that is off pruned")
		return Result{}, nil
	}, log)
	ctx, cancel := context.WithCancel(context.Background())
	var got Request
	start := time.Now()
	Run(ctx, Policy{OlderThan: time.Hour}, func(_ context.Context, r Request) (Result, error) {
		got = r
		cancel()
		return Result{}, nil
	}, log)
	if len(got.Principals) != 1 || got.Principals[0] != "local" {
		t.Fatalf("principals %v, want the default [local]", got.Principals)
	}
	if d := got.Before.Sub(start.Add(-time.Hour)); d < 0 || d > time.Minute {
		t.Fatalf("cutoff %v is not an hour before the pass", got.Before)
	}
}
