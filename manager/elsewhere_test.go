package manager_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/llm/openai"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/providers/spawn"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// headerReads records which children's headers were read through it.
type headerReads struct {
	seam.Store
	mu   sync.Mutex
	read map[string]bool
}

func (s *headerReads) Header(ctx context.Context, id string) (seam.Header, error) {
	s.mu.Lock()
	s.read[id] = true
	s.mu.Unlock()
	return s.Store.Header(ctx, id)
}

// A status-filtered listing at an instance that holds none of the
// children lists the caller's children resident at another instance,
// reading the headers of those only: not of every child the other
// instance holds for other principals.
func TestAFilteredListingReadsOnlyTheCallersChildrenElsewhere(t *testing.T) {
	release := make(chan struct{})
	held := make(chan string, 8)
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		held <- req.LastUserText()
		<-release
		return fakeopenai.Reply{Text: "done"}
	})
	defer fake.Close() // after the release: it waits for the requests
	defer close(release)
	client := openai.New(transport.Config{BaseURL: fake.URL(), APIKey: "k", RetryBaseDelay: time.Millisecond})
	st := memstore.New()
	b := &headerReads{Store: st, read: map[string]bool{}}
	newMgr := func(owner string, st seam.Store) *manager.Manager {
		m := manager.New(manager.Options{Store: st, OwnerID: owner, LeaseTTL: time.Minute})
		if err := m.Register(spawn.New(spawn.Options{Client: client, Model: "m"})); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close(context.Background()) })
		return m
	}
	a, atB := newMgr("server-a", st), newMgr("server-b", b)
	ctx := context.Background()
	mine := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
	other := seam.ParentRef{Principal: "q", Cwd: t.TempDir()}
	start := func(root seam.ParentRef) string {
		s, err := a.StartContinuable(ctx, "spawn", seam.StartRequest{Label: "l", Prompt: "hold", Parent: root}, false)
		if err != nil {
			t.Fatal(err)
		}
		<-held
		return s.ChildID
	}
	id := start(mine)
	others := []string{start(other), start(other), start(other)}
	p, err := atB.List(mine, manager.ListQuery{Status: manager.StatusRunning})
	if err != nil || len(p.Rows) != 1 || p.Rows[0].ID != id {
		t.Fatalf("B's listing of running children = %+v, %v; want %s", p.Rows, err, id)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, o := range others {
		if b.read[o] {
			t.Errorf("B read the header of %s, another principal's child held at A", o)
		}
	}
}
