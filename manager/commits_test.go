package manager_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// writeCounter counts a store's child writes.
type writeCounter struct {
	seam.Store
	mu     sync.Mutex
	writes []seam.ChildWrite
}

func (s *writeCounter) WriteChild(ctx context.Context, id string, w seam.ChildWrite) error {
	s.mu.Lock()
	s.writes = append(s.writes, w)
	s.mu.Unlock()
	return s.Store.WriteChild(ctx, id, w)
}

// A short foreground turn on a driver that acts from its first moment
// (not gated) costs three commits: the record with its first message
// before the turn, the turn's start taking the message out of the stored
// inbox before the driver acts on it (so a crash then closes the turn
// instead of running the message again), and the rest of the turn's
// events with the settlement after it (events nobody waits for linger for
// company instead of going out alone while the model works). The caller
// still gets the outcome only once it is committed.
func TestAShortForegroundTurnCommitsThrice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &writeCounter{Store: memstore.New()}
		p := &bubbleProvider{}
		m := manager.New(manager.Options{Store: st})
		if err := m.Register(p); err != nil {
			t.Fatal(err)
		}
		s, err := m.StartContinuable(context.Background(), "bubble", seam.StartRequest{Label: "l", Prompt: "go", Parent: seam.ParentRef{Principal: "p", Cwd: "/w"}}, true)
		if err != nil {
			t.Fatal(err)
		}
		// The model is "working": the turn's first events are journaled,
		// and every goroutine has done what it would do before time moves.
		synctest.Wait()
		p.current(t, s.ChildID).end <- agent.StopCompleted
		res, ok := s.Wait(context.Background())
		if !ok || res.StopReason != agent.StopCompleted {
			t.Fatalf("Wait = %+v, %v", res, ok)
		}
		// Committed before it was handed over: the journal holds the turn
		// (after its budget grant).
		if n, err := st.JournalLen(context.Background(), s.ChildID); err != nil || n != 5 {
			t.Errorf("stored journal = %d events, %v; want the grant and the turn's 4 committed", n, err)
		}
		synctest.Wait()
		st.mu.Lock()
		ws := append([]seam.ChildWrite(nil), st.writes...)
		st.mu.Unlock()
		if len(ws) != 3 || ws[0].Create == nil || len(ws[0].Enqueue) != 1 || len(ws[1].Events) != 3 || len(ws[1].Dequeue) != 1 || ws[2].Settle == nil || len(ws[2].Events) != 2 {
			for i, w := range ws {
				t.Logf("write %d: create %v enqueue %d dequeue %d events %d settle %v", i, w.Create != nil, len(w.Enqueue), len(w.Dequeue), len(w.Events), w.Settle != nil)
			}
			t.Errorf("%d writes, want 3: the record with its prompt, the turn's start taking it, then the rest of the events with the settlement", len(ws))
		}
		if err := m.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// A turn's start (the budget grant, the start, its input, which leaves the
// stored inbox with them) is committed before the driver acts on it, not
// after a linger: a crash from then on closes the turn rather than
// running its message again.
func TestATurnsStartIsCommittedBeforeItsDriverActs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		p := &bubbleProvider{}
		m := manager.New(manager.Options{Store: st})
		if err := m.Register(p); err != nil {
			t.Fatal(err)
		}
		s, err := m.StartContinuable(context.Background(), "bubble", seam.StartRequest{Label: "l", Prompt: "go", Parent: seam.ParentRef{Principal: "p", Cwd: "/w"}}, false)
		if err != nil {
			t.Fatal(err)
		}
		// The driver is "working": the bubble's clock has not moved, so
		// nothing lingered its way out.
		synctest.Wait()
		if n, err := st.JournalLen(context.Background(), s.ChildID); err != nil || n != 3 {
			t.Errorf("the stored journal has %d events, %v, as the driver works; want the grant and the turn's first 2", n, err)
		}
		if q, err := st.Queued(context.Background(), s.ChildID); err != nil || len(q) != 0 {
			t.Errorf("the stored inbox holds %d messages, %v, as the driver works; want the turn's taken", len(q), err)
		}
		// Written out and parked mid-turn, the child holds no writer
		// goroutine: only its turn's.
		if n := goroutinesIn("persister.(*Writer)."); n != 0 {
			t.Errorf("a parked child holds %d writer goroutines, want 0", n)
		}
		p.current(t, s.ChildID).end <- agent.StopCompleted
		synctest.Wait()
		if err := m.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// goroutinesIn counts the goroutines of the calling bubble (or process)
// whose stack has a frame of fn.
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			n++
		}
	}
	return n
}
