package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/framing"
)

// Admin operations: requests that are not MCP sessions and not model
// tools (no tool may delete), asked by the human CLI over the same socket
// with the same authority (the socket's 0700 directory and peer uid check)
// as a session. The daemon answers the hello with a Welcome, runs the
// operation and writes one AdminReply line, then closes.
const (
	OpPrune   = "prune"   // Args: the caller's prune request; the principal is the hello's
	OpCompact = "compact" // whole store; no Args
	OpUI      = "ui"      // the web view's URL for the hello's principal; no Args
	// OpWorktreeRm removes a stopped child's worktree and branch. Args:
	// {"id": child id}; the child must be the hello's principal's.
	OpWorktreeRm = "worktree-rm"
)

// AdminRequest is an admin operation as Options.Admin receives it.
type AdminRequest struct {
	Op        string
	Principal string // the hello's; "local" when it named none
	Cwd       string
	Args      json.RawMessage
}

// AdminReply is the daemon's answer to an admin operation, the line after
// its Welcome: Result on success, Error otherwise.
type AdminReply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// isAdmin reports whether op is an admin operation.
func isAdmin(op string) bool {
	return op == OpPrune || op == OpCompact || op == OpUI || op == OpWorktreeRm
}

// serveAdmin runs one admin operation on c, after its Welcome.
func serveAdmin(ctx context.Context, o Options, log *slog.Logger, c *net.UnixConn, hello Hello) {
	defer c.Close()
	req := AdminRequest{Op: hello.Op, Principal: hello.Principal, Cwd: hello.Cwd, Args: hello.Args}
	if req.Principal == "" {
		req.Principal = "local"
	}
	log.Info("admin operation", "op", req.Op, "principal", req.Principal, "client_pid", hello.PID)
	var reply AdminReply
	v, err := o.Admin(ctx, req)
	if err == nil {
		reply.Result, err = json.Marshal(v)
	}
	if err != nil {
		reply.Error = err.Error()
		log.Warn("admin operation failed", "op", req.Op, "err", err)
	}
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if err := writeLine(c, reply); err != nil {
		log.Warn("answering an admin operation failed", "op", req.Op, "err", err)
	}
}

// AdminError is an admin operation's failure as the daemon reported it.
type AdminError struct {
	Op      string
	Message string
}

func (e *AdminError) Error() string { return e.Op + ": " + e.Message }

// Admin asks dataDir's daemon to run an admin operation (h.Op, h.Args,
// h.Principal) and returns its result. co starts a daemon when none runs
// (co.Start), as for a session; co.Hello is replaced by h. Its ctx bounds
// the whole operation, which can take a while (a compaction of a large
// store): the daemon keeps going if the caller leaves.
func Admin(ctx context.Context, co ConnectOptions, h Hello) (json.RawMessage, error) {
	if !isAdmin(h.Op) {
		return nil, fmt.Errorf("%q is not an admin operation", h.Op)
	}
	co.Hello = h
	c, err := Connect(ctx, co)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetReadDeadline(time.Now()) })
	defer stop()
	line, err := readReply(c.R)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %w", h.Op, ctx.Err())
		}
		return nil, fmt.Errorf("%s: the daemon closed the connection without an answer (its log: %s): %w", h.Op, LogPath(co.DataDir), err)
	}
	var r AdminReply
	if err := json.Unmarshal(line, &r); err != nil {
		return nil, fmt.Errorf("%s: the daemon's answer %.200q: %w", h.Op, line, err)
	}
	if r.Error != "" {
		return nil, &AdminError{Op: h.Op, Message: r.Error}
	}
	return r.Result, nil
}

// readReply reads the one line of an admin reply; results are small (a
// prune names at most every child), so the line is bounded generously.
func readReply(r *bufio.Reader) ([]byte, error) {
	line, _, tooLong, err := framing.ReadMessage(r, 64<<20)
	if tooLong {
		return nil, errors.New("the answer is over 64 MiB")
	}
	if len(line) > 0 && err != nil {
		err = nil // a last line without its newline is whole
	}
	return line, err
}
