package agent_test

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/llm/openai"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
)

// runaway is a model answer of 100 MiB of text, streamed as 1,600 chunks
// of 64 KiB.
func runaway() fakeopenai.Reply {
	return fakeopenai.Reply{Text: strings.Repeat("x", 64<<10), Repeat: 1600}
}

// A runaway answer (100 MiB) ends the turn at the output bound like
// max-tokens, with a diagnostic that says so; the output is at most the
// bound, and the journal holds no more.
func TestRunawayAnswerEndsTheTurnAtTheBound(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Script(runaway()))
	defer srv.Close()
	client := openai.New(transport.Config{BaseURL: srv.URL(), Model: "fake-model", MaxRetries: -1})
	ag := newAgent(t, agent.Config{Client: client})
	res := ag.RunTurn(context.Background(), "write forever", "")
	if res.StopReason != agent.StopMaxTokens {
		t.Fatalf("stop %s (%s), want max-tokens", res.StopReason, res.Diagnostic)
	}
	if want := "the model's output passed 1048576 bytes"; !strings.Contains(res.Diagnostic, want) {
		t.Fatalf("diagnostic %q, want it to say %q", res.Diagnostic, want)
	}
	if len(res.Output) != transport.DefaultMaxOutputBytes {
		t.Fatalf("output of %d bytes, want the bound's %d", len(res.Output), transport.DefaultMaxOutputBytes)
	}
	journal := 0
	for _, e := range ag.Journal().Events() {
		if e.Message != nil {
			journal += len(e.Message.Content)
		}
	}
	if journal > transport.DefaultMaxOutputBytes+len("write forever") {
		t.Fatalf("the journal holds %d bytes of messages", journal)
	}
	checkJournal(t, ag.Journal())
}

// BenchmarkRunawayAnswer measures one turn whose model answers 100 MiB of
// text (issue 22, defect 7), with the default bound and with none: the
// heap allocated during the turn, the peak RSS above the start (VmHWM,
// reset with clear_refs 5 before each run) and the output's size.
//
//	go test -run '^$' -bench RunawayAnswer -benchtime 1x ./agent
func BenchmarkRunawayAnswer(b *testing.B) {
	for _, bc := range []struct {
		name  string
		bound int
	}{{"bound=1MiB", 0}, {"unbounded", -1}} {
		b.Run(bc.name, func(b *testing.B) {
			srv := fakeopenai.New(fakeopenai.Script(runaway()))
			defer srv.Close()
			client := openai.New(transport.Config{BaseURL: srv.URL(), Model: "fake-model", MaxRetries: -1, MaxOutputBytes: bc.bound})
			var alloc, rss, out float64
			for b.Loop() {
				ag, err := agent.New(agent.Config{Client: client})
				if err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
				base := statusKiB(b, "VmRSS")
				var m0, m1 runtime.MemStats
				runtime.ReadMemStats(&m0)
				began := time.Now()
				res := ag.RunTurn(context.Background(), "write forever", "")
				b.Logf("%s: %s in %v", bc.name, res.StopReason, time.Since(began).Round(time.Millisecond))
				runtime.ReadMemStats(&m1)
				alloc += float64(m1.TotalAlloc - m0.TotalAlloc)
				rss += float64(statusKiB(b, "VmHWM")-base) * 1024
				out += float64(len(res.Output))
				runtime.KeepAlive(ag)
			}
			n := float64(b.N)
			b.ReportMetric(alloc/n/(1<<20), "MiB-alloc/op")
			b.ReportMetric(rss/n/(1<<20), "MiB-peak-RSS/op")
			b.ReportMetric(out/n/(1<<20), "MiB-output/op")
		})
	}
}

// statusKiB reads a field (VmRSS, VmHWM) of /proc/self/status in KiB.
func statusKiB(tb testing.TB, field string) int64 {
	tb.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		tb.Skip("no /proc/self/status:", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatalf("no %s in /proc/self/status", field)
	return 0
}
