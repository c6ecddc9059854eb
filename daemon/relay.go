package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/mcp-subagent/mcp-subagent/internal/framing"
)

// Relay copies a session's stdio to and from the daemon until the client
// ends it (stdin's EOF half-closes the connection; the daemon ends the
// session and closes) or ctx ends (a signal: the relay returns at once,
// whatever stdin does; the daemon and its children go on).
//
// When the daemon goes away under a live session (killed, or replaced by
// a newer binary), reconnect is called for a new connection — which
// starts a new daemon — and the session goes on: the relay replays the
// client's initialize and initialized to it (swallowing the answer) and
// answers each request that was in flight with an error saying so, since
// its daemon is gone. Children are the store's, so none is lost. With
// reconnect nil, or when no new daemon answers, the relay answers the
// requests in flight with an error and ends.
//
// Ids pass byte-exact both ways; the replayed initialize's answer is told
// apart by when it comes (the client's messages wait until it is in), not
// by its id, so no id of the client's is ever taken for the relay's.
//
// A daemon handing over to a newer binary says so before it closes
// (Handover); reconnect is then told not to start a daemon of its own, but
// to wait for the one taking over.
//
// A client message longer than maxMessage bytes (zero: framing.DefaultMaxMessage)
// is answered with an error here and not held or forwarded.
func Relay(ctx context.Context, c *Conn, stdin io.Reader, stdout io.Writer, maxMessage int, reconnect func(ctx context.Context, start bool) (*Conn, error), log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if maxMessage <= 0 {
		maxMessage = framing.DefaultMaxMessage
	}
	r := &relay{conn: c, out: stdout, inflight: map[string]*pending{}, maxMessage: maxMessage, log: log}
	r.cond = sync.NewCond(&r.mu)
	stdinDone := make(chan struct{})
	go r.upstream(stdin, stdinDone)
	// A read of the daemon's connection does not see ctx: closing the
	// connection ends it, so a signal ends the relay at once.
	stopOnCancel := context.AfterFunc(ctx, func() { _ = r.current().Close() })
	defer stopOnCancel()
	for {
		err := r.downstream(r.current())
		select {
		case <-stdinDone:
			return nil // the client ended the session
		case <-ctx.Done():
			r.current().Close()
			return nil
		default:
		}
		if reconnect == nil {
			r.failInflight("the mcp-subagent daemon went away during this call; children are kept in the store (a new session's list_agents shows them)")
			return err
		}
		handover := r.takeHandover()
		log.Warn("the daemon went away; reconnecting", "err", err, "handed_over", handover)
		nc, rerr := reconnect(ctx, !handover)
		if ctx.Err() != nil {
			if nc != nil {
				nc.Close()
			}
			return nil
		}
		if rerr != nil {
			r.failInflight(fmt.Sprintf("the mcp-subagent daemon went away during this call and no new daemon answered (%v); children are kept in the store (a new session's list_agents shows them)", rerr))
			return fmt.Errorf("the daemon went away (%v) and no new one answered: %w", err, rerr)
		}
		r.switchTo(nc)
	}
}

type relay struct {
	mu       sync.Mutex
	cond     *sync.Cond // broadcast when conn changes
	conn     *Conn
	init     []byte // the client's initialize request
	inited   []byte // its notifications/initialized
	replays  int
	inflight map[string]*pending // client requests awaiting an answer, by raw id
	omu      sync.Mutex          // serialises writes to out
	out      io.Writer
	handover bool  // the daemon said it hands over
	dead     *Conn // the connection downstream saw end, until switchTo
	// replaying: the replayed initialize is not answered yet. The
	// client's messages wait, so the first answer on the connection is
	// its answer.
	replaying bool

	maxMessage int
	log        *slog.Logger
}

// Handover is the line a daemon sends its sessions as it hands the data
// directory over to a newer binary; the relay does not pass it on.
var Handover = []byte(`{"mcp_subagent":"handover"}` + "\n")

func (r *relay) takeHandover() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.handover
	r.handover = false
	return h
}

// pending is a client request: which connection took it.
type pending struct {
	id   json.RawMessage
	conn *Conn
	sent bool // written to conn
}

// rpcEnvelope is what the relay reads of a message to track it.
type rpcEnvelope struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
}

func (r *relay) current() *Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conn
}

