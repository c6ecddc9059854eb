//go:build e2e

package e2e

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	bolt "go.etcd.io/bbolt"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
)

// startEchoFloor starts the floor server and returns a connected client.
func startEchoFloor(tb testing.TB) *client.Client {
	tb.Helper()
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	c, err := client.NewStdioMCPClient(self, []string{envEchoFloor + "=1"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "bench", Version: "1"}
	if _, err := c.Initialize(context.Background(), init); err != nil {
		tb.Fatal(err)
	}
	return c
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// BenchmarkDelegationAgainstFloor interleaves, in one run, one echo call
// to the floor server and one foreground delegation on each of a durable
// server (relayed to its daemon, and in-process) and an --ephemeral one;
// each delegation's overhead is its round trip minus the fake model's own
// time. The ratios to the floor's median are the figures of merit.
//
// A durable delegation commits once before it answers (the gate lets the
// child's record ride with its settlement), and a bbolt commit is two
// fdatasyncs: the disk's share, which no code of ours removes, is measured
// in the same rounds as one small bbolt commit on the same file system
// (commit-floor), and durable-inprocess-less-commit-x-floor is what is
// left once it is taken off; sync-floor is one 4 KiB overwrite and its
// fdatasync, the least a commit that survives a machine crash costs here.
// MCP_SUBAGENT_BASELINE_BIN names an earlier build to interleave beside.
func BenchmarkDelegationAgainstFloor(b *testing.B) {
	fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "done"}))
	defer fake.Close()
	floor := startEchoFloor(b)
	type server struct {
		name string
		s    *instance
		ds   []time.Duration
	}
	servers := []server{
		{name: "durable-relayed", s: start(b, fake, serverOpts{args: []string{"--log-level", "error"}})},
		{name: "durable-inprocess", s: start(b, fake, serverOpts{args: []string{"--log-level", "error", "--no-daemon"}})},
		{name: "ephemeral", s: start(b, fake, serverOpts{args: []string{"--log-level", "error", "--ephemeral"}})},
	}
	// A baseline binary (an earlier build) runs beside, interleaved in the
	// same rounds, so a change is measured as a ratio in one run.
	if base := os.Getenv("MCP_SUBAGENT_BASELINE_BIN"); base != "" {
		servers = append(servers,
			server{name: "baseline-durable-inprocess", s: start(b, fake, serverOpts{bin: base, args: []string{"--log-level", "error", "--no-daemon"}})},
			server{name: "baseline-ephemeral", s: start(b, fake, serverOpts{bin: base, args: []string{"--log-level", "error", "--ephemeral"}})})
	}
	ctx := context.Background()
	echo := mcp.CallToolRequest{}
	echo.Params.Name = "echo"
	echo.Params.Arguments = map[string]any{"text": "go"}
	delegate := mcp.CallToolRequest{}
	delegate.Params.Name = "subagent"
	delegate.Params.Arguments = map[string]any{"description": "bench", "prompt": "go"}
	db, err := bolt.Open(filepath.Join(b.TempDir(), "commit-floor.db"), 0o600, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	value := make([]byte, 512)
	// One 4 KiB overwrite of a written file and its fdatasync: the least
	// any commit that survives a machine crash costs on this disk.
	syncFile, err := os.Create(filepath.Join(b.TempDir(), "sync-floor"))
	if err != nil {
		b.Fatal(err)
	}
	defer syncFile.Close()
	page := make([]byte, 4096)
	if _, err := syncFile.Write(make([]byte, 64*len(page))); err != nil || syncFile.Sync() != nil {
		b.Fatal("sync-floor file:", err)
	}
	var floorDs, commitDs, syncDs []time.Duration
	round := func(record bool) {
		t0 := time.Now()
		if res, err := floor.CallTool(ctx, echo); err != nil || res.IsError {
			b.Fatalf("echo: %v %v", err, res)
		}
		if record {
			floorDs = append(floorDs, time.Since(t0))
		}
		t0 = time.Now()
		if err := db.Update(func(tx *bolt.Tx) error {
			bk, err := tx.CreateBucketIfNotExists([]byte("b"))
			if err != nil {
				return err
			}
			return bk.Put([]byte(time.Now().String()), value)
		}); err != nil {
			b.Fatal(err)
		}
		if record {
			commitDs = append(commitDs, time.Since(t0))
		}
		t0 = time.Now()
		if _, err := syncFile.WriteAt(page, int64(len(floorDs)%64)*int64(len(page))); err != nil {
			b.Fatal(err)
		}
		if err := syscall.Fdatasync(int(syncFile.Fd())); err != nil {
			b.Fatal(err)
		}
		if record {
			syncDs = append(syncDs, time.Since(t0))
		}
		// A new order each round: a call right after a durable one finds
		// the disk and the caches in another state, and a fixed order
		// showed as 8-10 % between two servers of the same build.
		for _, i := range rand.Perm(len(servers)) {
			before := len(fake.Served())
			t0 := time.Now()
			res, err := servers[i].s.client.CallTool(ctx, delegate)
			rt := time.Since(t0)
			if err != nil || res.IsError {
				b.Fatalf("%s: %v %v", servers[i].name, err, res)
			}
			for _, d := range fake.Served()[before:] {
				rt -= d
			}
			if record {
				servers[i].ds = append(servers[i].ds, rt)
			}
		}
	}
	for range 20 {
		round(false)
	}
	for b.Loop() {
		round(true)
	}
	b.StopTimer()
	f, commit := median(floorDs), median(commitDs)
	b.ReportMetric(float64(f.Microseconds())/1000, "floor-p50-ms")
	b.ReportMetric(float64(commit.Microseconds())/1000, "commit-floor-p50-ms")
	b.ReportMetric(float64(median(syncDs).Microseconds())/1000, "sync-floor-p50-ms")
	for _, s := range servers {
		m := median(s.ds)
		b.ReportMetric(float64(m.Microseconds())/1000, s.name+"-p50-ms")
		b.ReportMetric(float64(m)/float64(f), s.name+"-x-floor")
		if s.name == "durable-inprocess" {
			b.ReportMetric(float64(m-commit)/float64(f), s.name+"-less-commit-x-floor")
		}
	}
}

