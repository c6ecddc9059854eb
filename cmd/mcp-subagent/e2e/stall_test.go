//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/daemon"
)

// pipeSession is the binary over stdio spoken to line by line, so that the
// order of requests on the pipe is exactly the order they are written.
type pipeSession struct {
	cmd     *exec.Cmd
	dataDir string
	in      io.WriteCloser
	replies chan reply // answered requests
}

type reply struct {
	id   int64
	line string
}

func startPipe(t testing.TB, args ...string) *pipeSession {
	t.Helper()
	dataDir := t.TempDir()
	cmd := exec.Command(binary, append([]string{"serve", "--log-level", "error", "--data-dir", dataDir}, args...)...)
	cmd.Env = serverEnv(nil, nil)
	cmd.Dir = t.TempDir()
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &pipeSession{cmd: cmd, dataDir: dataDir, in: in, replies: make(chan reply, 4096)}
	go func() {
		defer close(s.replies)
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var m struct {
				ID *int64 `json:"id"`
			}
			if json.Unmarshal(sc.Bytes(), &m) == nil && m.ID != nil {
				s.replies <- reply{*m.ID, sc.Text()}
			}
		}
	}()
	t.Cleanup(func() {
		_ = in.Close() // ends the session, which cancels the waits
		_ = cmd.Wait()
		if !slices.Contains(args, "--no-daemon") {
			stopDaemon(t, dataDir)
		}
	})
	s.send(t, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"stall","version":"1"}}}`)
	s.await(t, 0, 15*time.Second, stderr)
	s.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return s
}

func (s *pipeSession) send(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(s.in, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// await reads replies until the one to id; other ids must not answer
// (the waits answer only when the session ends).
func (s *pipeSession) await(t testing.TB, id int64, d time.Duration, stderr fmt.Stringer) string {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case got, ok := <-s.replies:
			if !ok {
				t.Fatalf("the server closed stdout before answering request %d; stderr:\n%v", id, stderr)
			}
			if got.id == id {
				return got.line
			}
			t.Fatalf("request %d answered while waiting for %d: a wait ended early", got.id, id)
		case <-timer.C:
			t.Fatalf("request %d not answered in %v: it is stalled behind the waiting calls", id, d)
		}
	}
}

// holdWaits writes n list_agents calls that wait ten minutes for a notice
// that never comes (ids 1..n).
func (s *pipeSession) holdWaits(t testing.TB, n int) {
	for i := 1; i <= n; i++ {
		s.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"list_agents","arguments":{"wait_seconds":600}}}`, i))
	}
}

func quickCall(id int64) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"list_agents","arguments":{}}}`, id)
}

// Defect 11 of issue 8: over stdio, 100 blocking calls in flight stalled
// the 101st for as long as they lasted. Written after 500 waiting calls on
// the same pipe, a quick call answers at once, in process and relayed.
func TestAQuickCallIsNotStalledByWaitingCalls(t *testing.T) {
	for _, mode := range []string{"--no-daemon", "relayed"} {
		t.Run(mode, func(t *testing.T) {
			var args []string
			if mode == "--no-daemon" {
				args = []string{"--no-daemon"}
			}
			s := startPipe(t, args...)
			s.holdWaits(t, 500)
			s.send(t, quickCall(1000))
			s.await(t, 1000, 20*time.Second, &syncBuffer{})
		})
	}
}

// BenchmarkQuickCallBehindWaits: latency of a quick call (list_agents)
// while 500 calls wait over the same stdio session.
func BenchmarkQuickCallBehindWaits(b *testing.B) {
	for _, mode := range []string{"no-daemon", "relayed"} {
		b.Run(mode, func(b *testing.B) {
			var args []string
			if mode == "no-daemon" {
				args = []string{"--no-daemon"}
			}
			s := startPipe(b, args...)
			s.holdWaits(b, 500)
			var lat []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				id := int64(1000 + i)
				t0 := time.Now()
				s.send(b, quickCall(id))
				s.await(b, id, time.Minute, &syncBuffer{})
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "ms-median")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "ms-p99")
		})
	}
}

// A stdio message over max_message_bytes is answered with an error by its
// id, is never held whole (in process, in the relay, in the daemon), and
// the session goes on.
func TestATooLongStdioMessageIsRefusedAndTheSessionGoesOn(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		config string
		size   int
	}{
		{"no-daemon/default", []string{"--no-daemon"}, "", 20 << 20},
		{"relayed/default", nil, "", 20 << 20},
		{"relayed/configured", nil, `{"max_message_bytes": 65536}`, 100 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.config != "" {
				p := filepath.Join(t.TempDir(), "config.json")
				if err := os.WriteFile(p, []byte(tc.config), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config", p)
			}
			s := startPipe(t, args...)
			prompt := strings.Repeat("x", tc.size)
			s.send(t, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"subagent","arguments":{"description":"big","prompt":"`+prompt+`"}}}`)
			got := s.await(t, 5, 30*time.Second, &syncBuffer{})
			if !strings.Contains(got, `"code":-32600`) || !strings.Contains(got, "max_message_bytes") || len(got) > 1024 {
				t.Errorf("the answer to the long message = %.300s", got)
			}
			t.Logf("message %d KiB; peak RSS: serve %d MiB", tc.size>>10, procStatusKiB(t, s.cmd.Process.Pid, "VmHWM")>>10)
			if b, err := os.ReadFile(daemon.LockPath(s.dataDir)); err == nil && tc.args == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
					t.Logf("peak RSS of the daemon: %d MiB", procStatusKiB(t, pid, "VmHWM")>>10)
				}
			}
			s.send(t, quickCall(6))
			if got := s.await(t, 6, 20*time.Second, &syncBuffer{}); strings.Contains(got, `"error"`) {
				t.Errorf("the next call failed: %.300s", got)
			}
		})
	}
}
