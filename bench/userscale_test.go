package bench

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/internal/seed"
	"github.com/mcp-subagent/mcp-subagent/llm/openai"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist"
	"github.com/mcp-subagent/mcp-subagent/providers/spawn"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// promptDelay answers "done" after the wait the last user message names
// ("sleep <ms>"), so each call's model time is known to its caller.
func promptDelay(_ int, req fakeopenai.Request) fakeopenai.Reply {
	ms, _ := strconv.Atoi(strings.TrimPrefix(req.LastUserText(), "sleep "))
	return fakeopenai.Reply{Text: "done", Delay: time.Duration(ms) * time.Millisecond}
}

// userScaleDelay is call i's model time: lo when hi is not above it, else
// spread over [lo, hi] by a fixed stride, the same sequence in every round.
func userScaleDelay(i int, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	span := int64((hi - lo) / time.Millisecond)
	return lo + time.Duration(int64(i)*7919%(span+1))*time.Millisecond
}

func envInt(tb testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		tb.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

// userScaleLatency reads MCP_SUBAGENT_BENCH_LATENCY: "500ms" (the
// default), or a spread "500ms-5s".
func userScaleLatency(tb testing.TB) (lo, hi time.Duration) {
	v := cmp.Or(os.Getenv("MCP_SUBAGENT_BENCH_LATENCY"), "500ms")
	l, h, spread := strings.Cut(v, "-")
	var err error
	if lo, err = time.ParseDuration(l); err == nil && spread {
		hi, err = time.ParseDuration(h)
	}
	if err != nil {
		tb.Fatalf("MCP_SUBAGENT_BENCH_LATENCY=%q: %v (want 500ms or 500ms-5s)", v, err)
	}
	return lo, hi
}

// BenchmarkUserScale is what a user feels of a delegation at scale: calls
// foreground delegations at once (MCP_SUBAGENT_BENCH_CALLS, default 200)
// to a spawn child, from a principal with 10,000 stored children, the
// fake model (its own process) answering each after its own latency
// (MCP_SUBAGENT_BENCH_LATENCY: "500ms", or a spread "500ms-5s"), for
// MCP_SUBAGENT_BENCH_ROUNDS rounds (default 6) after one of warm-up.
// Reported: round-trip p50/p99, overhead p50/p99 (round trip less that
// call's model time), throughput (calls a second of the rounds' wall
// time), CPU per call, collections per round and the process's peak RSS
// at a round's end. No admission cap: the figure is the delegation's own
// cost, not a queue behind the default 20 seats.
//
// At 325009d its first arm ran with the performance machinery removed
// since (GC floor, stack pre-growth, context shards, no fsync), alternating
// rounds with a second arm without it; BENCHMARKS.md has those figures.
func BenchmarkUserScale(b *testing.B) {
	calls := envInt(b, "MCP_SUBAGENT_BENCH_CALLS", 200)
	rounds := envInt(b, "MCP_SUBAGENT_BENCH_ROUNDS", 6)
	lo, hi := userScaleLatency(b)
	fakeURL, hc, stopFake := startFakeModel(b, "prompt", false)
	defer stopFake()
	client := openai.New(transport.Config{BaseURL: fakeURL, APIKey: "k", Model: "fake-model", HTTPClient: hc})
	st, err := persist.Open(b.TempDir(), persist.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	t0 := time.Now()
	if err := seed.Children(st, root, 10_000); err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded 10,000 children in %s", time.Since(t0).Round(time.Millisecond))
	m := manager.New(manager.Options{Store: st, MaxRunningChildren: -1})
	if err := m.Register(spawn.New(spawn.Options{Client: client, Model: "fake-model"})); err != nil {
		b.Fatal(err)
	}
	defer m.Close(context.Background())
	cwd := b.TempDir()
	var (
		mu         sync.Mutex
		lats, over []time.Duration
		wall, cpu  time.Duration
		gcs        uint32
		rss        int64
	)
	round := func(record bool) {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		gc0, cpu0, t0 := ms.NumGC, cpuTime(), time.Now()
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() {
				d := userScaleDelay(i, lo, hi)
				lat, err := foreground(m, cwd, fmt.Sprintf("sleep %d", d.Milliseconds()))
				if err != nil {
					b.Error(err)
					return
				}
				if record {
					mu.Lock()
					lats = append(lats, lat)
					over = append(over, lat-d)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if record {
			runtime.ReadMemStats(&ms)
			wall += time.Since(t0)
			cpu += cpuTime() - cpu0
			gcs += ms.NumGC - gc0
			rss = max(rss, rssKiB())
		}
	}
	round(false) // warm-up: connections, code, the first residents
	for range rounds {
		round(true)
	}
	if len(lats) == 0 {
		b.Fatal("no call recorded")
	}
	n := float64(len(lats))
	b.ReportMetric(pct(lats, 50), "p50-ms")
	b.ReportMetric(pct(lats, 99), "p99-ms")
	b.ReportMetric(pct(over, 50), "overhead-p50-ms")
	b.ReportMetric(pct(over, 99), "overhead-p99-ms")
	b.ReportMetric(n/wall.Seconds(), "calls/s")
	b.ReportMetric(float64(cpu.Microseconds())/1000/n, "cpu-ms/call")
	b.ReportMetric(float64(gcs)/float64(rounds), "GCs/round")
	b.ReportMetric(float64(rss)/1024, "rss-MiB")
}

// pct is the p-th percentile of ds, in milliseconds.
func pct(ds []time.Duration, p int) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[min(len(s)-1, len(s)*p/100)].Microseconds()) / 1000
}

// foreground is one foreground delegation to a spawn child of root, as
// the subagent tool makes it: started, waited for and committed. It
// returns the round trip.
func foreground(m *manager.Manager, cwd, prompt string) (time.Duration, error) {
	t := time.Now()
	req := seam.StartRequest{Label: "bench", Prompt: prompt, Parent: root, Cwd: cwd}
	s, err := m.StartContinuable(context.Background(), "spawn", req, true)
	if err != nil {
		return 0, err
	}
	res, ok := s.Wait(context.Background())
	if err := s.Committed(); !ok || err != nil || res.StopReason != "completed" {
		return 0, fmt.Errorf("a delegation ended %v %v %+v", ok, err, res)
	}
	return time.Since(t), nil
}