// upstream copies client lines to the daemon, noting what a reconnect
// replays and which requests are in flight. A line that cannot be written
// (the daemon is gone) waits for the next connection: it never reached a
// daemon, so it is sent again, not failed. At stdin's EOF it closes done,
// then half-closes the connection.
func (r *relay) upstream(stdin io.Reader, done chan<- struct{}) {
	br := bufio.NewReaderSize(stdin, 64<<10)
	for {
		line, size, tooLong, err := framing.ReadMessage(br, r.maxMessage)
		if tooLong {
			if reply := framing.TooLongReply(line, size, r.maxMessage); reply != nil {
				r.write(reply)
			}
			r.log.Warn("refused a message over the size limit", "bytes", size, "max_message_bytes", r.maxMessage)
		} else if len(line) > 0 {
			r.forward(line)
		}
		if err != nil {
			close(done)
			r.mu.Lock()
			_ = r.conn.CloseWrite()
			r.mu.Unlock()
			return
		}
	}
}

func (r *relay) forward(line []byte) {
	var env rpcEnvelope
	_ = json.Unmarshal(line, &env)
	r.mu.Lock()
	switch env.Method {
	case "initialize":
		r.init = append([]byte(nil), line...)
	case "notifications/initialized":
		r.inited = append([]byte(nil), line...)
	}
	var p *pending
	if env.Method != "" && len(env.ID) > 0 && !bytes.Equal(env.ID, []byte("null")) {
		p = &pending{id: env.ID}
		r.inflight[string(env.ID)] = p
	}
	for {
		for r.conn == r.dead || r.replaying {
			r.cond.Wait() // the daemon is gone, or the new one not initialized: wait
		}
		c := r.conn
		if p != nil {
			p.conn = c
		}
		r.mu.Unlock()
		_, err := c.Write(line)
		r.mu.Lock()
		if err == nil {
			if p != nil {
				p.sent = true
			}
			break
		}
		for r.conn == c {
			r.cond.Wait()
		}
	}
	r.mu.Unlock()
}

// downstream copies daemon lines to the client until the connection ends.
func (r *relay) downstream(c *Conn) error {
	for {
		line, err := c.R.ReadBytes('\n')
		if bytes.Equal(line, Handover) {
			r.mu.Lock()
			r.handover = true
			r.mu.Unlock()
			continue
		}
		if len(line) > 0 {
			var env rpcEnvelope
			_ = json.Unmarshal(line, &env)
			if env.Method == "" && len(env.ID) > 0 {
				r.mu.Lock()
				if r.replaying && r.conn == c {
					r.replaying = false // the answer to the replayed initialize
					r.cond.Broadcast()
					r.mu.Unlock()
					continue
				}
				delete(r.inflight, string(env.ID))
				r.mu.Unlock()
			}
			r.write(line)
		}
		if err != nil {
			r.mu.Lock()
			r.dead = c
			r.mu.Unlock()
			if errors.Is(err, io.EOF) {
				return errors.New("the daemon closed the connection")
			}
			return err
		}
	}
}

func (r *relay) write(line []byte) {
	r.omu.Lock()
	defer r.omu.Unlock()
	_, _ = r.out.Write(line)
}

// switchTo makes nc the connection: it replays the session's handshake and
// fails the requests the old daemon took with it.
func (r *relay) switchTo(nc *Conn) {
	r.mu.Lock()
	old := r.conn
	r.conn = nc
	r.replays++
	r.replaying = false
	if r.init != nil {
		var req map[string]json.RawMessage
		if json.Unmarshal(r.init, &req) == nil {
			req["id"] = json.RawMessage(fmt.Sprintf(`"mcp-subagent-relay-%d"`, r.replays))
			if b, err := json.Marshal(req); err == nil {
				if _, err := nc.Write(append(b, '\n')); err == nil {
					r.replaying = true
				}
			}
		}
		if r.inited != nil {
			_, _ = nc.Write(r.inited)
		}
	}
	_ = old.Close()
	var lost []json.RawMessage
	for k, p := range r.inflight {
		if p.sent && p.conn == old {
			lost = append(lost, p.id)
			delete(r.inflight, k)
		}
	}
	r.cond.Broadcast()
	r.mu.Unlock()
	for _, id := range lost {
		r.write(errorLine(id, "the mcp-subagent daemon restarted during this call; children are kept in the store (list_agents shows them; send_message resumes one)"))
	}
}

// failInflight answers every request still in flight with msg: the relay
// is ending and no daemon will answer them.
func (r *relay) failInflight(msg string) {
	r.mu.Lock()
	var ids []json.RawMessage
	for k, p := range r.inflight {
		ids = append(ids, p.id)
		delete(r.inflight, k)
	}
	r.mu.Unlock()
	for _, id := range ids {
		r.write(errorLine(id, msg))
	}
}

// errorLine is a JSON-RPC error answer to id, which goes out byte-exact.
func errorLine(id json.RawMessage, msg string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // the id as the client wrote it
	_ = enc.Encode(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": -32603, "message": msg}})
	return b.Bytes()
}
