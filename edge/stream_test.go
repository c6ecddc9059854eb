package edge

import (
	"bufio"
	"context"
	"io"
	"slices"
	"sync"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// noticeless is a fakeManager with no notices pending, for handlers that
// hand a root session its notices.
type noticeless struct{ *fakeManager }

func (noticeless) TakeNotices(string, string) []seam.Notice                  { return nil }
func (noticeless) WaitNotices(context.Context, string, string) []seam.Notice { return nil }
func (noticeless) SessionOpened(string, string)                              {}
func (noticeless) SessionGone(string)                                        {}

// sessionLog is noticeless recording what the manager hears of sessions.
type sessionLog struct {
	noticeless
	mu           sync.Mutex
	opened, gone []string
}

func (l *sessionLog) SessionOpened(principal, session string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.opened = append(l.opened, principal+" "+session)
}

func (l *sessionLog) SessionGone(session string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gone = append(l.gone, session)
}

func (l *sessionLog) heard() (opened, gone []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.opened), slices.Clone(l.gone)
}

// servedSession serves one stream session of s over pipes (as the daemon
// hands one over) and returns a client initialized on it; end closes the
// client and waits for ServeConn.
func servedSession(t *testing.T, s *Server, info SessionInfo) (c *client.Client, end func()) {
	t.Helper()
	clientIn, serverOut := io.Pipe()
	serverIn, clientOut := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- s.ServeConn(ctx, Conn{Session: info, R: bufio.NewReader(serverIn), W: serverOut,
			Close: func() { _ = serverIn.Close() }}, nil)
	}()
	c = client.NewClient(transport.NewIO(clientIn, clientOut, nil))
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "some-client", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	return c, func() {
		c.Close()
		cancel()
		if err := <-served; err != nil {
			t.Errorf("ServeConn: %v", err)
		}
		serverOut.Close()
	}
}

// A stream session is the Server's while it is served: connected, its
// calls its principal's with its cwd and settings, and gone when it ends.
// The manager hears of it (to share its liveness with other instances):
// opened at its root call, gone at its end.
func TestAStreamSessionIsTheServersWhileItIsServed(t *testing.T) {
	var got seam.ParentRef
	f := &fakeManager{list: func(caller seam.ParentRef, _ manager.ListQuery) (manager.ListPage, error) {
		got = caller
		return manager.ListPage{}, nil
	}}
	heard := &sessionLog{noticeless: noticeless{f}}
	s, err := New(heard, Options{Roots: []string{t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	ms := server.NewMCPServer("test", "1", server.WithToolCapabilities(false), server.WithToolFilter(s.Filter), server.WithHooks(s.Hooks()))
	s.Register(ms)
	cwd := t.TempDir()
	settings := &seam.Settings{Env: map[string]string{"X": "1"}}
	c, end := servedSession(t, s, SessionInfo{ID: "sock-1", Principal: "alice", Cwd: cwd, Settings: settings})

	if !s.SessionConnected("sock-1") || s.SessionCount() != 1 {
		t.Fatalf("while served: connected %v, %d sessions; want connected, 1 (the hooks must not count it twice)", s.SessionConnected("sock-1"), s.SessionCount())
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = "list_agents"
	req.Params.Arguments = map[string]any{}
	if res, err := c.CallTool(context.Background(), req); err != nil || res.IsError {
		t.Fatalf("list_agents: %v %+v", err, res)
	}
	if got.Principal != "alice" || got.Session != "sock-1" || got.Cwd != cwd || got.Settings != settings {
		t.Errorf("the call's caller = %+v; want alice on session sock-1 in %s with its settings", got, cwd)
	}
	if opened, gone := heard.heard(); !slices.Equal(opened, []string{"alice sock-1"}) || len(gone) != 0 {
		t.Errorf("after a root call the manager heard opened %q, gone %q; want alice's sock-1 opened", opened, gone)
	}
	end()
	if s.SessionConnected("sock-1") || s.SessionCount() != 0 {
		t.Errorf("after the stream ended: connected %v, %d sessions; want gone", s.SessionConnected("sock-1"), s.SessionCount())
	}
	if _, gone := heard.heard(); !slices.Equal(gone, []string{"sock-1"}) {
		t.Errorf("after the stream ended the manager heard gone %q; want sock-1", gone)
	}
}

// otherSession is an mcp-go session that is not a stream session (an HTTP
// one, say).
type otherSession struct{ id string }

func (o otherSession) SessionID() string { return o.id }
func (otherSession) NotificationChannel() chan<- mcp.JSONRPCNotification {
	return make(chan mcp.JSONRPCNotification, 1)
}
func (otherSession) Initialize()       {}
func (otherSession) Initialized() bool { return true }

// No session id is magic: a session that is not a stream session is
// tracked by the registration hooks whatever its id, "stdio" included
// (stream sessions are known by their type).
func TestNoSessionIDIsMagic(t *testing.T) {
	s := fakeServer(t, &fakeManager{})
	ms := server.NewMCPServer("test", "1", server.WithHooks(s.Hooks()))
	ctx := WithPrincipal(context.Background(), "alice")
	for _, id := range []string{"stdio", "sock-0123"} {
		if err := ms.RegisterSession(ctx, otherSession{id}); err != nil {
			t.Fatal(err)
		}
		if !s.SessionConnected(id) {
			t.Errorf("a registered session named %q is not connected; the hooks must track it", id)
		}
		if p, ok := s.SessionPrincipal(id); !ok || p != "alice" {
			t.Errorf("session %q: principal %q, %v; want alice", id, p, ok)
		}
	}
}
