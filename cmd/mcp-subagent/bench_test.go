package main

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
	b.Run("mcp-subagent", func(b *testing.B) {
		benchStart(b, func() *exec.Cmd {
			cmd := exec.Command(binary, "serve", "--log-level", "error", "--data-dir", b.TempDir())
			cmd.Env = serverEnv(nil, nil)
			return cmd
		})
	})
	b.Run("node-peer", func(b *testing.B) {
		peer := strings.Fields(os.Getenv("MCP_SUBAGENT_PEER"))
		if len(peer) == 0 {
			b.Skip("set MCP_SUBAGENT_PEER to a Node MCP server's command line to compare")
		}
		benchStart(b, func() *exec.Cmd { return exec.Command(peer[0], peer[1:]...) })
	})
}

func benchStart(b *testing.B, newCmd func() *exec.Cmd) {
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

// BenchmarkDelegationOverheadStdioEphemeral is the same delegation on a
// server without a session store (--ephemeral): one-shot children, no disk
// syncs, the core path's own cost.
func BenchmarkDelegationOverheadStdioEphemeral(b *testing.B) {
	benchDelegation(b, "--ephemeral")
}