// BenchmarkSyncsPerDelegation counts, with strace, the fsync and fdatasync
// calls of a durable server (in-process, so every sync is its own) per
// foreground delegation: the disk's share of the overhead, counted.
func BenchmarkSyncsPerDelegation(b *testing.B) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		b.Skip("strace is not installed (apt-get install strace)")
	}
	fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "done"}))
	defer fake.Close()
	out := filepath.Join(b.TempDir(), "syncs")
	s := start(b, fake, serverOpts{args: []string{"--log-level", "error", "--no-daemon"},
		wrap: []string{strace, "-f", "-qq", "-e", "trace=fsync,fdatasync,sync_file_range,msync", "-o", out}})
	ctx := context.Background()
	delegate := mcp.CallToolRequest{}
	delegate.Params.Name = "subagent"
	delegate.Params.Arguments = map[string]any{"description": "bench", "prompt": "go"}
	count := func() int {
		raw, _ := os.ReadFile(out)
		return strings.Count(string(raw), "sync(") + strings.Count(string(raw), "sync_file_range(")
	}
	for range 5 {
		if _, err := s.client.CallTool(ctx, delegate); err != nil {
			b.Fatal(err)
		}
	}
	before, n := count(), 0
	for b.Loop() {
		res, err := s.client.CallTool(ctx, delegate)
		if err != nil || res.IsError {
			b.Fatalf("call: %v %v", err, res)
		}
		n++
	}
	b.StopTimer()
	// Closing the client ends the server (and strace) once the last
	// settlement is committed: what its syncs cost is counted too, as the
	// warm-up's tail before the count started was.
	s.client.Close()
	b.ReportMetric(float64(count()-before)/float64(n), "syncs/delegation")
}
