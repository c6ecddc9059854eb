package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/internal/managertest"
	"github.com/mcp-subagent/mcp-subagent/internal/seed"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/llm/openai"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist"
	"github.com/mcp-subagent/mcp-subagent/providers/spawn"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// countingStore counts journal reads, to show listing reads none for live
// children.
type countingStore struct {
	seam.Store
	eventReads atomic.Int64
}

func (c *countingStore) Events(ctx context.Context, id string) ([]agent.Event, error) {
	c.eventReads.Add(1)
	return c.Store.Events(ctx, id)
}

func openStore(tb testing.TB) *countingStore {
	st, err := persist.Open(tb.TempDir(), persist.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return &countingStore{Store: st}
}

func newManager(tb testing.TB, store seam.Store, client llm.Client) *manager.Manager {
	m := manager.New(manager.Options{Store: store})
	if err := m.Register(spawn.New(spawn.Options{Client: client, Model: "fake-model"})); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

var root = seam.ParentRef{Principal: "bench"}

func fakeClient(tb testing.TB, h fakeopenai.Handler) (*fakeopenai.Server, llm.Client) {
	fake := fakeopenai.New(h)
	tb.Cleanup(fake.Close)
	return fake, openai.New(transport.Config{BaseURL: fake.URL(), APIKey: "k", Model: "fake-model", RetryBaseDelay: time.Millisecond})
}

// BenchmarkListChildren10k lists 10,000 stored children of one parent:
// one read transaction, checkpoints current, no journal read.
func BenchmarkListChildren10k(b *testing.B) {
	st := openStore(b)
	if err := seed.Children(st, root, 10_000); err != nil {
		b.Fatal(err)
	}
	_, client := fakeClient(b, fakeopenai.Script(fakeopenai.Reply{Text: "ok"}))
	m := newManager(b, st, client)
	st.eventReads.Store(0)
	for b.Loop() {
		rows, err := managertest.ListChildren(m, root)
		if err != nil || len(rows) != 10_000 {
			b.Fatalf("%d rows, %v", len(rows), err)
		}
	}
	b.ReportMetric(float64(st.eventReads.Load())/float64(b.N), "journal-reads/op")
}

// BenchmarkListLiveChildren lists 200 resident children (each mid-turn on
// a blocked model) and counts journal reads: live rows read none.
func BenchmarkListLiveChildren(b *testing.B) {
	st := openStore(b)
	release := make(chan struct{})
	_, client := fakeClient(b, func(int, fakeopenai.Request) fakeopenai.Reply {
		<-release
		return fakeopenai.Reply{Text: "done"}
	})
	m := newManager(b, st, client)
	defer close(release)
	const n = 200
	for i := range n {
		req := seam.StartRequest{Label: "live", Prompt: fmt.Sprint("task ", i), Parent: root, Cwd: b.TempDir()}
		if _, err := m.StartContinuable(context.Background(), "spawn", req, false); err != nil {
			b.Fatal(err)
		}
	}
	st.eventReads.Store(0)
	for b.Loop() {
		rows, err := managertest.ListChildren(m, root)
		if err != nil || len(rows) != n {
			b.Fatalf("%d rows, %v", len(rows), err)
		}
		for _, r := range rows {
			if r.Status != "running" {
				b.Fatalf("row %+v is not running", r)
			}
		}
	}
	if reads := st.eventReads.Load(); reads != 0 {
		b.Fatalf("listing live children read %d journals", reads)
	}
	b.ReportMetric(0, "journal-reads/op")
}

// BenchmarkColdResume resumes a stored child with 10,000 and 100,000
// journal events (4 per turn): from send_message to the child rebuilt from
// the store and the message admitted. The journal is read, decoded and
// validated once per resume.
func BenchmarkColdResume(b *testing.B) {
	for _, events := range []int{10_000, 100_000} {
		b.Run(strconv.Itoa(events/1000)+"k", func(b *testing.B) { benchColdResume(b, events) })
	}
}

func benchColdResume(b *testing.B, events int) {
	st := openStore(b)
	_, client := fakeClient(b, fakeopenai.Script(fakeopenai.Reply{Text: "ok", Delay: time.Hour}))
	m := newManager(b, st, client)
	for b.Loop() {
		b.StopTimer()
		id := manager.NewID()
		h := seam.Header{ID: id, Parent: root.Address(), Principal: root.Principal, Depth: 1, DepthCap: 3,
			Mode: seam.ModeContinuable, Provider: "spawn", Label: "long", Cwd: b.TempDir(), CreatedAt: time.Now().UTC()}
		d := seam.Descriptor{Version: seam.DescriptorVersion, Mode: seam.ModeContinuable, Provider: "spawn", Label: "long"}
		w := seam.ChildWrite{Create: &seam.NewChild{Header: h, Descriptor: d}, Events: seed.TurnEvents(0, events/4)}
		if err := st.WriteChild(context.Background(), id, w); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		sent, err := m.Followup(context.Background(), root, id, "one more thing", false)
		if err != nil || sent.Route != manager.RouteResumed {
			b.Fatalf("followup: %+v %v", sent, err)
		}
		b.StopTimer()
		_ = m.Interrupt(root, id)
		b.StartTimer()
	}
}

// rssPeakKiB is the process's resident high-water mark.
func rssPeakKiB() int64 { return procStatusKiB("VmHWM:") }

// procStatusKiB reads a kB field of /proc/self/status; -1 when it cannot.
func procStatusKiB(field string) int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	return -1
}

// BenchmarkConcurrentBackground starts n background children at once
// (1,000, 5,000, 10,000) against a fake model answering after 50 ms, in
// its own process, waits until every one has settled (its notice
// delivered), and checks that no goroutine is left. Reported: time to
// start all and to settle all, CPU per child (user+system of this process
// over the run, divided by n), peak RSS (the process's high-water mark:
// run one size per invocation for a clean figure) and goroutines left.
//
// Each size runs over plain HTTP/1.1 (a connection, with its two
// goroutines and buffers, per call in flight) and over HTTPS with HTTP/2
// (calls multiplexed on a few connections, as hosted APIs serve them).
func BenchmarkConcurrentBackground(b *testing.B) {
	for _, tr := range transports {
		for _, n := range []int{1000, 5000, 10000} {
			b.Run(tr.name+"/"+strconv.Itoa(n), func(b *testing.B) { benchConcurrent(b, n, tr.h2) })
		}
	}
}

// transports are the two ways a benchmark reaches its fake model.
var transports = []struct {
	name string
	h2   bool
}{{"http1", false}, {"h2", true}}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchConcurrent(b *testing.B, n int, h2 bool) {
	for b.Loop() {
		b.StopTimer()
		base := runtime.NumGoroutine()
		// The fake model runs in its own process, so the peak RSS and the
		// CPU measured here are the manager's, the store's and the
		// children's alone.
		st, m, stopFake := spawnOverFakeProcess(b, "1", h2)
		cwd := b.TempDir()
		b.StartTimer()
		cpu0 := cpuTime()
		t0 := time.Now()
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := seam.StartRequest{Label: "bulk", Prompt: fmt.Sprint("task ", i), Parent: root, Cwd: cwd}
				if _, err := m.StartContinuable(context.Background(), "spawn", req, false); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
		started := time.Since(t0)
		settled := 0
		deadline := time.Now().Add(5 * time.Minute)
		for settled < n && time.Now().Before(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			settled += len(m.WaitNotices(ctx, root.Principal, ""))
			cancel()
		}
		elapsed := time.Since(t0)
		cpu := cpuTime() - cpu0
		b.StopTimer()
		if settled != n {
			b.Fatalf("%d of %d children settled", settled, n)
		}
		if err := m.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
		st.Close()
		stopFake()
		if tr, ok := http.DefaultTransport.(*http.Transport); ok {
			tr.CloseIdleConnections()
		}
		ok := false
		for range 100 {
			if runtime.NumGoroutine() <= base+2 {
				ok = true
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if !ok {
			b.Fatalf("%d goroutines after settlement, %d before", runtime.NumGoroutine(), base)
		}
		b.ReportMetric(float64(started.Milliseconds()), "start-all-ms")
		b.ReportMetric(float64(elapsed.Milliseconds()), "all-settled-ms")
		b.ReportMetric(float64(cpu.Microseconds())/1000/float64(n), "cpu-ms/child")
		b.ReportMetric(float64(rssPeakKiB())/1024, "peak-rss-MiB")
		b.ReportMetric(float64(runtime.NumGoroutine()-base), "goroutines-left")
		b.StartTimer()
	}
}

// BenchmarkLiveChildMemory holds 2,000 background children mid-turn (their
// model calls held by a fake model in another process) and reports the resident memory each adds: RSS and
// Go heap after a GC, over the same figures before they started.
func BenchmarkLiveChildMemory(b *testing.B) {
	for _, tr := range transports {
		b.Run(tr.name, func(b *testing.B) { benchLiveChildMemory(b, tr.h2) })
	}
}

func benchLiveChildMemory(b *testing.B, h2 bool) {
	const n = 2000
	for b.Loop() {
		b.StopTimer()
		// The model holds every call, in its own process: what is measured
		// is this process's children alone.
		st, m, stopFake := spawnOverFakeProcess(b, "hold", h2)
		cwd := b.TempDir()
		debug.FreeOSMemory() // a GC, and freed memory returned: RSS is what is held
		rss0, heap0, stack0, g0 := rssKiB(), heapKiB(), stackKiB(), runtime.NumGoroutine()
		b.StartTimer()
		for i := range n {
			req := seam.StartRequest{Label: "live", Prompt: fmt.Sprint("task ", i), Parent: root, Cwd: cwd}
			if _, err := m.StartContinuable(context.Background(), "spawn", req, false); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		for waitFor := time.Now().Add(30 * time.Second); time.Now().Before(waitFor); time.Sleep(20 * time.Millisecond) {
			rows, _ := managertest.ListChildren(m, root)
			running := 0
			for _, r := range rows {
				if r.Status == "running" {
					running++
				}
			}
			if running == n {
				break
			}
		}
		debug.FreeOSMemory() // a GC, and freed memory returned: RSS is what is held
		if f := os.Getenv("BENCH_HEAP_PROFILE"); f != "" {
			if out, err := os.Create(f); err == nil {
				_ = pprof.WriteHeapProfile(out)
				out.Close()
			}
		}
		b.ReportMetric(float64(rssKiB()-rss0)/n, "rss-KiB/child")
		b.ReportMetric(float64(heapKiB()-heap0)/n, "heap-KiB/child")
		b.ReportMetric(float64(stackKiB()-stack0)/n, "stack-KiB/child")
		b.ReportMetric(float64(runtime.NumGoroutine()-g0)/n, "goroutines/child")
		if err := m.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
		st.Close()
		stopFake()
		b.StartTimer()
	}
}

// spawnOverFakeProcess is a store and a manager with spawn over a fake
// model running in its own process in mode (see startFakeModel), over
// plain HTTP/1.1 or, with h2, over HTTPS with HTTP/2 as hosted APIs serve.
func spawnOverFakeProcess(b *testing.B, mode string, h2 bool) (*countingStore, *manager.Manager, func()) {
	st := openStore(b)
	fakeURL, hc, stopFake := startFakeModel(b, mode, h2)
	client := openai.New(transport.Config{BaseURL: fakeURL, APIKey: "k", Model: "fake-model", HTTPClient: hc})
	// No admission cap: these benchmarks measure children running at once.
	m := manager.New(manager.Options{Store: st, MaxRunningChildren: -1})
	if err := m.Register(spawn.New(spawn.Options{Client: client, Model: "fake-model"})); err != nil {
		b.Fatal(err)
	}
	return st, m, stopFake
}

func rssKiB() int64 { return procStatusKiB("VmRSS:") }

// heapKiB is the Go heap and goroutine stacks in use; stackKiB the stacks
// alone.
func heapKiB() int64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse+ms.StackInuse) / 1024
}

func stackKiB() int64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.StackInuse) / 1024
}

