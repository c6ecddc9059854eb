package edge

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/mcp-subagent/mcp-subagent/internal/framing"
)

// MaxInFlight bounds the requests one session has running: a client that
// sends without reading the answers would otherwise pin a goroutine and
// an answer per request. At the bound the session stops reading until one
// answers, so the client's writes wait (backpressure). It is well above
// what a client keeps waiting on purpose: a quick call written after 500
// waiting ones (list_agents with wait_seconds) must not wait behind them
// (TestAQuickCallIsNotStalledByWaitingCalls).
const MaxInFlight = 1024

// ByeTimeout bounds the last line to a session as the daemon hands over: a
// client that does not read must not hold the daemon (and with it the
// data directory) past it.
const ByeTimeout = 2 * time.Second

// streamSession is one MCP session over one stream connection (a daemon
// session's socket, or stdio with --no-daemon): mcp-go's stdio session,
// but one per connection (mcp-go's stdio server has a single process-wide
// session), and with no worker pool: every request runs on its own
// goroutine, at most MaxInFlight at once. The Server's session table
// tracks these by their type: ServeStream and ServeConn open and end them
// (openSession), the registration hooks leave them alone.
type streamSession struct {
	id    string
	w     io.Writer
	close func() // ends a blocked read of the connection
	log   *slog.Logger

	// setWriteDeadline bounds writes to the connection, those blocked
	// already included; nil: w has no deadline (stdio).
	setWriteDeadline func(time.Time) error
	// relayed: the daemon serves this session for a relay. When the daemon
	// ends it (a stop, a takeover, a signal), answers to the calls that
	// ending cut short are not sent: they would read as the client's
	// cancellation, and the relay answers each call in flight itself.
	relayed bool

	slots chan struct{} // one per request running

	wmu sync.Mutex // serialises writes: one JSON-RPC message per line

	notifications chan mcp.JSONRPCNotification
	initialized   atomic.Bool
	level         atomic.Value // mcp.LoggingLevel
	clientInfo    atomic.Value // mcp.Implementation
	clientCaps    atomic.Value // mcp.ClientCapabilities

	bye func() []byte // the last line to send as the daemon closes the session; nil: none

	intercept Intercept // sees each message before the MCP server; nil: none

	maxMessage int // bytes in one message from the client; a longer one is refused

	nextID  atomic.Int64
	pmu     sync.Mutex
	pending map[int64]chan rpcReply // our requests to the client (roots/list)
}

type rpcReply struct {
	result json.RawMessage
	err    error
}

var (
	_ server.SessionWithLogging    = (*streamSession)(nil)
	_ server.SessionWithClientInfo = (*streamSession)(nil)
	_ server.SessionWithRoots      = (*streamSession)(nil)
)

func newStreamSession(id string, w io.Writer, close func(), maxMessage int, log *slog.Logger) *streamSession {
	if maxMessage <= 0 {
		maxMessage = framing.DefaultMaxMessage
	}
	return &streamSession{id: id, w: w, close: close, maxMessage: maxMessage, log: log,
		notifications: make(chan mcp.JSONRPCNotification, 100), pending: map[int64]chan rpcReply{},
		slots: make(chan struct{}, MaxInFlight)}
}

func (s *streamSession) SessionID() string                                   { return s.id }
func (s *streamSession) NotificationChannel() chan<- mcp.JSONRPCNotification { return s.notifications }
func (s *streamSession) Initialize()                                         { s.initialized.Store(true) }
func (s *streamSession) Initialized() bool                                   { return s.initialized.Load() }
func (s *streamSession) SetLogLevel(l mcp.LoggingLevel)                      { s.level.Store(l) }

func (s *streamSession) GetLogLevel() mcp.LoggingLevel {
	if l, ok := s.level.Load().(mcp.LoggingLevel); ok {
		return l
	}
	return mcp.LoggingLevelError
}

func (s *streamSession) GetClientInfo() mcp.Implementation {
	ci, _ := s.clientInfo.Load().(mcp.Implementation)
	return ci
}

