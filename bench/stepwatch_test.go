//go:build postgres

package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/managertest"
	"github.com/mcp-subagent/mcp-subagent/internal/pgtest"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/pgstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// BenchmarkPGStepToWatch measures how late a turn's step reaches a
// transcript watch at an instance that does not hold the child (the web
// view's or a resource subscription's): two managers on one PostgreSQL
// database, A holding a child whose turn journals one step at a time, B
// watching it. Each step's delay runs from the commit at A that stores it
// to B's read, at its watch's signal, of a transcript that holds it. Steps
// are spaced by a pseudo-random pause of 0–1 s (seeded: the same every
// run), so that a watch that polls is caught anywhere in its interval.
// MCP_SUBAGENT_BENCH_STEPS steps (default 30). Reported: the delay's p50,
// p99 and mean, and the commit of a step at A (p50), which carries the
// wake-up's NOTIFY.
func BenchmarkPGStepToWatch(b *testing.B) {
	steps := envInt(b, "MCP_SUBAGENT_BENCH_STEPS", 30)
	ctx := context.Background()
	dsn := pgtest.New(b).DSN(b)
	sa := &commitClock{Store: openDSN(b, dsn), at: map[string]time.Time{}}
	sa.noted = sync.NewCond(&sa.mu)
	a := manager.New(manager.Options{Store: sa, OwnerID: "instance-a", LeaseTTL: time.Minute, Logger: quiet})
	b.Cleanup(func() { _ = a.Close(context.Background()) })
	p := &managertest.Rounds{Steps: make(chan string)}
	if err := a.Register(p); err != nil {
		b.Fatal(err)
	}
	mb := manager.New(manager.Options{Store: openDSN(b, dsn), OwnerID: "instance-b", LeaseTTL: time.Minute, Logger: quiet})
	b.Cleanup(func() { _ = mb.Close(context.Background()) })

	s, err := a.StartContinuable(ctx, "rounds", seam.StartRequest{Label: "watched", Prompt: "rounds", Parent: root, Cwd: b.TempDir()}, false)
	if err != nil {
		b.Fatal(err)
	}
	defer close(p.Steps)
	p.Steps <- "warm-up"
	sa.committed("warm-up") // the child is stored, its turn journaling
	readable := func(w *manager.Watch, seen *int64, text string) time.Time {
		deadline := time.After(30 * time.Second)
		for {
			tr, err := mb.Transcript(ctx, root, s.ChildID, *seen)
			if err != nil {
				b.Fatal(err)
			}
			*seen = tr.Len
			if slices.ContainsFunc(tr.Entries, func(e manager.TranscriptEntry) bool { return e.Text == text }) {
				return time.Now()
			}
			select {
			case <-w.C:
			case <-deadline:
				b.Fatalf("%s was not readable at B within 30s", text)
			}
		}
	}
	w, err := mb.Watch(ctx, root, s.ChildID)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	var seen int64
	readable(w, &seen, "warm-up")
	rng := rand.New(rand.NewPCG(26, 3))
	var delays []time.Duration
	b.ResetTimer()
	for i := range steps {
		time.Sleep(time.Duration(rng.Int64N(int64(time.Second)))) // where in a poll's interval the step lands
		text := fmt.Sprintf("step %d", i)
		p.Steps <- text
		at := readable(w, &seen, text)
		delays = append(delays, at.Sub(sa.committed(text)))
	}
	b.StopTimer()
	var sum time.Duration
	for _, d := range delays {
		sum += d
	}
	b.ReportMetric(pct(delays, 50), "p50-ms")
	b.ReportMetric(pct(delays, 99), "p99-ms")
	b.ReportMetric(float64((sum/time.Duration(len(delays))).Microseconds())/1000, "mean-ms")
	b.ReportMetric(sa.commitP50(), "step-commit-p50-ms")
}

// commitClock is instance A's store: it notes when the commit holding
// each step's text returned, and how long a write of steps alone took.
// It embeds the concrete store, so A's manager finds its wake-ups and its
// other abilities as on the store itself.
type commitClock struct {
	*pgstore.Store
	mu      sync.Mutex
	noted   *sync.Cond // on mu: broadcast when at grows
	at      map[string]time.Time
	commits []time.Duration
}

func (c *commitClock) WriteChild(ctx context.Context, id string, w seam.ChildWrite) error {
	t := time.Now()
	err := c.Store.WriteChild(ctx, id, w)
	done := time.Now()
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	stepsOnly := len(w.Events) > 0 && w.Create == nil && w.Claim == nil && w.Settle == nil && len(w.Enqueue) == 0
	if stepsOnly {
		c.commits = append(c.commits, done.Sub(t))
	}
	for _, e := range w.Events {
		if e.Message != nil && e.Message.Role == seam.RoleAssistant {
			c.at[e.Message.Content] = done
		}
	}
	c.noted.Broadcast()
	return nil
}

// committed waits for the commit holding text to return and says when
// it did (B may read it first: the NOTIFY goes out at COMMIT, before A
// has the answer).
func (c *commitClock) committed(text string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if at, ok := c.at[text]; ok {
			return at
		}
		c.noted.Wait()
	}
}

func (c *commitClock) commitP50() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return pct(c.commits, 50)
}