// helpers are what a re-executed test binary runs instead of the
// benchmarks, by $BENCH_HELPER; a file built with a tag adds its own.
var helpers = map[string]func(){}

// TestMain serves the fake model when the benchmark re-executes the test
// binary for it (BENCH_FAKE_MODEL=1): it prints its URL, then serves until
// its stdin closes. With BENCH_HELPER it runs that helper.
func TestMain(m *testing.M) {
	if h := helpers[os.Getenv("BENCH_HELPER")]; h != nil {
		h()
		os.Exit(0)
	}
	if mode := os.Getenv("BENCH_FAKE_MODEL"); mode != "" {
		delay := 50 * time.Millisecond
		if mode == "hold" { // answers only when the caller gives up
			delay = time.Hour
		}
		script := fakeopenai.Script(fakeopenai.Reply{Text: "done", Delay: delay})
		if mode == "prompt" { // waits what the prompt says: "sleep <ms>"
			script = promptDelay
		}
		var fake *fakeopenai.Server
		if os.Getenv("BENCH_FAKE_H2") == "" {
			fake = fakeopenai.New(script)
			fmt.Println(fake.URL())
		} else { // the URL, then the certificate to trust
			fake = fakeopenai.NewTLS(script)
			fmt.Println(fake.URL(), base64.StdEncoding.EncodeToString(fake.Certificate().Raw))
		}
		_, _ = io.Copy(io.Discard, os.Stdin)
		fake.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startFakeModel runs the fake model in a child process in mode ("1": 50
// ms per answer; "hold": no answer until the request is cancelled;
// "prompt": the wait the prompt names, see promptDelay), over
// HTTPS with HTTP/2 when h2. The client is one that trusts it.
func startFakeModel(tb testing.TB, mode string, h2 bool) (string, *http.Client, func()) {
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), "BENCH_FAKE_MODEL="+mode)
	if h2 {
		cmd.Env = append(cmd.Env, "BENCH_FAKE_H2=1")
	}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		tb.Fatal(err)
	}
	stop := func() { stdin.Close(); _ = cmd.Wait() }
	url, cert, _ := strings.Cut(strings.TrimSpace(line), " ")
	if !h2 {
		return url, nil, stop // llm's default client
	}
	der, err := base64.StdEncoding.DecodeString(cert)
	if err != nil {
		tb.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c)
	// The client's own transport, trusting the fake's certificate.
	t := transport.DefaultTransport(url)
	t.TLSClientConfig = &tls.Config{RootCAs: pool}
	return url, &http.Client{Transport: t}, stop
}

