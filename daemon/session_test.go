package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/edge"
)

// A hello that never ends is refused once it passes the bound, and the
// daemon holds no more of it than its buffer.
func TestAnOversizedHelloIsRefusedWithinTheBound(t *testing.T) {
	dir := t.TempDir()
	runDaemon(t, dir, newTestServer().ms)
	c := rawDial(t, dir)
	const size = 256 << 20
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	wrote := make(chan int64, 1)
	go func() {
		chunk := []byte(`{"mcp_subagent":1,"version":"` + strings.Repeat("v", 1<<20-30))
		var n int64
		for n < size {
			k, err := c.Write(chunk)
			n += int64(k)
			if err != nil {
				break
			}
		}
		wrote <- n
	}()
	line, _ := bufio.NewReader(c).ReadBytes('\n')
	n := <-wrote // the daemon closed: the writes fail
	runtime.ReadMemStats(&after)
	var w Welcome
	if json.Unmarshal(line, &w) != nil || !strings.Contains(w.Error, "the hello is over 65536 bytes") {
		t.Errorf("the daemon answered %q; want the refusal of an oversized hello", line)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("hello: %d bytes written before the daemon closed; the process allocated %d KiB meanwhile", n, alloc>>10)
	if n >= size {
		t.Errorf("the daemon read the whole %d-byte hello", n)
	}
	if alloc > 16<<20 {
		t.Errorf("the process allocated %d MiB while refusing the hello; want under 16 MiB", alloc>>20)
	}
}

// A session whose client stops reading does not hold a takeover: its
// handover line gets a bounded time, then the session is dropped, the
// daemon releases the directory and the next one serves.
func TestATakeoverIsNotHeldByASessionThatDoesNotRead(t *testing.T) {
	dir := t.TempDir()
	ts := newTestServer()
	d := runDaemon(t, dir, ts.ms)
	c := openSession(t, dir) // its answers are never read after the handshake
	const calls, size = 16, 1 << 20
	for i := range calls {
		if _, err := io.WriteString(c, callTool(jsonID(i), "big", map[string]any{"size": size})); err != nil {
			t.Fatal(err)
		}
	}
	// Every answer exists: 16 MiB, far over the socket's buffers, so
	// writes block on the client.
	for range calls {
		<-ts.entered
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stopped := make(chan error, 1)
	start := time.Now()
	go func() { stopped <- Stop(ctx, dir, Hello{Op: "takeover"}) }()
	if r := d.ended(t, edge.ByeTimeout+10*time.Second); r != ReasonTakeover {
		t.Errorf("the daemon ended for %q; want takeover", r)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	t.Logf("the takeover completed in %v", time.Since(start).Round(time.Millisecond))
	runDaemon(t, dir, ts.ms)
	openSession(t, dir) // the next daemon serves
}

func jsonID(i int) string { b, _ := json.Marshal(i + 100); return string(b) }

// A session that sends without reading holds at most edge.MaxInFlight requests:
// then the daemon stops reading it, and the client's writes wait. Whether
// the answers are large (tool results) or small (subscriptions).
func TestASessionThatDoesNotReadHoldsBoundedRequests(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  func(i int) string
	}{
		{"64 KiB answers", func(i int) string { return callTool(jsonID(i), "big", map[string]any{"size": 64 << 10}) }},
		{"subscriptions", func(i int) string {
			return request(jsonID(i), "resources/subscribe", map[string]any{"uri": fmt.Sprintf("test://unknown/%d", i)})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ts := newTestServer()
			runDaemon(t, dir, ts.ms)
			c := openSession(t, dir) // its answers are never read
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			g0 := runtime.NumGoroutine()
			const n = 20000
			waited, sent := false, n
			for i := range n {
				_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
				if _, err := io.WriteString(c, tc.req(i)); err != nil {
					if !errors.Is(err, os.ErrDeadlineExceeded) {
						t.Fatal(err)
					}
					waited, sent = true, i
					break
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			g := runtime.NumGoroutine() - g0
			inuse := int64(after.HeapInuse+after.StackInuse) - int64(before.HeapInuse+before.StackInuse)
			t.Logf("%d requests written before the client waited (of %d), tool calls handled %d, goroutines %+d, heap+stack in use %+d KiB", sent, n, ts.calls.Load(), g, inuse>>10)
			if !waited {
				t.Fatalf("the client wrote %d requests and never waited: the daemon read them all without answering (%d goroutines)", n, g)
			}
			// A few answers fit in the socket's buffers and free their slots.
			if h := ts.calls.Load(); h > edge.MaxInFlight+16 {
				t.Errorf("%d requests were taken from a session that reads nothing; want at most about %d", h, edge.MaxInFlight)
			}
			if g > 2*edge.MaxInFlight {
				t.Errorf("goroutines grew by %d; want at most about %d", g, edge.MaxInFlight)
			}
		})
	}
}

// Ids come back byte-exact through the relay and the daemon: an integer
// over 2^53, a string that looks like the relay's own, one with HTML
// characters.
func TestIDsComeBackByteExact(t *testing.T) {
	dir := t.TempDir()
	runDaemon(t, dir, newTestServer().ms)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := startRelay(t, ctx, dir)
	r.send(t, initialize)
	answerTo(t, r.out, `"init"`)
	for _, id := range []string{`9007199254740993`, `-9007199254740995`, `"mcp-subagent-relay-1"`, `"mcp-subagent-relay-x"`, `"<a&b>"`, `1.5`, `12345678901234567890123`} {
		r.send(t, request(id, "ping", map[string]any{}))
		if m := answerTo(t, r.out, id); m["error"] != nil {
			t.Errorf("ping %s: %s", id, m["error"])
		}
	}
}

// A relay follows its daemon's handover to the next daemon: the call in
// flight is answered with the restart (not as if the client had
// cancelled), and the session goes on on the new daemon.
func TestARelayFollowsATakeoverAndAnswersTheCallInFlight(t *testing.T) {
	dir := t.TempDir()
	ts := newTestServer()
	d := runDaemon(t, dir, ts.ms)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := startRelay(t, ctx, dir)
	r.send(t, initialize)
	answerTo(t, r.out, `"init"`)
	r.send(t, callTool(`7`, "block", nil))
	<-ts.entered

	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	stopped := make(chan error, 1)
	go func() { stopped <- Stop(sctx, dir, Hello{Op: "takeover"}) }()
	if reason := d.ended(t, 10*time.Second); reason != ReasonTakeover {
		t.Fatalf("the daemon ended for %q", reason)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	runDaemon(t, dir, newTestServer().ms)

	m := answerTo(t, r.out, `7`)
	if e := string(m["error"]); !strings.Contains(e, "daemon restarted during this call") || strings.Contains(string(m["result"]), "cancelled") {
		t.Errorf("the call in flight was answered %s %s; want the restart error", m["error"], m["result"])
	}
	r.send(t, callTool(`8`, "echo", nil))
	if m := answerTo(t, r.out, `8`); m["error"] != nil || !strings.Contains(string(m["result"]), "echo") {
		t.Errorf("after the takeover: %s %s", m["error"], m["result"])
	}
	select {
	case err := <-r.done:
		t.Errorf("the relay ended: %v", err)
	default:
	}
}

// A relay whose daemon goes and no new one comes answers its calls in
// flight with an error saying so, then ends. The daemon's listener closes
// late, as under load: the relay's reconnect must not find the daemon
// going away and take it for a new one ("restarted during this call").
func TestARelayWithNoNextDaemonAnswersTheCallInFlight(t *testing.T) {
	dir := t.TempDir()
	ts := newTestServer()
	d := runDaemonClosing(t, dir, ts.ms, func() { time.Sleep(50 * time.Millisecond) })
	c, err := Connect(context.Background(), ConnectOptions{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	defer inW.Close()
	outR, outW := io.Pipe()
	out := lines(outR)
	done := make(chan error, 1)
	go func() {
		done <- Relay(context.Background(), c, inR, outW, 0, func(ctx context.Context, _ bool) (*Conn, error) {
			return Connect(ctx, ConnectOptions{DataDir: dir, Await: true, Timeout: 200 * time.Millisecond})
		}, nil)
		outW.Close()
	}()
	io.WriteString(inW, initialize)
	answerTo(t, out, `"init"`)
	io.WriteString(inW, callTool(`"a"`, "block", nil))
	<-ts.entered
	d.stop()
	m := answerTo(t, out, `"a"`)
	if e := string(m["error"]); !strings.Contains(e, "no new daemon answered") {
		t.Errorf("the call in flight was answered %s %s; want the daemon-gone error", m["error"], m["result"])
	}
	if err := <-done; err == nil {
		t.Error("the relay ended with no error")
	}
}

// A daemon that is stopping welcomes no connection, though its listener
// is not closed yet (its close is stalled, as a loaded scheduler may): the
// client dials on and finds the next daemon, or none, never the one going
// away, which would end its session at once.
func TestAStoppingDaemonWelcomesNoConnection(t *testing.T) {
	dir := t.TempDir()
	closing, release := make(chan struct{}), make(chan struct{})
	d := runDaemonClosing(t, dir, newTestServer().ms, func() {
		close(closing)
		<-release
	})
	d.cancel()
	<-closing // stopping, the listener still open
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := dial(ctx, dir, Hello{PID: os.Getpid()})
	close(release)
	if err == nil {
		c.Close()
		t.Fatalf("a daemon that is stopping welcomed a session: %+v", c.Welcome)
	}
	if !strings.Contains(err.Error(), "closed the connection before its welcome") {
		t.Errorf("the dial failed with %v; want the connection closed without a welcome", err)
	}
	d.stop()
}

// A daemon that stops closes its listener before it ends its sessions: a
// relay that reconnects as soon as its session ends finds no daemon there,
// however late the listener's close runs. The hook delays that close, as
// a loaded scheduler may; the sessions must wait for it.
func TestAStoppingDaemonClosesItsListenerBeforeItsSessions(t *testing.T) {
	dir := t.TempDir()
	d := runDaemonClosing(t, dir, newTestServer().ms, func() { time.Sleep(100 * time.Millisecond) })
	c := openSession(t, dir)
	d.cancel()
	if _, err := io.Copy(io.Discard, c.R); err != nil { // EOF: the session ended
		t.Fatal(err)
	}
	nc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: SocketPath(dir), Net: "unix"})
	if err == nil {
		nc.Close()
		t.Fatal("the session ended while the daemon's listener still took connections")
	}
	d.stop()
}

// A cancelled relay (Ctrl-C, SIGTERM) returns at once, its stdin still
// open; the daemon goes on.
func TestACancelledRelayReturnsWithStdinOpen(t *testing.T) {
	dir := t.TempDir()
	runDaemon(t, dir, newTestServer().ms)
	ctx, cancel := context.WithCancel(context.Background())
	r := startRelay(t, ctx, dir)
	r.send(t, initialize)
	answerTo(t, r.out, `"init"`)
	cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("the cancelled relay returned %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("the relay did not return within a second of its cancellation")
	}
	openSession(t, dir) // the daemon still serves
}
