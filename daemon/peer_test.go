package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
)

// lockedBuffer is a log sink the daemon's goroutines write to.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Options.Peer is asked about the connecting process by its pid (ours
// here, from SO_PEERCRED), and a peer it refuses gets the reason and no
// service, and the log says why; the same peer with the check passing is
// served, so the refusal is the check's.
func TestTheDaemonRefusesAPeerItsPeerCheckRefuses(t *testing.T) {
	for _, refuse := range []bool{true, false} {
		t.Run(fmt.Sprintf("refuse=%v", refuse), func(t *testing.T) {
			dir := t.TempDir()
			l, err := Listen(dir)
			if err != nil {
				t.Fatal(err)
			}
			var log lockedBuffer
			asked := make(chan int, 1)
			peer := func(pid int) error {
				asked <- pid
				if refuse {
					return errors.New("process runs inside a sandboxed command")
				}
				return nil
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan Reason)
			go func() {
				done <- l.Serve(ctx, Options{Serve: serveMCP(newTestServer().ms), Version: "test", Peer: peer, Logger: slog.New(slog.NewTextHandler(&log, nil))})
			}()
			// Serve returns once every connection's goroutine is done:
			// the log is whole then.
			stop := sync.OnceFunc(func() { cancel(); <-done; _ = l.Close() })
			defer stop()

			c := rawDial(t, dir)
			// A refused peer is answered and closed before its hello is
			// read: the write may find the connection closed.
			_, _ = c.Write([]byte(`{"mcp_subagent":1,"op":"status"}` + "\n"))
			line, err := bufio.NewReader(c).ReadBytes('\n')
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			var w Welcome
			if err := json.Unmarshal(line, &w); err != nil {
				t.Fatal(err)
			}
			if pid := <-asked; pid != os.Getpid() {
				t.Errorf("the check was asked about pid %d, want the peer's %d", pid, os.Getpid())
			}
			if !refuse {
				if w.Error != "" || w.PID != os.Getpid() {
					t.Errorf("an accepted peer got %+v", w)
				}
				return
			}
			if !strings.Contains(w.Error, "refused: process runs inside a sandboxed command") {
				t.Errorf("the refused peer got %+v; want the reason", w)
			}
			stop()
			if got := log.String(); !strings.Contains(got, "refused a connection") || !strings.Contains(got, "sandboxed command") {
				t.Errorf("the log does not say why:\n%s", got)
			}
		})
	}
}