func (s *streamSession) SetClientInfo(ci mcp.Implementation) { s.clientInfo.Store(ci) }

func (s *streamSession) GetClientCapabilities() mcp.ClientCapabilities {
	c, _ := s.clientCaps.Load().(mcp.ClientCapabilities)
	return c
}

func (s *streamSession) SetClientCapabilities(c mcp.ClientCapabilities) { s.clientCaps.Store(c) }

// ListRoots asks the client for its roots and waits for the answer.
func (s *streamSession) ListRoots(ctx context.Context, _ mcp.ListRootsRequest) (*mcp.ListRootsResult, error) {
	raw, err := s.request(ctx, string(mcp.MethodListRoots), nil)
	if err != nil {
		return nil, err
	}
	var res mcp.ListRootsResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("roots/list answer: %w", err)
	}
	return &res, nil
}

// request sends a server-to-client request (params nil: none) and waits
// for its response.
func (s *streamSession) request(ctx context.Context, method string, params any) (json.RawMessage, error) {
	id := s.nextID.Add(1)
	ch := make(chan rpcReply, 1)
	s.pmu.Lock()
	s.pending[id] = ch
	s.pmu.Unlock()
	defer func() {
		s.pmu.Lock()
		delete(s.pending, id)
		s.pmu.Unlock()
	}()
	msg := struct {
		JSONRPC string `json:"jsonrpc"`
		ID      int64  `json:"id"`
		Method  string `json:"method"`
		Params  any    `json:"params,omitempty"`
	}{mcp.JSONRPC_VERSION, id, method, params}
	if err := s.write(msg); err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		return r.result, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// write sends one JSON-RPC message as one line.
func (s *streamSession) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.writeLine(append(b, '\n'))
}

// writeLine sends one encoded message, newline included.
func (s *streamSession) writeLine(b []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, err := s.w.Write(b)
	return err
}

