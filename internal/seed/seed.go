// Package seed fills a store with children as a long-running server would
// have them, for benchmarks and tests that need a big store quickly.
package seed

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// TurnEvents returns n complete turns (four events each: start, the user's
// question, the answer with its usage, end) starting at sequence from.
func TurnEvents(from int64, n int) []agent.Event {
	evs := make([]agent.Event, 0, 4*n)
	seq := from
	add := func(e agent.Event) {
		e.Seq = seq
		e.Time = time.Now().UTC()
		seq++
		evs = append(evs, e)
	}
	for t := 1; t <= n; t++ {
		add(agent.Event{Kind: agent.EventTurnStart, Turn: t})
		add(agent.Event{Kind: agent.EventMessage, Turn: t, Source: agent.SourceUser, Message: &seam.Message{Role: seam.RoleUser, Content: "question " + strconv.Itoa(t)}})
		add(agent.Event{Kind: agent.EventMessage, Turn: t, Message: &seam.Message{Role: seam.RoleAssistant, Content: "answer " + strconv.Itoa(t)}, Usage: &seam.Usage{InputTokens: 10, OutputTokens: 5}})
		add(agent.Event{Kind: agent.EventTurnEnd, Turn: t, StopReason: agent.StopCompleted})
	}
	return evs
}

// Children writes n settled continuable spawn children of parent, one
// turn and a checkpoint each, ids agent-%016d in creation order, with 64
// writers so the store's group commit batches them (100,000 one commit at
// a time would take minutes).
func Children(st seam.Store, parent seam.ParentRef, n int) error {
	now := time.Now().UTC()
	var (
		wg    sync.WaitGroup
		next  atomic.Int64
		errMu sync.Mutex
		first error
	)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				id := fmt.Sprintf("agent-%016d", i)
				h := seam.Header{ID: id, Parent: parent.Address(), Principal: parent.Principal, Depth: parent.Depth + 1, DepthCap: 3,
					Mode: seam.ModeContinuable, Provider: "spawn", Label: "child " + strconv.Itoa(i), Cwd: os.TempDir(),
					CreatedAt: now.Add(time.Duration(i))}
				d := seam.Descriptor{Version: seam.DescriptorVersion, Mode: seam.ModeContinuable, Provider: "spawn", Label: h.Label}
				evs := TurnEvents(0, 1)
				cp := seam.Checkpoint{Seq: int64(len(evs)), Mode: h.Mode, Label: h.Label}
				err := st.WriteChild(context.Background(), id, seam.ChildWrite{Create: &seam.NewChild{Header: h, Descriptor: d}, Events: evs, Settle: &cp})
				if err != nil {
					errMu.Lock()
					if first == nil {
						first = fmt.Errorf("seed %s: %w", id, err)
					}
					errMu.Unlock()
					next.Store(int64(n)) // stop the other writers
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}
