package manager_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/managertest"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/manager/retention"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// listedIDs is the ids of caller's children as ListChildren gives them,
// with their statuses.
func listedIDs(t *testing.T, m *manager.Manager, caller seam.ParentRef) map[string]string {
	t.Helper()
	rows, err := managertest.ListChildren(m, caller)
	if err != nil {
		t.Fatalf("ListChildren: %v", err)
	}
	out := map[string]string{}
	for _, r := range rows {
		out[r.ID] = r.Status
	}
	return out
}

func prunedIDs(res retention.Result) []string {
	var out []string
	for _, p := range res.Pruned {
		out = append(out, p.ID)
	}
	slices.Sort(out)
	return out
}

// Prune removes only settled root children idle past the cutoff, each with
// its subtree; a running child and a young settled one stay; a dry run
// names the same children and removes nothing; a follow-up to a pruned id
// is refused.
func TestPruneRemovesOnlySettledChildrenPastTheCutoff(t *testing.T) {
	p := &bubbleProvider{}
	var grandchild string
	p.onTurn = delegating(&grandchild)
	store := memstore.New()
	bubble(t, store, p, func(m *manager.Manager) {
		m0 = m
		old := startBubble(t, m, bubbleRoot, "delegate", false).ChildID
		synctest.Wait()
		p.current(t, grandchild).end <- agent.StopCompleted
		synctest.Wait()
		p.current(t, old).end <- agent.StopCompleted // and the grandchild's notice turn
		synctest.Wait()
		p.current(t, old).end <- agent.StopCompleted
		running := startBubble(t, m, bubbleRoot, "keeps running", false).ChildID
		synctest.Wait()
		if m.Live() != 1 {
			t.Fatalf("%d children resident, want only the running one", m.Live())
		}
		time.Sleep(2 * time.Hour)
		young := startBubble(t, m, bubbleRoot, "young", false).ChildID
		synctest.Wait()
		p.current(t, young).end <- agent.StopCompleted
		synctest.Wait()
		if got := listedIDs(t, m, bubbleRoot); len(got) != 3 || got[running] != "running" || got[old] != "ready" || got[young] != "ready" {
			t.Fatalf("before pruning: %v", got)
		}
		req := retention.Request{Principals: []string{"p"}, Before: time.Now().Add(-time.Hour), DryRun: true}
		dry, err := m.Prune(context.Background(), req)
		if err != nil {
			t.Fatalf("dry run: %v", err)
		}
		if got := prunedIDs(dry); !slices.Equal(got, []string{old}) || !dry.DryRun || dry.Pruned[0].Descendants != 1 || dry.Resident != 1 {
			t.Fatalf("the dry run named %v (%+v), want only %s with its 1 descendant, 1 resident kept", got, dry, old)
		}
		if dry.Pruned[0].StopReason != agent.StopCompleted || dry.Pruned[0].Label != "l" {
			t.Errorf("the dry run's row: %+v", dry.Pruned[0])
		}
		if got := listedIDs(t, m, bubbleRoot); len(got) != 3 {
			t.Fatalf("the dry run removed something: %v", got)
		}
		req.DryRun = false
		res, err := m.Prune(context.Background(), req)
		if err != nil {
			t.Fatalf("Prune: %v", err)
		}
		if got := prunedIDs(res); !slices.Equal(got, []string{old}) || res.Pruned[0].Descendants != 1 {
			t.Fatalf("Prune removed %v (%+v), want %s with its grandchild", got, res, old)
		}
		if got := listedIDs(t, m, bubbleRoot); len(got) != 2 || got[running] != "running" || got[young] != "ready" {
			t.Fatalf("after pruning: %v", got)
		}
		for _, id := range []string{old, grandchild} {
			if _, err := store.Header(context.Background(), id); !errors.Is(err, seam.ErrNotFound) {
				t.Errorf("%s is still stored: %v", id, err)
			}
		}
		if _, err := m.Followup(context.Background(), bubbleRoot, old, "are you there", false); err == nil {
			t.Error("a follow-up to a pruned child was accepted")
		}
		// Another principal's children are not this one's to prune.
		if res, err := m.Prune(context.Background(), retention.Request{Principals: []string{"q"}, Before: time.Now()}); err != nil || len(res.Pruned) != 0 {
			t.Errorf("pruning principal q: %+v, %v", res, err)
		}
		p.current(t, running).end <- agent.StopCompleted
		synctest.Wait()
	})
}

// Bad requests are refused with the field named; a manager without a store
// cannot prune.
func TestPruneRefusals(t *testing.T) {
	m := manager.New(manager.Options{})
	defer m.Close(context.Background())
	var me *seam.Error
	if _, err := m.Prune(context.Background(), retention.Request{Principals: []string{"p"}, Before: time.Now()}); !errors.As(err, &me) || me.Code != seam.CodeControlUnavailable {
		t.Errorf("Prune without a store: %v", err)
	}
	s := manager.New(manager.Options{Store: memstore.New()})
	defer s.Close(context.Background())
	if _, err := s.Prune(context.Background(), retention.Request{Before: time.Now()}); !errors.As(err, &me) || me.Code != seam.CodeInvalidRequest {
		t.Errorf("Prune with no principal: %v", err)
	}
	if _, err := s.Prune(context.Background(), retention.Request{Principals: []string{"p"}}); !errors.As(err, &me) || me.Code != seam.CodeInvalidRequest {
		t.Errorf("Prune with no cutoff: %v", err)
	}
}

// Retention prunes on its own: a settled child once it has been idle past
// the age, never a running one, and age counts from a child's last
// activity, not its creation. Close stops it (the bubble ends with no
// goroutine left).
func TestRetentionPrunesSettledChildrenOnItsOwn(t *testing.T) {
	p := &bubbleProvider{}
	bubble(t, memstore.New(), p, func(m *manager.Manager) {
		m.Retain(retention.Policy{OlderThan: time.Hour, Every: 10 * time.Minute, Principals: []string{"p"}})
		done := startBubble(t, m, bubbleRoot, "finish", false).ChildID
		synctest.Wait()
		p.current(t, done).end <- agent.StopCompleted
		running := startBubble(t, m, bubbleRoot, "run long", false).ChildID
		synctest.Wait()
		time.Sleep(50 * time.Minute)
		synctest.Wait()
		if got := listedIDs(t, m, bubbleRoot); len(got) != 2 {
			t.Fatalf("at 50 minutes: %v; both are younger than an hour", got)
		}
		time.Sleep(30 * time.Minute) // a pass at 60 or 70 minutes removes it
		synctest.Wait()
		if got := listedIDs(t, m, bubbleRoot); len(got) != 1 || got[running] != "running" {
			t.Fatalf("at 80 minutes: %v; want only the running child", got)
		}
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		if got := listedIDs(t, m, bubbleRoot); got[running] != "running" {
			t.Fatalf("retention removed a running child: %v", got)
		}
		// Created over three hours ago, it settles now: it is young.
		p.current(t, running).end <- agent.StopCompleted
		synctest.Wait()
		time.Sleep(50 * time.Minute)
		synctest.Wait()
		if got := listedIDs(t, m, bubbleRoot); got[running] != "ready" {
			t.Fatalf("a child idle for 50 minutes was pruned by its creation age: %v", got)
		}
		time.Sleep(30 * time.Minute)
		synctest.Wait()
		if got := listedIDs(t, m, bubbleRoot); len(got) != 0 {
			t.Fatalf("a child idle for 80 minutes is still kept: %v", got)
		}
	})
}
