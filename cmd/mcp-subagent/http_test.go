//go:build e2e

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/edge"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// plainProvider runs one-shot children that answer at once; it counts the
// children it started.
type plainProvider struct{ started atomic.Int32 }

func (p *plainProvider) Name() string                    { return "plain" }
func (p *plainProvider) Capabilities() seam.Capabilities { return seam.Capabilities{} }
func (p *plainProvider) InheritsParentContext() bool     { return false }
func (p *plainProvider) Prepare(context.Context, seam.StartRequest) (seam.CreationInputs, error) {
	p.started.Add(1)
	return seam.CreationInputs{}, nil
}
func (p *plainProvider) NewDriver(_ context.Context, req seam.DriverRequest) (seam.Driver, error) {
	return plainDriver{req.Journal}, nil
}

// plainDriver answers every turn at once.
type plainDriver struct{ j *agent.Journal }

func (plainDriver) RunTurn(context.Context, []agent.Input) agent.TurnResult {
	return agent.TurnResult{Output: "plain says hi", StopReason: agent.StopCompleted}
}
func (d plainDriver) Journal() *agent.Journal { return d.j }
func (plainDriver) Close() error              { return nil }

// toolsServer is the tools over a store-less manager with the plain
// provider, registered on an MCP server wired as newApp wires it; extra
// hooks run beside the tools' own.
func toolsServer(t testing.TB, extra func(*server.Hooks)) (*edge.Server, *server.MCPServer, *plainProvider) {
	t.Helper()
	p := &plainProvider{}
	mgr := manager.New(manager.Options{})
	if err := mgr.Register(p); err != nil {
		t.Fatal(err)
	}
	ts, err := edge.New(mgr, edge.Options{Roots: []string{t.TempDir()}, NoWorkingDirRoot: true})
	if err != nil {
		t.Fatal(err)
	}
	hooks := ts.Hooks()
	if extra != nil {
		extra(hooks)
	}
	ms := server.NewMCPServer("test", "1", server.WithToolCapabilities(false),
		server.WithToolFilter(ts.Filter), server.WithHooks(hooks))
	ts.Register(ms)
	return ts, ms, p
}

func connect(t *testing.T, url string, headers map[string]string) *client.Client {
	t.Helper()
	c, err := client.NewStreamableHttpClient(url, transport.WithHTTPHeaders(headers))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	return c
}

func callToolOn(t *testing.T, c *client.Client, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A callback token revoked after the guard let its request in once made
// the call run as the stdio root "local" at depth 0: the token was looked
// up again, and a failed lookup fell back to the default principal. The
// call must be refused, and nothing may start.
func TestACallbackWhoseTokenIsRevokedAfterTheGuardIsRefused(t *testing.T) {
	ts, ms, p := toolsServer(t, nil)
	cb, revoke := ts.MintCallback(seam.ParentRef{Principal: "local", AgentID: "agent-child", Depth: 1, Cwd: t.TempDir()})
	streamable := newStreamable(ms, HTTPConfig{}, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { _ = streamable.Shutdown(context.Background()) })
	var armed atomic.Bool
	// The window: the guard has accepted the token; the call has not run.
	window := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if armed.Load() {
			revoke()
		}
		limitBody(streamable, HTTPConfig{}).ServeHTTP(w, r)
	})
	hs := httptest.NewServer(ts.CallbackGuard(window))
	t.Cleanup(hs.Close)
	c := connect(t, hs.URL, map[string]string{"Authorization": "Bearer " + cb.Token})

	armed.Store(true)
	res := callToolOn(t, c, "subagent", map[string]any{"description": "escalate", "prompt": "run as the root"})
	if got := fmt.Sprint(res.Content); !res.IsError || !strings.Contains(got, "UNAUTHORIZED") || !strings.Contains(got, "revoked") {
		t.Errorf("call after revocation = isError %v %q; want UNAUTHORIZED naming the revoked token", res.IsError, got)
	}
	if n := p.started.Load(); n != 0 {
		t.Errorf("%d children started for a caller whose token was revoked", n)
	}
	// And the next request with the revoked token does not get past the guard.
	req, _ := http.NewRequest("POST", hs.URL, strings.NewReader(initBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+cb.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("revoked token: status %d, want 401", resp.StatusCode)
	}
}

