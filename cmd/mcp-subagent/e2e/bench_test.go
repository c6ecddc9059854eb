//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
)

// percentiles reports the median and p99 of ds in milliseconds.
func percentiles(b *testing.B, prefix string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	at := func(q float64) float64 {
		i := int(q * float64(len(ds)-1))
		return float64(ds[i].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.5), prefix+"-p50-ms")
	b.ReportMetric(at(0.99), prefix+"-p99-ms")
}

// BenchmarkStartToInitialize measures from exec of a server to its
// initialize response on stdout: mcp-subagent, and, when installed, a
// Node-based MCP server as the peer baseline (MCP_SUBAGENT_PEER names its
// command line, e.g. "node_modules/.bin/mcp-server-filesystem /tmp").
func BenchmarkStartToInitialize(b *testing.B) {
	// Through the relay to a daemon already running: what every session
	// but the first pays.
	b.Run("relay-daemon-running", func(b *testing.B) {
		dir := b.TempDir()
		b.Cleanup(func() { stopDaemon(b, dir) })
		warm := exec.Command(binary, "serve", "--log-level", "error", "--data-dir", dir)
		warm.Env = serverEnv(nil, nil)
		warm.Stdin = strings.NewReader(initBody + "\n")
		if out, err := warm.Output(); err != nil || !strings.Contains(string(out), "protocolVersion") {
			b.Fatalf("starting the daemon: %v %q", err, out)
		}
		benchStart(b, func() *exec.Cmd {
			cmd := exec.Command(binary, "serve", "--log-level", "error", "--data-dir", dir)
			cmd.Env = serverEnv(nil, nil)
			return cmd
		}, nil)
	})
	// The first session of a data directory: it starts the daemon.
	b.Run("relay-daemon-start", func(b *testing.B) {
		var dir string
		benchStart(b, func() *exec.Cmd {
			dir = b.TempDir()
			cmd := exec.Command(binary, "serve", "--log-level", "error", "--data-dir", dir)
			cmd.Env = serverEnv(nil, nil)
			return cmd
		}, func() { stopDaemon(b, dir) })
	})
	b.Run("in-process", func(b *testing.B) {
		benchStart(b, func() *exec.Cmd {
			cmd := exec.Command(binary, "serve", "--no-daemon", "--log-level", "error", "--data-dir", b.TempDir())
			cmd.Env = serverEnv(nil, nil)
			return cmd
		}, nil)
	})
	b.Run("node-peer", func(b *testing.B) {
		peer := strings.Fields(os.Getenv("MCP_SUBAGENT_PEER"))
		if len(peer) == 0 {
			b.Skip("set MCP_SUBAGENT_PEER to a Node MCP server's command line to compare")
		}
		benchStart(b, func() *exec.Cmd { return exec.Command(peer[0], peer[1:]...) }, nil)
	})
}

// benchStart times exec to the initialize response; after runs after each
// start, untimed (stopping a daemon the start made).
func benchStart(b *testing.B, newCmd func() *exec.Cmd, after func()) {
	var ds []time.Duration
	for b.Loop() {
		cmd := newCmd()
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		if _, err := io.WriteString(stdin, initBody+"\n"); err != nil {
			b.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil {
			b.Fatalf("no initialize response: %v", err)
		}
		ds = append(ds, time.Since(t0))
		if len(line) < 20 {
			b.Fatalf("response %q", line)
		}
		stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if after != nil {
			b.StopTimer()
			after()
			b.StartTimer()
		}
	}
	percentiles(b, "start", ds)
}

// BenchmarkDelegationOverheadStdio measures one foreground delegation over
// stdio (client → server → child → fake model → back) minus the time the
// fake model spent serving its request: what mcp-subagent itself adds.
func BenchmarkDelegationOverheadStdio(b *testing.B) {
	benchDelegation(b)
}

func benchDelegation(b *testing.B, args ...string) {
	fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "done"}))
	defer fake.Close()
	s := start(b, fake, serverOpts{args: append([]string{"--log-level", "error"}, args...)})
	req := mcp.CallToolRequest{}
	req.Params.Name = "subagent"
	req.Params.Arguments = map[string]any{"description": "bench", "prompt": "go"}
	ctx := context.Background()
	// Warm up connections.
	for range 20 {
		if _, err := s.client.CallTool(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	var overhead, total []time.Duration
	b.ResetTimer()
	for b.Loop() {
		before := len(fake.Served())
		t0 := time.Now()
		res, err := s.client.CallTool(ctx, req)
		rt := time.Since(t0)
		if err != nil || res.IsError {
			b.Fatalf("call: %v %v", err, res)
		}
		served := fake.Served()[before:]
		model := time.Duration(0)
		for _, d := range served {
			model += d
		}
		overhead = append(overhead, rt-model)
		total = append(total, rt)
	}
	b.StopTimer()
	percentiles(b, "overhead", overhead)
	percentiles(b, "roundtrip", total)
}

// BenchmarkDelegationRelayVsInProcess interleaves, in one run, the same
// durable foreground delegation through the relay to a daemon and to an
// in-process server (--no-daemon): the relay's cost is the difference.
func BenchmarkDelegationRelayVsInProcess(b *testing.B) {
	fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "done"}))
	defer fake.Close()
	relayed := start(b, fake, serverOpts{args: []string{"--log-level", "error"}})
	inProc := start(b, fake, serverOpts{args: []string{"--log-level", "error", "--no-daemon"}})
	req := mcp.CallToolRequest{}
	req.Params.Name = "subagent"
	req.Params.Arguments = map[string]any{"description": "bench", "prompt": "go"}
	ctx := context.Background()
	one := func(s *instance) time.Duration {
		before := len(fake.Served())
		t0 := time.Now()
		res, err := s.client.CallTool(ctx, req)
		rt := time.Since(t0)
		if err != nil || res.IsError {
			b.Fatalf("call: %v %v", err, res)
		}
		for _, d := range fake.Served()[before:] {
			rt -= d
		}
		return rt
	}
	for range 20 {
		one(relayed)
		one(inProc)
	}
	var viaRelay, direct, diff []time.Duration
	b.ResetTimer()
	for b.Loop() {
		r, d := one(relayed), one(inProc)
		viaRelay, direct = append(viaRelay, r), append(direct, d)
	}
	b.StopTimer()
	percentiles(b, "relay-overhead", viaRelay)
	percentiles(b, "inprocess-overhead", direct)
	sort.Slice(viaRelay, func(i, j int) bool { return viaRelay[i] < viaRelay[j] })
	sort.Slice(direct, func(i, j int) bool { return direct[i] < direct[j] })
	if n := len(direct); n > 0 {
		diff = append(diff, viaRelay[n/2]-direct[n/2])
		b.ReportMetric(float64(diff[0].Microseconds())/1000, "relay-minus-inprocess-p50-ms")
	}
}

// BenchmarkDelegationOverheadStdioEphemeral is the same delegation on a
// server without a session store (--ephemeral): one-shot children, no disk
// syncs, the core path's own cost.
func BenchmarkDelegationOverheadStdioEphemeral(b *testing.B) {
	benchDelegation(b, "--ephemeral")
}
