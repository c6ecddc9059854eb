package persist

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
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
			errs[i] = s.WriteChild(ctx, id, seam.ChildWrite{Create: &seam.NewChild{Header: h, Descriptor: testDescriptor()},
				Events: testTurn(0, "hi")})
		}()
	}
	// A write whose events skip a sequence, racing with the others.
	wg.Add(1)
	var bad error
	go func() {
		defer wg.Done()
		h := testHeader("bad", "p", time.Hour)
		bad = s.WriteChild(ctx, "bad", seam.ChildWrite{Create: &seam.NewChild{Header: h, Descriptor: testDescriptor()},
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
	if _, err := s.Header(ctx, "bad"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the refused write left its child behind: %v", err)
	}
	listed := listedIDs(t, s, "p")
	if len(listed) != n {
		t.Fatalf("children = %d; want %d", len(listed), n)
	}
	for _, id := range listed {
		if evs, err := s.Events(ctx, id); err != nil || len(evs) != 3 {
			t.Errorf("%s: %d events, %v", id, len(evs), err)
		}
	}
}