// encodeResponse encodes resp as one line carrying the request's id
// exactly as the client wrote it: mcp-go keeps a numeric id as a float64
// or an int64, which rounds an integer over 2^53, and re-escapes a string.
// A client matches answers to its requests by that id.
func encodeResponse(resp mcp.JSONRPCMessage, id json.RawMessage) ([]byte, error) {
	b, err := json.Marshal(resp)
	if err != nil {
		return nil, err
	}
	var parsed mcp.RequestId
	if json.Unmarshal(id, &parsed) == nil {
		if back, err := json.Marshal(parsed); err == nil && bytes.Equal(back, id) {
			return append(b, '\n'), nil // the id survived as it was: the common case
		}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if _, ok := m["id"]; !ok || len(id) == 0 {
		return append(b, '\n'), nil
	}
	m["id"] = id
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false) // the id's bytes as they came
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// envelope is what the read loop needs of a message to route it.
type envelope struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// serve runs the session until the connection ends or ctx is done: each
// request on its own goroutine (a foreground subagent call blocks for
// minutes and must hold nothing shared), notifications in order on the read
// loop. It returns when every request it started has answered.
func (s *streamSession) serve(ctx context.Context, ms *server.MCPServer, r *bufio.Reader) error {
	outer := ctx // ended by the daemon, not by the client
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	wg.Go(func() {
		for {
			select {
			case n := <-s.notifications:
				if err := s.write(n); err != nil {
					s.log.Debug("writing a notification failed", "session", s.id, "err", err)
				}
			case <-ctx.Done():
				return
			}
		}
	})
	// The connection closes when ctx ends, which ends a blocked read.
	stop := context.AfterFunc(ctx, func() {
		if s.bye != nil {
			if b := s.bye(); b != nil {
				// A write already blocked on a client that does not read
				// holds wmu: the deadline ends it, and this one too.
				if s.setWriteDeadline != nil {
					_ = s.setWriteDeadline(time.Now().Add(ByeTimeout))
				}
				s.wmu.Lock()
				_, err := s.w.Write(b)
				s.wmu.Unlock()
				if err != nil {
					s.log.Warn("a session did not take the handover line in time: dropped", "session", s.id, "err", err)
				}
			}
		}
		s.close()
	})
	defer stop()
	for {
		line, size, tooLong, err := framing.ReadMessage(r, s.maxMessage)
		if tooLong {
			s.refuse(line, size)
		} else if len(bytes.TrimSpace(line)) > 0 {
			s.handle(ctx, outer, ms, &wg, line)
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrClosedPipe) || ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// refuse answers a message over the bound with an error, by the id its
// first bytes show, or drops it.
func (s *streamSession) refuse(head []byte, size int) {
	if reply := framing.TooLongReply(head, size, s.maxMessage); reply != nil {
		s.wmu.Lock()
		_, _ = s.w.Write(reply)
		s.wmu.Unlock()
	}
	s.log.Warn("refused a message over the size limit", "session", s.id, "bytes", size, "max_message_bytes", s.maxMessage)
}

func (s *streamSession) handle(ctx, outer context.Context, ms *server.MCPServer, wg *sync.WaitGroup, line []byte) {
	var env envelope
	if err := json.Unmarshal(line, &env); err != nil {
		_ = s.write(mcp.NewJSONRPCError(mcp.NewRequestId(nil), mcp.PARSE_ERROR, "Parse error", nil))
		return
	}
	if env.Method == "" && len(env.ID) > 0 { // a response to one of our requests
		var id int64
		if json.Unmarshal(env.ID, &id) == nil {
			s.pmu.Lock()
			ch := s.pending[id]
			s.pmu.Unlock()
			if ch != nil {
				r := rpcReply{result: env.Result}
				if env.Error != nil {
					r.err = fmt.Errorf("the client answered with an error: %s", env.Error.Message)
				}
				ch <- r
			}
		}
		return
	}
	raw := json.RawMessage(line)
	if len(env.ID) == 0 || bytes.Equal(env.ID, []byte("null")) {
		_ = s.dispatch(ctx, ms, raw) // a notification: in order, no answer
		return
	}
	select {
	case s.slots <- struct{}{}: // at the bound, wait: reads stop, the client's writes wait
	case <-ctx.Done():
		return
	}
	wg.Go(func() {
		defer func() { <-s.slots }()
		resp := s.dispatch(ctx, ms, raw)
		if resp == nil || (s.relayed && outer.Err() != nil) {
			return
		}
		b, err := encodeResponse(resp, env.ID)
		if err == nil {
			err = s.writeLine(b)
		}
		if err != nil {
			s.log.Debug("writing a response failed", "session", s.id, "err", err)
		}
	})
}

// dispatch runs one message through the MCP server; a panic becomes an
// internal error, never the end of the daemon.
func (s *streamSession) dispatch(ctx context.Context, ms *server.MCPServer, raw json.RawMessage) (resp mcp.JSONRPCMessage) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("a request handler panicked", "session", s.id, "panic", r)
			var env envelope
			_ = json.Unmarshal(raw, &env)
			resp = mcp.NewJSONRPCError(mcp.NewRequestId(env.ID), mcp.INTERNAL_ERROR, fmt.Sprintf("internal error: %v", r), nil)
		}
	}()
	if s.intercept != nil {
		return s.intercept(ctx, raw, ms.HandleMessage)
	}
	return ms.HandleMessage(ctx, raw)
}

// Intercept sees a session's message before the MCP server does: it
// answers the message itself or hands it to next (the server's
// HandleMessage). The tasks layer is one.
type Intercept func(ctx context.Context, raw json.RawMessage, next func(context.Context, json.RawMessage) mcp.JSONRPCMessage) mcp.JSONRPCMessage

