package manager_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// instantProvider runs continuable children whose every turn completes at
// once, recorded as a real driver records it.
type instantProvider struct{}

func (instantProvider) Name() string                    { return "instant" }
func (instantProvider) Capabilities() seam.Capabilities { return seam.Capabilities{} }
func (instantProvider) InheritsParentContext() bool     { return false }
func (instantProvider) Continuable()                    {}
func (instantProvider) Prepare(context.Context, seam.StartRequest) (seam.CreationInputs, error) {
	return seam.CreationInputs{}, nil
}
func (instantProvider) NewDriver(_ context.Context, r seam.DriverRequest) (seam.Driver, error) {
	return instantDriver{r.Journal}, nil
}

type instantDriver struct{ j *agent.Journal }

func (d instantDriver) RunTurn(_ context.Context, in []agent.Input) agent.TurnResult {
	n := d.j.NextTurn()
	d.j.Append(agent.Event{Kind: agent.EventTurnStart, Turn: n})
	for _, x := range in {
		d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: n, Source: x.Source, Message: &seam.Message{Role: seam.RoleUser, Content: x.Text}})
	}
	d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: n, Message: &seam.Message{Role: seam.RoleAssistant, Content: "done"}})
	d.j.Append(agent.Event{Kind: agent.EventTurnEnd, Turn: n, StopReason: agent.StopCompleted})
	return agent.TurnResult{Output: "done", StopReason: agent.StopCompleted}
}
func (d instantDriver) Journal() *agent.Journal { return d.j }
func (instantDriver) Close() error              { return nil }

// Following next cursors visits each of 3,000 children exactly once, in
// creation order, while more children are being created; the children
// created meanwhile are seen at most once, and all of them by a listing
// started after they were.
func TestPagingVisitsEveryChildOnceWhileMoreAreCreated(t *testing.T) {
	m := newManager(t, manager.Options{Store: memstore.New()}, instantProvider{})
	ctx := context.Background()
	root := seam.ParentRef{Principal: "pager", Cwd: "/work"}
	start := func(i int) string {
		st, err := m.StartContinuable(ctx, "instant", seam.StartRequest{Label: fmt.Sprint("c", i), Prompt: "go", Parent: root}, false)
		if err != nil {
			t.Error(err)
			return ""
		}
		return st.ChildID
	}
	const n, more = 3000, 400
	original := map[string]bool{}
	for i := range n {
		original[start(i)] = true
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var later []string
	go func() { // more children arrive while the pages are read
		defer wg.Done()
		for i := range more {
			later = append(later, start(n+i))
		}
	}()
	seen := map[string]int{}
	var last manager.Row
	q := manager.ListQuery{Limit: 97}
	pages := 0
	for {
		p, err := m.List(root, q)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(p.Rows) > q.Limit {
			t.Fatalf("page %d has %d rows, over its limit %d", pages, len(p.Rows), q.Limit)
		}
		for _, r := range p.Rows {
			seen[r.ID]++
			if pages > 1 || r.ID != p.Rows[0].ID {
				if !r.CreatedAt.After(last.CreatedAt) && !(r.CreatedAt.Equal(last.CreatedAt) && r.ID > last.ID) {
					t.Fatalf("row %s (%v) does not follow %s (%v)", r.ID, r.CreatedAt, last.ID, last.CreatedAt)
				}
			}
			last = r
		}
		if p.Next == "" {
			break
		}
		q.Cursor = p.Next
	}
	wg.Wait()
	for id := range original {
		if seen[id] != 1 {
			t.Errorf("child %s was listed %d times, want once", id, seen[id])
		}
	}
	for id, c := range seen {
		if c > 1 {
			t.Errorf("child %s was listed %d times", id, c)
		}
	}
	// A listing started now sees every child, the later ones too.
	total := 0
	for q := (manager.ListQuery{Limit: manager.MaxPageLimit}); ; {
		p, err := m.List(root, q)
		if err != nil {
			t.Fatal(err)
		}
		total += len(p.Rows)
		if p.Next == "" {
			break
		}
		q.Cursor = p.Next
	}
	if total != n+len(later) {
		t.Errorf("a fresh listing has %d rows, want %d", total, n+len(later))
	}
	t.Logf("%d pages; %d of the %d later children seen while paging", pages, len(seen)-n, more)
}

// A status filter keeps only rows with that status, across pages; bad
// limits, statuses and cursors are refused naming the field.
func TestPagingFiltersAndRefusals(t *testing.T) {
	p := &bubbleProvider{}
	bubble(t, memstore.New(), p, func(m *manager.Manager) {
		root := seam.ParentRef{Principal: "f", Cwd: "/work"}
		var ready, running []string
		for i := range 7 {
			st := startBubble(t, m, root, fmt.Sprint("t", i), false)
			synctest.Wait()
			if i%2 == 0 {
				p.current(t, st.ChildID).end <- agent.StopCompleted // it settles: ready
				ready = append(ready, st.ChildID)
			} else {
				running = append(running, st.ChildID)
			}
		}
		synctest.Wait()
		collect := func(status string) []string {
			var ids []string
			q := manager.ListQuery{Status: status, Limit: 2}
			for {
				pg, err := m.List(root, q)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range pg.Rows {
					ids = append(ids, r.ID)
				}
				if pg.Next == "" {
					return ids
				}
				q.Cursor = pg.Next
			}
		}
		if got := collect(manager.StatusReady); !slices.Equal(got, ready) {
			t.Errorf("ready = %v, want %v", got, ready)
		}
		if got := collect(manager.StatusRunning); !slices.Equal(got, running) {
			t.Errorf("running = %v, want %v", got, running)
		}
		if got := collect(manager.StatusIdle); len(got) != 0 {
			t.Errorf("idle = %v, want none", got)
		}
		if got := collect(""); len(got) != 7 {
			t.Errorf("unfiltered = %v, want all 7", got)
		}
		first, err := m.List(root, manager.ListQuery{Status: manager.StatusReady, Limit: 1})
		if err != nil || first.Next == "" {
			t.Fatalf("first ready page = %+v, %v", first, err)
		}
		for _, tc := range []struct {
			q    manager.ListQuery
			want string
		}{
			{manager.ListQuery{Limit: 501}, "limit"},
			{manager.ListQuery{Limit: -1}, "limit"},
			{manager.ListQuery{Status: "asleep"}, "status"},
			{manager.ListQuery{Cursor: "!!"}, "cursor"},
			{manager.ListQuery{Cursor: first.Next}, `cursor: it belongs to a listing with scope children and status "ready"`},
			{manager.ListQuery{Cursor: first.Next, Status: manager.StatusReady, Descendants: true}, "cursor"},
		} {
			_, err := m.List(root, tc.q)
			var e *seam.Error
			if !errors.As(err, &e) || e.Code != seam.CodeInvalidRequest || !strings.Contains(e.Message, tc.want) {
				t.Errorf("List(%+v) = %v, want INVALID_REQUEST naming %q", tc.q, err, tc.want)
			}
		}
	})
}
