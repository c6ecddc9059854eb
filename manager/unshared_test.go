package manager_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/llm/openai"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist"
	"github.com/mcp-subagent/mcp-subagent/providers/spawn"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// queuedReads counts the reads of stored inboxes; embedding the bbolt
// store keeps its statement that it is not shared (seam.Shared).
type queuedReads struct {
	*persist.Store
	n atomic.Int64
}

func (s *queuedReads) Queued(ctx context.Context, id string) ([]seam.QueuedMessage, error) {
	s.n.Add(1)
	return s.Store.Queued(ctx, id)
}

// On a store no other instance writes, a resident child's turns do not
// read its stored inbox for messages admitted elsewhere: none can be.
// Follow-ups queued behind a turn still run, in order.
func TestAnUnsharedStoreIsNotReadForForwardedMessages(t *testing.T) {
	held, release := make(chan struct{}), make(chan struct{})
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		if req.LastUserText() == "first" {
			close(held)
			<-release
		}
		return fakeopenai.Reply{Text: "done: " + req.LastUserText()}
	})
	defer fake.Close()
	client := openai.New(transport.Config{BaseURL: fake.URL(), APIKey: "k", RetryBaseDelay: time.Millisecond})
	bolt, err := persist.Open(t.TempDir(), persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	st := &queuedReads{Store: bolt}
	m := manager.New(manager.Options{Store: st})
	defer m.Close(context.Background())
	if err := m.Register(spawn.New(spawn.Options{Client: client, Model: "m"})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	root := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
	s, err := m.StartContinuable(ctx, "spawn", seam.StartRequest{Label: "l", Prompt: "first", Parent: root}, false)
	if err != nil {
		t.Fatal(err)
	}
	<-held
	var last *manager.Sent
	for _, text := range []string{"second", "third", "fourth"} {
		if last, err = m.Followup(ctx, root, s.ChildID, text, text == "fourth"); err != nil || last.Route != manager.RouteQueued {
			t.Fatalf("follow-up %s = %+v, %v; want queued", text, last, err)
		}
	}
	close(release)
	if res, ok := last.Wait(ctx); !ok || res.Output != "done: fourth" {
		t.Fatalf("the last follow-up = %+v, %v", res, ok)
	}
	if n := st.n.Load(); n != 0 {
		t.Errorf("the stored inbox was read %d times over four turns of a resident child on an unshared store; want none", n)
	}
}
