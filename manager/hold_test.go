package manager_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/managertest"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Servers whose children's turns can be held mid-turn: several managers on
// one store, as several instances are (the takeover and cluster tests).

// holdProvider is managertest.Hold, its channels under the names these
// tests use.
type holdProvider struct {
	*managertest.Hold
	holding chan string
	release chan struct{}
}

func newHoldProvider(owner string) *holdProvider {
	h := managertest.NewHold(owner)
	return &holdProvider{Hold: h, holding: h.Holding, release: h.Release}
}

// server starts a manager on st running holdProvider children, closed
// when the test ends; what its turns answer names label.
func server(t *testing.T, opts manager.Options, label string) (*manager.Manager, *holdProvider) {
	t.Helper()
	m := manager.New(opts)
	p := newHoldProvider(label)
	if err := m.Register(p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m, p
}

// startHeld starts a child at m whose first turn holds mid-turn, with its
// caller waiting, and returns once it holds.
func startHeld(t *testing.T, m *manager.Manager, p *holdProvider, root seam.ParentRef) *manager.Started {
	t.Helper()
	s, err := m.StartContinuable(context.Background(), "hold", seam.StartRequest{Label: "l", Prompt: "hold: first", Parent: root}, true)
	if err != nil {
		t.Fatal(err)
	}
	<-p.holding
	return s
}

// waitFor waits up to 30 s for a turn's outcome.
func waitFor(t *testing.T, turn interface {
	Wait(context.Context) (seam.Result, bool)
}, what string) seam.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, ok := turn.Wait(ctx)
	if !ok {
		t.Fatalf("%s: no outcome within 30s", what)
	}
	return res
}

// waitSettled waits until the child holds no claim and nothing is queued
// for it (its settlement wakes its watchers).
func waitSettled(ctx context.Context, st seam.Store, id string) error {
	ch, stop, err := st.(seam.Waker).Watch(ctx, id)
	if err != nil {
		return err
	}
	defer stop()
	deadline := time.After(30 * time.Second)
	for {
		_, claimed, err := st.ClaimOf(ctx, id)
		if err != nil {
			return err
		}
		q, err := st.Queued(ctx, id)
		if err != nil {
			return err
		}
		if !claimed && len(q) == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-deadline:
			return fmt.Errorf("child %s did not settle within 30s (claimed %v, queued %d)", id, claimed, len(q))
		}
	}
}
