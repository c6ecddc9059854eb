package bench

import (
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
	"github.com/mcp-subagent/mcp-subagent/internal/gcfloor"
	"github.com/mcp-subagent/mcp-subagent/internal/growstack"
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

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// usArm is one configuration of the user-scale benchmark: its own store
// (10,000 settled children) and manager, and what one round measured.
type usArm struct {
	name  string
	on    map[string]bool // the machinery this arm runs with, of usPieces
	m     *manager.Manager
	lats  []time.Duration // round trip of each recorded call
	over  []time.Duration // round trip less the call's model time
	wall  time.Duration
	cpu   time.Duration
	gcs   uint32
	calls int
	rss   []int64 // KiB at each recorded round's end
}

// usPieces are the machinery's pieces: the GC floor, stack pre-growth,
// context shards, the store without fsync.
var usPieces = []string{"gc", "stack", "shards", "nosync"}

// BenchmarkUserScale is what a user feels of a delegation at scale: calls
// foreground delegations at once (MCP_SUBAGENT_BENCH_CALLS, default 200)
// to a spawn child, each from a principal with 10,000 stored children, the
// fake model (its own process) answering each after its own latency
// (MCP_SUBAGENT_BENCH_LATENCY: "500ms", or a spread "500ms-5s"). Reported,
// per arm: round-trip p50/p99, overhead p50/p99 (round trip less that
// call's model time), throughput (calls a second of the round's wall
// time), CPU per call, collections per round and the process's RSS at a
// round's end.
//
// The two arms (machinery on and off) each have their own store and
// manager in this one process, and take turns, one round each, the order
// swapped every round (MCP_SUBAGENT_BENCH_ROUNDS recorded rounds after one
// of warm-up). MCP_SUBAGENT_BENCH_ON names the pieces the first arm runs
// with (default all of usPieces; empty: none, both arms alike, which shows
// the noise). Both share the process's RSS: its figure shows what the
// process holds, not one arm's share.
func BenchmarkUserScale(b *testing.B) {
	calls := envInt("MCP_SUBAGENT_BENCH_CALLS", 200)
	rounds := envInt("MCP_SUBAGENT_BENCH_ROUNDS", 6)
	lo, hi := 500*time.Millisecond, time.Duration(0)
	if v := os.Getenv("MCP_SUBAGENT_BENCH_LATENCY"); v != "" {
		l, h, spread := strings.Cut(v, "-")
		var err error
		if lo, err = time.ParseDuration(l); err != nil {
			b.Fatalf("MCP_SUBAGENT_BENCH_LATENCY=%q: %v", v, err)
		}
		if spread {
			if hi, err = time.ParseDuration(h); err != nil {
				b.Fatalf("MCP_SUBAGENT_BENCH_LATENCY=%q: %v", v, err)
			}
		}
	}
	fakeURL, hc, stopFake := startFakeModel(b, "prompt", false)
	defer stopFake()
	client := openai.New(transport.Config{BaseURL: fakeURL, APIKey: "k", Model: "fake-model", HTTPClient: hc})
	on := map[string]bool{}
	for _, p := range usPieces {
		on[p] = true
	}
	if v, ok := os.LookupEnv("MCP_SUBAGENT_BENCH_ON"); ok {
		on = map[string]bool{}
		for _, p := range strings.Split(v, ",") {
			if p != "" && !slices.Contains(usPieces, p) {
				b.Fatalf("MCP_SUBAGENT_BENCH_ON: %q is none of %v", p, usPieces)
			}
			on[p] = p != ""
		}
	}
	arms := []*usArm{{name: "machinery-on", on: on}, {name: "machinery-off", on: map[string]bool{}}}
	for _, a := range arms {
		st, err := persist.Open(b.TempDir(), persist.Options{UnsafeNoSync: a.on["nosync"]})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		t0 := time.Now()
		if err := seed.Children(st, root, 10_000); err != nil {
			b.Fatal(err)
		}
		b.Logf("%s: seeded 10,000 children in %s", a.name, time.Since(t0).Round(time.Millisecond))
		// No admission cap: the figure is the delegation's own cost, not a
		// queue behind the default 20 seats.
		a.m = manager.New(manager.Options{Store: st, MaxRunningChildren: -1})
		if err := a.m.Register(spawn.New(spawn.Options{Client: client, Model: "fake-model"})); err != nil {
			b.Fatal(err)
		}
		defer a.m.Close(context.Background())
	}
	cwd := b.TempDir()
	round := func(a *usArm, record bool) {
		if a.on["gc"] {
			defer gcfloor.Start(32 << 20)() // the server's default floor
		}
		growstack.Off.Store(!a.on["stack"])
		manager.ShardsOff.Store(!a.on["shards"])
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		gc0, cpu0, t0 := ms.NumGC, cpuTime(), time.Now()
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := userScaleDelay(i, lo, hi)
				t := time.Now()
				req := seam.StartRequest{Label: "user-scale", Prompt: fmt.Sprintf("sleep %d", d.Milliseconds()), Parent: root, Cwd: cwd}
				s, err := a.m.StartContinuable(context.Background(), "spawn", req, true)
				if err != nil {
					b.Error(err)
					return
				}
				res, ok := s.Wait(context.Background())
				if err := s.Committed(); !ok || err != nil || res.StopReason != "completed" {
					b.Errorf("%s: %v %v %+v", a.name, ok, err, res)
					return
				}
				lat := time.Since(t)
				if record {
					mu.Lock()
					a.lats = append(a.lats, lat)
					a.over = append(a.over, lat-d)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		wall, cpu := time.Since(t0), cpuTime()-cpu0
		runtime.ReadMemStats(&ms)
		if record {
			a.wall += wall
			a.cpu += cpu
			a.gcs += ms.NumGC - gc0
			a.calls += calls
			a.rss = append(a.rss, rssKiB())
		}
	}
	for _, a := range arms { // warm-up: connections, code, the first residents
		round(a, false)
	}
	for r := range rounds {
		first, second := arms[0], arms[1]
		if r%2 == 1 {
			first, second = second, first
		}
		round(first, true)
		round(second, true)
	}
	growstack.Off.Store(false)
	manager.ShardsOff.Store(false)
	pct := func(ds []time.Duration, p int) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[min(len(s)-1, len(s)*p/100)]
	}
	type figs struct{ p50, p99, o50, o99, tput, cpuMs, gcs, rssMiB float64 }
	var f [2]figs
	for i, a := range arms {
		if len(a.lats) == 0 {
			b.Fatalf("%s: no call recorded", a.name)
		}
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		f[i] = figs{ms(pct(a.lats, 50)), ms(pct(a.lats, 99)), ms(pct(a.over, 50)), ms(pct(a.over, 99)),
			float64(a.calls) / a.wall.Seconds(), ms(a.cpu) / float64(a.calls), float64(a.gcs) / float64(rounds),
			float64(slices.Max(a.rss)) / 1024}
		b.Logf("%-14s p50 %7.1f ms  p99 %7.1f ms  overhead p50 %6.2f ms p99 %6.2f ms  %6.1f calls/s  cpu %5.2f ms/call  %5.1f GCs/round  rss max %5.0f MiB",
			a.name, f[i].p50, f[i].p99, f[i].o50, f[i].o99, f[i].tput, f[i].cpuMs, f[i].gcs, f[i].rssMiB)
	}
	b.Logf("on/off: p50 %.3f  p99 %.3f  overhead p50 %.3f p99 %.3f  throughput %.3f  cpu %.3f",
		f[0].p50/f[1].p50, f[0].p99/f[1].p99, f[0].o50/f[1].o50, f[0].o99/f[1].o99, f[0].tput/f[1].tput, f[0].cpuMs/f[1].cpuMs)
	b.ReportMetric(f[0].p50, "on-p50-ms")
	b.ReportMetric(f[1].p50, "off-p50-ms")
	b.ReportMetric(f[0].p99, "on-p99-ms")
	b.ReportMetric(f[1].p99, "off-p99-ms")
	b.ReportMetric(f[0].tput, "on-calls/s")
	b.ReportMetric(f[1].tput, "off-calls/s")
	b.ReportMetric(f[0].cpuMs, "on-cpu-ms/call")
	b.ReportMetric(f[1].cpuMs, "off-cpu-ms/call")
	b.ReportMetric(f[0].rssMiB, "on-rss-MiB")
	b.ReportMetric(f[1].rssMiB, "off-rss-MiB")
}