// The Bearer scheme's name is case-insensitive (RFC 9110 §11.1): "bearer"
// and "BEARER" are the same credentials, on the main endpoint and on the
// callback endpoint.
func TestTheBearerSchemeIsCaseInsensitive(t *testing.T) {
	const token = "alice-secret-token-0123456789"
	ts, _, _ := toolsServer(t, nil)
	cb, _ := ts.MintCallback(seam.ParentRef{Principal: "local", AgentID: "agent-child", Depth: 1})
	var got string
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = edge.Principal(r.Context()) })
	mainGuard := guard(ok, HTTPConfig{Tokens: []TokenConfig{{Principal: "alice", Token: token}}}, ts.Tokens())
	callback := ts.CallbackGuard(ok)
	for _, tc := range []struct {
		header string
		want   int
	}{
		{"Bearer %s", http.StatusOK},
		{"bearer %s", http.StatusOK},
		{"BEARER %s", http.StatusOK},
		{"Bearer  %s", http.StatusOK},
		{"Basic %s", http.StatusUnauthorized},
		{"Bearer%s", http.StatusUnauthorized},
		{"Bearer ", http.StatusUnauthorized},
	} {
		for name, h := range map[string]struct {
			handler http.Handler
			token   string
		}{"main": {mainGuard, token}, "callback": {callback, cb.Token}} {
			value := tc.header
			if strings.Contains(value, "%s") {
				value = fmt.Sprintf(value, h.token)
			}
			rec := httptest.NewRecorder()
			req := httptest.NewRequest("POST", "/mcp", nil)
			req.Header.Set("Authorization", value)
			got = ""
			h.handler.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("%s: Authorization %q: status %d, want %d", name, strings.ReplaceAll(value, h.token, "<token>"), rec.Code, tc.want)
			}
			if name == "main" && tc.want == http.StatusOK && got != "alice" {
				t.Errorf("main: Authorization %q: principal %q, want alice", strings.ReplaceAll(value, h.token, "<token>"), got)
			}
		}
	}
}

// countingReader is an endless body that counts what was read of it.
type countingReader struct{ n atomic.Int64 }

func (c *countingReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	c.n.Add(int64(len(p)))
	return len(p), nil
}

// A body over the limit is refused with 413 naming the config key, and no
// more of it is read than the limit: its size costs no memory.
func TestAnOversizeBodyIsRefusedBeforeItIsBuffered(t *testing.T) {
	const limit = 64 << 10
	hc := HTTPConfig{MaxBodyBytes: limit}
	var reached atomic.Bool
	h := limitBody(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached.Store(true) }), hc)
	for _, declared := range []bool{true, false} {
		t.Run(fmt.Sprintf("content-length %v", declared), func(t *testing.T) {
			body := &countingReader{}
			req := httptest.NewRequest("POST", "/mcp", io.NopCloser(body))
			req.ContentLength = -1 // chunked: the size is learned by reading
			if declared {
				req.ContentLength = 1 << 30
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "http.max_body_bytes") || !strings.Contains(rec.Body.String(), fmt.Sprint(limit)) {
				t.Errorf("status %d %q; want 413 naming the limit and http.max_body_bytes", rec.Code, rec.Body.String())
			}
			if n := body.n.Load(); n > limit+64<<10 {
				t.Errorf("%d bytes of the body were read for a limit of %d", n, limit)
			}
			if declared && body.n.Load() != 0 {
				t.Errorf("a body declared too large was read (%d bytes)", body.n.Load())
			}
			if reached.Load() {
				t.Error("the oversize request reached the MCP handler")
			}
		})
	}
	// At the limit it goes through whole.
	var got int
	h = limitBody(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = len(b)
	}), hc)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/mcp", io.LimitReader(&countingReader{}, limit)))
	if rec.Code != http.StatusOK || got != limit {
		t.Errorf("a body of exactly the limit: status %d, %d bytes passed on", rec.Code, got)
	}
}

// pipeListener serves HTTP over in-memory pipes, so net/http's deadlines
// run on synctest's fake clock.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) dial() net.Conn {
	c, s := net.Pipe()
	l.conns <- s
	return c
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// serveOnPipes runs the HTTP server serve --http runs over h, and stops it
// when the test ends.
func serveOnPipes(t *testing.T, h http.Handler, hc HTTPConfig) *pipeListener {
	l := newPipeListener()
	srv := newHTTPServer(h, hc)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return l
}

// A client that sends a request's body slowly (or stops half way) once
// held its connection and handler forever; read_timeout_seconds cuts it.
func TestATrickledBodyIsCutByTheReadTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hc := HTTPConfig{ReadTimeoutSeconds: 5}
		var reached atomic.Bool
		l := serveOnPipes(t, limitBody(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached.Store(true) }), hc), hc)
		c := l.dial()
		defer c.Close()
		t0 := time.Now()
		// Headers, then one byte a second of a 1000-byte body.
		if _, err := io.WriteString(c, "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for range 1000 {
				select {
				case <-time.After(time.Second):
				case <-stop:
					return
				}
				if _, err := c.Write([]byte("a")); err != nil {
					return
				}
			}
		}()
		_ = c.SetReadDeadline(t0.Add(time.Minute))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no response to a trickled body within a minute: %v", err)
		}
		resp.Body.Close()
		if elapsed := time.Since(t0); resp.StatusCode != http.StatusRequestTimeout || elapsed < 5*time.Second || elapsed > 6*time.Second {
			t.Errorf("trickled body: status %d after %v; want 408 after the 5s read timeout", resp.StatusCode, elapsed)
		}
		if reached.Load() {
			t.Error("the cut request reached the MCP handler")
		}
	})
}

