package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/mcp-subagent/mcp-subagent/edge"
)

// envAttacker, set to a socket path, re-executes the test binary as
// another user's process that plants a listener there (attacker_test.go).
const envAttacker = "MCP_SUBAGENT_DAEMON_TEST_ATTACKER"

func TestMain(m *testing.M) {
	if path := os.Getenv(envAttacker); path != "" {
		os.Exit(attackerMain(path))
	}
	os.Exit(m.Run())
}

// testServer is an MCP server with the tools the tests call: "block"
// waits for its context (and answers as the tools layer does when the
// client cancels) or for release; "big" answers size bytes.
type testServer struct {
	ms      *server.MCPServer
	entered chan string // a tool's name as its handler starts
	calls   atomic.Int64
	release chan struct{}
}

func newTestServer() *testServer {
	ts := &testServer{entered: make(chan string, 4096), release: make(chan struct{})}
	ts.ms = server.NewMCPServer("test", "1", server.WithToolCapabilities(false), server.WithResourceCapabilities(true, false))
	ts.ms.AddTool(mcp.NewTool("block"), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ts.calls.Add(1)
		ts.entered <- "block"
		select {
		case <-ctx.Done():
			return mcp.NewToolResultText("the client cancelled the call"), nil
		case <-ts.release:
			return mcp.NewToolResultText("released"), nil
		}
	})
	ts.ms.AddTool(mcp.NewTool("big", mcp.WithNumber("size")), func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ts.calls.Add(1)
		ts.entered <- "big"
		return mcp.NewToolResultText(strings.Repeat("x", req.GetInt("size", 1))), nil
	})
	ts.ms.AddTool(mcp.NewTool("echo"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("echo"), nil
	})
	return ts
}

// serveMCP serves a daemon's sessions through ms, as the edge serves
// them for the command (a relayed session, the edge's transport).
func serveMCP(ms *server.MCPServer) func(context.Context, *SessionConn) error {
	return func(ctx context.Context, c *SessionConn) error {
		return edge.ServeSession(ctx, ms, edge.Conn{Session: edge.SessionInfo{ID: c.ID, Principal: "local"},
			R: c.Reader, W: c.Conn, Close: func() { _ = c.Conn.Close() }, SetWriteDeadline: c.Conn.SetWriteDeadline,
			Bye: c.Bye, Relayed: true}, nil)
	}
}

// daemonFor runs a daemon of ms on dir until stop (or the test's end);
// stop returns why it ended and releases the directory.
type testDaemon struct {
	l      *Listener
	cancel context.CancelFunc
	done   chan Reason
	closed atomic.Bool
}

func runDaemon(t *testing.T, dir string, ms *server.MCPServer) *testDaemon {
	t.Helper()
	return runDaemonClosing(t, dir, ms, nil)
}

// runDaemonClosing is runDaemon with the listener's closing hook.
func runDaemonClosing(t *testing.T, dir string, ms *server.MCPServer, closing func()) *testDaemon {
	t.Helper()
	l, err := Listen(dir)
	if err != nil {
		t.Fatal(err)
	}
	l.closing = closing
	ctx, cancel := context.WithCancel(context.Background())
	d := &testDaemon{l: l, cancel: cancel, done: make(chan Reason, 1)}
	go func() { d.done <- l.Serve(ctx, Options{Serve: serveMCP(ms), Version: "test"}) }()
	t.Cleanup(func() { d.stop() })
	return d
}

// ended waits for the daemon to end by itself (a stop, a takeover) and
// releases the directory.
func (d *testDaemon) ended(t *testing.T, within time.Duration) Reason {
	t.Helper()
	select {
	case r := <-d.done:
		d.closed.Store(true)
		_ = d.l.Close()
		return r
	case <-time.After(within):
		t.Fatalf("the daemon did not end within %v", within)
		return ""
	}
}

// stop cancels the daemon (if it still runs), waits for Serve and closes.
func (d *testDaemon) stop() Reason {
	if d.closed.Swap(true) {
		return ""
	}
	d.cancel()
	r := <-d.done
	_ = d.l.Close()
	return r
}

// lines reads r's lines onto a channel until it ends.
func lines(r io.Reader) <-chan []byte {
	ch := make(chan []byte, 1024)
	go func() {
		defer close(ch)
		br := bufio.NewReaderSize(r, 1<<20)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				ch <- line
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

// answerTo waits for the line answering id (raw JSON), skipping others.
func answerTo(t *testing.T, ch <-chan []byte, id string) map[string]json.RawMessage {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case line, ok := <-ch:
			if !ok {
				t.Fatalf("the stream ended before the answer to %s", id)
			}
			var m map[string]json.RawMessage
			if json.Unmarshal(line, &m) == nil && string(m["id"]) == id && m["method"] == nil {
				return m
			}
		case <-timeout:
			t.Fatalf("no answer to %s", id)
		}
	}
}

func request(id, method string, params any) string {
	b, _ := json.Marshal(params)
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":%q,"params":%s}`+"\n", id, method, b)
}

func callTool(id, name string, args map[string]any) string {
	return request(id, "tools/call", map[string]any{"name": name, "arguments": args})
}

const initialize = `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n" +
	`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n"

// openSession dials dir's daemon as a session and initializes it; it
// reads nothing more (lines(c.R) does).
func openSession(t *testing.T, dir string) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Connect(ctx, ConnectOptions{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, initialize); err != nil {
		t.Fatal(err)
	}
	if line, err := c.R.ReadBytes('\n'); err != nil || !strings.Contains(string(line), `"id":"init"`) {
		t.Fatalf("the answer to initialize: %q %v", line, err)
	}
	return c
}

// relayed is a client of Relay: it writes to the relay's stdin and reads
// its stdout.
type relayed struct {
	in   *io.PipeWriter
	out  <-chan []byte
	done chan error // Relay's return
}

// startRelay connects to dir's daemon and relays a client's pipes to it;
// a reconnect awaits the next daemon (the test starts it).
func startRelay(t *testing.T, ctx context.Context, dir string) *relayed {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := Connect(cctx, ConnectOptions{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	r := &relayed{in: inW, out: lines(outR), done: make(chan error, 1)}
	go func() {
		err := Relay(ctx, c, inR, outW, 0, func(ctx context.Context, _ bool) (*Conn, error) {
			return Connect(ctx, ConnectOptions{DataDir: dir, Await: true, Timeout: 20 * time.Second})
		}, nil)
		outW.Close()
		r.done <- err
	}()
	t.Cleanup(func() { inW.Close() })
	return r
}

func (r *relayed) send(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(r.in, s); err != nil {
		t.Fatal(err)
	}
}

// rawDial connects to dir's socket with no handshake.
func rawDial(t *testing.T, dir string) *net.UnixConn {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: SocketPath(dir), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
