package manager_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

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

// A short foreground turn costs two commits: the record with its first
// message before the turn, and the turn's events with the settlement
// after it (events nobody waits for linger for company instead of going
// out alone while the model works). The caller still gets the outcome
// only once it is committed.
func TestAShortForegroundTurnCommitsTwice(t *testing.T) {
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
		if len(ws) != 2 || ws[0].Create == nil || len(ws[0].Enqueue) != 1 || ws[1].Settle == nil || len(ws[1].Events) != 5 || len(ws[1].Dequeue) != 1 {
			for i, w := range ws {
				t.Logf("write %d: create %v enqueue %d dequeue %d events %d settle %v", i, w.Create != nil, len(w.Enqueue), len(w.Dequeue), len(w.Events), w.Settle != nil)
			}
			t.Errorf("%d writes, want 2: the record with its prompt, then the events with the settlement", len(ws))
		}
		if err := m.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// A long turn's events do not wait for its end: they are committed once
// they have lingered (10 ms), so a crash loses at most that moment.
func TestALongTurnsEventsAreCommittedAfterTheLinger(t *testing.T) {
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
		synctest.Wait()
		if n, _ := st.JournalLen(context.Background(), s.ChildID); n != 0 {
			t.Errorf("the turn's first events were committed at once (%d), want them lingering", n)
		}
		time.Sleep(15 * time.Millisecond) // the bubble's clock: no real wait
		synctest.Wait()
		if n, err := st.JournalLen(context.Background(), s.ChildID); err != nil || n != 3 {
			t.Errorf("after the linger the stored journal has %d events, %v; want the grant and the turn's first 2", n, err)
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