// Conn is one connection an MCP session runs over, past any handshake:
// newline-delimited JSON-RPC (MCP's stdio framing) both ways.
type Conn struct {
	// Session is who is connected: ID and Principal are required; Cwd
	// and Settings as the transport tells them.
	Session SessionInfo
	R       *bufio.Reader
	W       io.Writer
	// Close ends a blocked read of R (and the connection).
	Close func()
	// SetWriteDeadline bounds writes to W, those blocked already
	// included; nil: W has no deadline (stdio).
	SetWriteDeadline func(time.Time) error
	// Bye is the last line to send as ctx ends (the daemon stopping, or
	// handing over); nil, or a nil line: none.
	Bye func() []byte
	// Relayed: a daemon's relay is the client. Answers to the calls that
	// the end of ctx cut short are not sent: they would read as the
	// client's cancellation, and the relay answers each call in flight
	// itself.
	Relayed bool
	// MaxMessage bounds one message from the client, in bytes; a longer
	// one is refused with an error. Zero: framing.DefaultMaxMessage.
	MaxMessage int
}

// ServeConn serves one MCP session over c, with every request on its own
// goroutine, until the connection ends or ctx does; it returns once every
// request it started has answered. The session is in the Server's table
// (its notices are its own, its cwd and settings are its children's)
// while it is served, and its calls are its principal's. An intercept (at
// most one; nil: none) sees each message before the MCP server.
func (s *Server) ServeConn(ctx context.Context, c Conn, log *slog.Logger, intercept ...Intercept) error {
	if c.Session.ID == "" || c.Session.Principal == "" {
		return errors.New("serving a session: its id and its principal are required")
	}
	end := s.openSession(c.Session)
	defer end()
	return ServeSession(WithPrincipal(ctx, c.Session.Principal), s.mcp, c, log, intercept...)
}

// ServeSession serves c through ms, registered as one mcp-go session, out
// of any Server's table: the transport alone (the daemon's tests serve
// their own tools with it). Servers serve through ServeConn.
func ServeSession(ctx context.Context, ms *server.MCPServer, c Conn, log *slog.Logger, intercept ...Intercept) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ss := newStreamSession(c.Session.ID, c.W, c.Close, c.MaxMessage, log)
	if len(intercept) > 0 {
		ss.intercept = intercept[0] // nil: none
	}
	ss.setWriteDeadline, ss.bye, ss.relayed = c.SetWriteDeadline, c.Bye, c.Relayed
	ctx = ms.WithContext(ctx, ss)
	if err := ms.RegisterSession(ctx, ss); err != nil {
		return fmt.Errorf("registering the session: %w", err)
	}
	defer ms.UnregisterSession(ctx, ss.id)
	err := ss.serve(ctx, ms, c.R)
	log.Debug("session ended", "session", ss.id, "client", ss.GetClientInfo().Name)
	return err
}

// ServeStdio serves one MCP session over r and w in this process (stdio
// with --no-daemon) the way the daemon serves each relayed connection
// (ServeConn): every request on its own goroutine, so calls that wait for
// minutes hold no worker a quick call needs. It returns when r ends or
// ctx is done, once every request it started has answered.
//
// A read of r cannot be interrupted (stdin is a blocking file), so r is
// copied through a pipe by a goroutine that ends at r's EOF or at the
// first read after ServeStdio returned; the process exits soon after.
//
// The session's id is "stdio-" and a random part: nothing recognises a
// session by its id (ServeConn's sessions are known by their type), and
// two servers sharing a store never share one.
func (s *Server) ServeStdio(ctx context.Context, principal string, r io.Reader, w io.Writer, maxMessage int, log *slog.Logger, intercept ...Intercept) error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	info := SessionInfo{ID: "stdio-" + hex.EncodeToString(b[:]), Principal: principal}
	pr, pw := io.Pipe()
	go func() {
		_, err := io.Copy(pw, r)
		pw.CloseWithError(err)
	}()
	return s.ServeConn(ctx, Conn{Session: info, R: bufio.NewReaderSize(pr, 64<<10), W: w,
		Close: func() { _ = pr.Close() }, MaxMessage: maxMessage}, log, intercept...)
}
