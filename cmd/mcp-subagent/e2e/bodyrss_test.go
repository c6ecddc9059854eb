//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// procStatusKiB reads a field (VmRSS, VmHWM) of /proc/<pid>/status in KiB.
func procStatusKiB(tb testing.TB, pid int, field string) int64 {
	tb.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
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
	tb.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// repeatReader is n bytes of 'x', made as they are read.
type repeatReader struct{ n int64 }

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.n {
		p = p[:r.n]
	}
	for i := range p {
		p[i] = 'x'
	}
	r.n -= int64(len(p))
	return len(p), nil
}

// BenchmarkBodyLimitRSS measures the HTTP server's peak RSS above idle
// while a client sends a tools/call whose body is 600 MiB (a 600 MiB
// prompt), declared with Content-Length and chunked (target: at most 64 MiB
// above idle). The peak is VmHWM of the server process, reset (clear_refs
// 5) after idle is read. MCP_SUBAGENT_BENCH_BIN runs another build of the
// server instead, e.g. one from before the body limit.
//
//	go test -tags e2e ./cmd/mcp-subagent -run '^$' -bench BodyLimitRSS -benchtime 3x
func BenchmarkBodyLimitRSS(b *testing.B) {
	bin := binary
	if env := os.Getenv("MCP_SUBAGENT_BENCH_BIN"); env != "" {
		bin = env
	}
	const size = 600 << 20
	prefix := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"subagent","arguments":{"description":"big","prompt":"`
	suffix := `"}}}`
	for _, chunked := range []bool{false, true} {
		name := "content-length"
		if chunked {
			name = "chunked"
		}
		b.Run(name, func(b *testing.B) {
			args := []string{"serve", "--http", "127.0.0.1:0", "--data-dir", b.TempDir(), "--log-format", "json", "--log-level", "info"}
			stderr := &syncBuffer{}
			// A closed port as the chat API: a prompt that got through would
			// fail at once instead of being uploaded anywhere.
			env := serverEnv(nil, []string{"OPENAI_BASE_URL=http://127.0.0.1:9/v1"})
			proc, url, token := launchHTTPOf(b, bin, args, env, b.TempDir(), stderr)
			pid := proc.cmd.Process.Pid
			if code := post(b, url, map[string]string{"Authorization": "Bearer " + token}); code != http.StatusOK {
				b.Fatalf("initialize: %d", code)
			}
			var peak, idle, idle0 int64
			for b.Loop() {
				time.Sleep(200 * time.Millisecond) // let the previous request's garbage be collected
				if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
					b.Fatalf("resetting the peak RSS: %v", err)
				}
				idle = procStatusKiB(b, pid, "VmRSS")
				if idle0 == 0 {
					idle0 = idle
				}
				body := io.MultiReader(strings.NewReader(prefix), &repeatReader{n: size - int64(len(prefix)+len(suffix))}, strings.NewReader(suffix))
				req, err := http.NewRequest("POST", url, body)
				if err != nil {
					b.Fatal(err)
				}
				if !chunked {
					req.ContentLength = size
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set("Authorization", "Bearer "+token)
				status := "no response"
				client := &http.Client{Timeout: 5 * time.Minute}
				if resp, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					status = resp.Status
				} else {
					status = err.Error()
				}
				hwm := procStatusKiB(b, pid, "VmHWM")
				peak = max(peak, hwm-idle)
				b.Logf("%s: %s; idle %d MiB, peak %d MiB (+%d MiB)", name, status, idle>>10, hwm>>10, (hwm-idle)>>10)
			}
			b.ReportMetric(float64(idle0)/1024, "idle-MiB")
			b.ReportMetric(float64(peak)/1024, "peak-above-idle-MiB")
		})
	}
}