// BenchmarkListPage pages through 100,000 stored children of one parent
// 50 rows at a time (list_agents' default): each page seeks its cursor in
// the index and reads its own rows only. Reported: the time per page at
// the start, the middle and the end of the listing.
func BenchmarkListPage(b *testing.B) {
	benchListPage(b, openStore(b), nil, []string{"first", "middle", "last"}, []int{0, listN / 2, listN - 50})
}

// listN is how many children the list page benchmarks seed.
const listN = 100_000

// benchListPage seeds st with listN children of one parent and lists the
// pages of 50 that start at rows through the manager, as list_agents
// does (their cursors found walking pages of 50 from the start): ms/page
// over them all, and each alone under its name in places. seeded, if not
// nil, runs once the children are stored.
func benchListPage(b *testing.B, st *countingStore, seeded func(), places []string, rows []int) {
	t0 := time.Now()
	if err := seed.Children(st, root, listN); err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded %d children in %s", listN, time.Since(t0).Round(time.Millisecond))
	if seeded != nil {
		seeded()
	}
	_, client := fakeClient(b, fakeopenai.Script(fakeopenai.Reply{Text: "ok"}))
	m := newManager(b, st, client)
	var cursors []string
	q := manager.ListQuery{}
	for row := 0; len(cursors) < len(rows); row += 50 {
		if row == rows[len(cursors)] {
			cursors = append(cursors, q.Cursor)
			if len(cursors) == len(rows) {
				break
			}
		}
		p, err := m.List(root, q)
		if err != nil || p.Next == "" {
			b.Fatalf("walking to row %d: %v (next %q)", row, err, p.Next)
		}
		q.Cursor = p.Next
	}
	st.eventReads.Store(0)
	took := make([]time.Duration, len(cursors))
	for b.Loop() {
		for i, c := range cursors {
			t := time.Now()
			p, err := m.List(root, manager.ListQuery{Cursor: c})
			took[i] += time.Since(t)
			if err != nil || len(p.Rows) != 50 {
				b.Fatalf("%d rows, %v", len(p.Rows), err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N*len(cursors)), "ms/page")
	for i, place := range places {
		b.ReportMetric(float64(took[i].Microseconds())/1000/float64(b.N), place+"-ms/page")
	}
	b.ReportMetric(float64(st.eventReads.Load())/float64(b.N), "journal-reads/op")
}
