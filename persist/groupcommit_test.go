package persist

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/manager"
)

// Concurrent writes share commits, and one refused write does not take
// the others down with it.
func TestGroupCommitRefusesABadWriteAlone(t *testing.T) {
	s := openTest(t, t.TempDir())
	const n = 40
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("c%02d", i)
			h := testHeader(id, "p", time.Duration(i))
			errs[i] = s.WriteChild(id, manager.ChildWrite{Create: &manager.NewChild{Header: h, Descriptor: testDescriptor()},
				Events: testTurn(0, "hi")})
		}()
	}
	// A write whose events skip a sequence, racing with the others.
	wg.Add(1)
	var bad error
	go func() {
		defer wg.Done()
		h := testHeader("bad", "p", time.Hour)
		bad = s.WriteChild("bad", manager.ChildWrite{Create: &manager.NewChild{Header: h, Descriptor: testDescriptor()},
			Events: testTurn(5, "gap")})
	}()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("write %d: %v", i, err)
		}
	}
	if bad == nil {
		t.Fatal("a write whose events skip a sequence was accepted")
	}
	if _, err := s.Header("bad"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the refused write left its child behind: %v", err)
	}
	hs, _, err := s.Children("p")
	if err != nil || len(hs) != n {
		t.Fatalf("children = %d, %v; want %d", len(hs), err, n)
	}
	for _, h := range hs {
		if evs, err := s.Events(h.ID); err != nil || len(evs) != 3 {
			t.Errorf("%s: %d events, %v", h.ID, len(evs), err)
		}
	}
}