// An idle keep-alive connection is closed after idle_timeout_seconds.
func TestAnIdleConnectionIsClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hc := HTTPConfig{IdleTimeoutSeconds: 30}
		l := serveOnPipes(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }), hc)
		c := l.dial()
		defer c.Close()
		if _, err := io.WriteString(c, "GET /mcp HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		t0 := time.Now()
		_ = c.SetReadDeadline(t0.Add(time.Hour))
		_, err = br.ReadByte()
		if elapsed := time.Since(t0); !errors.Is(err, io.EOF) || elapsed < 30*time.Second || elapsed > 31*time.Second {
			t.Errorf("idle connection: read %v after %v; want EOF after the 30s idle timeout", err, elapsed)
		}
	})
}

// The read timeout bounds sending a request, not answering it: a tool call
// that answers after minutes, and a GET stream open for longer, are not cut.
func TestTheReadTimeoutDoesNotCutLongResponses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hc := HTTPConfig{ReadTimeoutSeconds: 5}
		h := limitBody(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body)
			for i := range 3 {
				select {
				case <-time.After(time.Minute):
				case <-r.Context().Done():
					return
				}
				fmt.Fprintf(w, "event %d\n", i)
				w.(http.Flusher).Flush()
			}
		}), hc)
		l := serveOnPipes(t, h, hc)
		tr := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return l.dial(), nil }}
		defer tr.CloseIdleConnections()
		for _, method := range []string{"GET", "POST"} {
			var body io.Reader
			if method == "POST" {
				body = strings.NewReader("{}")
			}
			req, _ := http.NewRequest(method, "http://x/mcp", body)
			t0 := time.Now()
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(b) != "event 0\nevent 1\nevent 2\n" || time.Since(t0) < 3*time.Minute {
				t.Errorf("%s answered over 3 minutes: %q, %v after %v", method, b, err, time.Since(t0))
			}
		}
	})
}

// 20,000 abandoned HTTP sessions (initialized, never deleted) once stayed
// forever: +253 MB. Sessions idle past session_idle_seconds are forgotten
// by mcp-go, by the tools and by the principal binding; a session in use
// is kept.
func TestAbandonedSessionsExpire(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	synctest.Test(t, func(t *testing.T) {
		var registered atomic.Int64
		ts, ms, _ := toolsServer(t, func(h *server.Hooks) {
			h.AddOnRegisterSession(func(context.Context, server.ClientSession) { registered.Add(1) })
			h.AddOnUnregisterSession(func(context.Context, server.ClientSession) { registered.Add(-1) })
		})
		hc := HTTPConfig{SessionIdleSeconds: 600}
		h, streamable := httpHandler(ms, ts, hc, slog.New(slog.DiscardHandler), nil)
		defer func() { _ = streamable.Shutdown(context.Background()) }()
		do := func(body, session string) *httptest.ResponseRecorder {
			req := httptest.NewRequest("POST", "/mcp", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if session != "" {
				req.Header.Set(server.HeaderKeySessionID, session)
				req.Header.Set("Mcp-Protocol-Version", mcp.LATEST_LEGACY_PROTOCOL_VERSION)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			return rec
		}
		const ping = `{"jsonrpc":"2.0","id":2,"method":"ping"}`
		heap := func() uint64 {
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			return m.HeapAlloc
		}
		kept := do(initBody, "").Header().Get(server.HeaderKeySessionID)
		base := heap()
		for range n {
			if rec := do(initBody, ""); rec.Code != http.StatusOK {
				t.Fatalf("initialize: %d %s", rec.Code, rec.Body)
			}
		}
		full := heap()
		if got := registered.Load(); got != int64(n+1) {
			t.Fatalf("%d sessions registered, want %d", got, n+1)
		}
		// The kept session makes a request every 5 minutes.
		for range 4 {
			time.Sleep(5 * time.Minute)
			if rec := do(ping, kept); rec.Code != http.StatusOK {
				t.Fatalf("ping on the kept session: %d %s", rec.Code, rec.Body)
			}
		}
		synctest.Wait()
		if got := registered.Load(); got != 1 {
			t.Errorf("%d sessions registered 20 minutes after they were abandoned (idle limit 10), want 1 (the kept one)", got)
		}
		// The tools forget ended sessions after their grace period.
		time.Sleep(3 * time.Minute)
		if rec := do(ping, kept); rec.Code != http.StatusOK {
			t.Fatalf("ping on the kept session: %d %s", rec.Code, rec.Body)
		}
		if got := ts.SessionCount(); got != 1 {
			t.Errorf("the tools know %d sessions, want 1 (the kept one)", got)
		}
		// The kept session is still bound to its principal.
		if !ts.BindSession(kept, "local") || ts.BindSession(kept, "mallory") {
			t.Error("the kept session lost its binding to its principal")
		}
		after := heap()
		t.Logf("heap: %d KiB before, %d KiB with %d sessions, %d KiB after they expired", base>>10, full>>10, n, after>>10)
		if grown, left := full-base, int64(after)-int64(base); left > int64(grown/10) {
			t.Errorf("%d KiB of the %d KiB the abandoned sessions took are still held after they expired", left>>10, grown>>10)
		}
	})
}
