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
)

// Relay copies a session's stdio to and from the daemon until the client
// ends it (stdin's EOF half-closes the connection; the daemon ends the
// session and closes) or ctx ends.
//
// When the daemon goes away under a live session (killed, or replaced by
// a newer binary), reconnect is called for a new connection — which
// starts a new daemon — and the session goes on: the relay replays the
// client's initialize and initialized to it (swallowing the answer) and
// answers each request that was in flight with an error saying so, since
// its daemon is gone. Children are the store's, so none is lost. With
// reconnect nil, the relay ends when the daemon does.
//
// A daemon handing over to a newer binary says so before it closes
// (Handover); reconnect is then told not to start a daemon of its own, but
// to wait for the one taking over.
//
// A client message longer than maxMessage bytes (zero: DefaultMaxMessage)
// is answered with an error here and not held or forwarded.
func Relay(ctx context.Context, c *Conn, stdin io.Reader, stdout io.Writer, maxMessage int, reconnect func(ctx context.Context, start bool) (*Conn, error), log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if maxMessage <= 0 {
		maxMessage = DefaultMaxMessage
	}
	r := &relay{conn: c, out: stdout, inflight: map[string]*pending{}, maxMessage: maxMessage, log: log}
	r.cond = sync.NewCond(&r.mu)
	stdinDone := make(chan struct{})
	go r.upstream(stdin, stdinDone)
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
			return err
		}
		handover := r.takeHandover()
		log.Warn("the daemon went away; reconnecting", "err", err, "handed_over", handover)
		nc, rerr := reconnect(ctx, !handover)
		if rerr != nil {
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

const replayPrefix = `"mcp-subagent-relay-`

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
		line, size, tooLong, err := readMessage(br, r.maxMessage)
		if tooLong {
			if reply := tooLongReply(line, size, r.maxMessage); reply != nil {
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
		for r.conn == r.dead {
			r.cond.Wait() // the daemon is gone: wait for the next one
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
				if bytes.HasPrefix(env.ID, []byte(replayPrefix)) {
					continue // the answer to a replayed initialize
				}
				r.mu.Lock()
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
	if r.init != nil {
		var req map[string]json.RawMessage
		if json.Unmarshal(r.init, &req) == nil {
			req["id"] = json.RawMessage(fmt.Sprintf(`%s%d"`, replayPrefix, r.replays))
			if b, err := json.Marshal(req); err == nil {
				_, _ = nc.Write(append(b, '\n'))
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
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{
			"code":    -32603,
			"message": "the mcp-subagent daemon restarted during this call; children are kept in the store (list_agents shows them; send_message resumes one)",
		}})
		r.write(append(b, '\n'))
	}
}
