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
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ReadyFDEnv names the inherited descriptor on which a daemon started by
// Connect reports "ready", "busy" or "error: …".
const ReadyFDEnv = "MCP_SUBAGENT_READY_FD"

// Conn is a session connection to a daemon, past the handshake.
type Conn struct {
	*net.UnixConn
	R       *bufio.Reader // holds what the daemon sent after its welcome
	Welcome Welcome
}

// ConnectOptions configures Connect.
type ConnectOptions struct {
	DataDir string
	Hello   Hello
	// Start builds the command that runs a daemon for DataDir, for when
	// none answers; nil: do not start one.
	Start func() *exec.Cmd
	// Takeover reports whether to take over from a running daemon of the
	// given version (this binary is newer).
	Takeover func(daemonVersion string) bool
	// Timeout bounds the whole connect, a daemon's start included; zero:
	// 30 s.
	Timeout time.Duration
	// Await, with Start nil, dials until a daemon answers (one that is
	// taking over is starting) instead of failing at once.
	Await bool
}

// Connect returns a session connection to DataDir's daemon, starting one
// when none answers and taking over from an older one.
func Connect(ctx context.Context, o ConnectOptions) (*Conn, error) {
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	backoff := 2 * time.Millisecond
	var last error
	for {
		c, err := dial(ctx, o.DataDir, o.Hello)
		if err == nil {
			if o.Hello.Op == "" && o.Takeover != nil && o.Takeover(c.Welcome.Version) {
				_ = c.Close()
				if err := Stop(ctx, o.DataDir, Hello{Protocol: ProtocolVersion, Version: o.Hello.Version, Op: "takeover", PID: os.Getpid()}); err != nil {
					return nil, fmt.Errorf("taking over from the daemon of version %s: %w", c.Welcome.Version, err)
				}
				continue
			}
			return c, nil
		}
		var refused *RefusedError
		var foreign *ForeignSocketError
		if errors.As(err, &refused) || errors.As(err, &foreign) || (o.Start == nil && !o.Await) {
			return nil, err
		}
		last = err
		// Awaiting (no Start), the dial's error is no start's failure: dial
		// again after the backoff.
		state, serr := "busy", error(nil)
		if o.Start != nil {
			state, serr = start(ctx, o.Start())
		}
		switch {
		case serr != nil:
			return nil, fmt.Errorf("starting the daemon for %s: %w (its log: %s)", o.DataDir, serr, LogPath(o.DataDir))
		case state == "busy":
			// Another daemon holds the lock: starting, or stopping. Dial
			// again shortly; if it was stopping, the next round starts ours.
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("no daemon answered on %s: %w (last: %v)", SocketPath(o.DataDir), ctx.Err(), last)
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 100*time.Millisecond)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("no daemon answered on %s: %w (last: %v)", SocketPath(o.DataDir), ctx.Err(), last)
		}
	}
}

// RefusedError is a daemon's refusal in its welcome.
type RefusedError struct{ Message string }

func (e *RefusedError) Error() string { return "the daemon refused the connection: " + e.Message }

// ForeignSocketError is a socket served by another uid than ours: another
// user's process listens where our daemon should, and would read
// everything a session sends.
type ForeignSocketError struct {
	Path string
	UID  int // the listening process's uid
}

func (e *ForeignSocketError) Error() string {
	return fmt.Sprintf("refusing the daemon socket %s: it is served by uid %d, not by you (uid %d), so another user would read your sessions; stop that process or remove the socket, or give the data directory a shorter path (its socket then lives inside it)", e.Path, e.UID, os.Getuid())
}

// dial connects, checks that the daemon runs as our uid, and shakes hands.
func dial(ctx context.Context, dataDir string, h Hello) (*Conn, error) {
	h.Protocol = ProtocolVersion
	var d net.Dialer
	path := SocketPath(dataDir)
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	c := nc.(*net.UnixConn)
	// Before a byte of ours goes out: only a daemon of our own uid hears it.
	if checkOwners {
		uid, err := peerUID(c)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("reading the credentials of the daemon on %s: %w", path, err)
		}
		if uid != os.Getuid() {
			c.Close()
			return nil, &ForeignSocketError{Path: path, UID: uid}
		}
	}
	// A daemon that refuses the peer writes its refusal and closes without
	// reading: the hello may fail to send, and the refusal is still there
	// to read.
	werr := writeLine(c, h)
	stop := context.AfterFunc(ctx, func() { _ = c.SetReadDeadline(time.Now()) })
	r := bufio.NewReaderSize(c, 64<<10)
	line, err := r.ReadBytes('\n')
	stop()
	if err != nil && len(line) == 0 {
		c.Close()
		if werr != nil {
			return nil, werr
		}
		return nil, fmt.Errorf("the daemon closed the connection before its welcome: %w", err)
	}
	var w Welcome
	if err := json.Unmarshal(line, &w); err != nil {
		c.Close()
		return nil, fmt.Errorf("the daemon's welcome %.200q: %w", line, err)
	}
	if w.Error != "" {
		c.Close()
		return nil, &RefusedError{Message: w.Error}
	}
	return &Conn{UnixConn: c, R: r, Welcome: w}, nil
}

// start runs cmd detached and waits for its report on the ready pipe.
func start(ctx context.Context, cmd *exec.Cmd) (string, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return "", err
	}
	defer pr.Close()
	cmd.ExtraFiles = append(cmd.ExtraFiles, pw)
	cmd.Env = append(cmd.Env, ReadyFDEnv+"="+strconv.Itoa(2+len(cmd.ExtraFiles)))
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true // outlives this session and its terminal
	err = cmd.Start()
	pw.Close()
	if err != nil {
		return "", err
	}
	go func() { _ = cmd.Wait() }() // reap it if it exits while we live
	stop := context.AfterFunc(ctx, func() { _ = pr.SetReadDeadline(time.Now()) })
	defer stop()
	line, err := bufio.NewReader(pr).ReadString('\n')
	line = strings.TrimSpace(line)
	switch {
	case line == "ready" || line == "busy":
		return line, nil
	case strings.HasPrefix(line, "error: "):
		return "", errors.New(strings.TrimPrefix(line, "error: "))
	case err != nil && !errors.Is(err, io.EOF):
		return "", fmt.Errorf("waiting for it to start: %w", err)
	default:
		return "", errors.New("it exited before it was ready")
	}
}

// ReportReady tells the session that started this daemon how the start
// went: "ready", "busy", or an error. A daemon started otherwise has no
// such descriptor and reports nothing.
func ReportReady(state string, err error) {
	fd, convErr := strconv.Atoi(os.Getenv(ReadyFDEnv))
	if convErr != nil || fd < 3 {
		return
	}
	os.Unsetenv(ReadyFDEnv) // children must not inherit it
	f := os.NewFile(uintptr(fd), "ready")
	if f == nil {
		return
	}
	defer f.Close()
	if err != nil {
		state = "error: " + strings.ReplaceAll(err.Error(), "\n", " ")
	}
	_, _ = f.WriteString(state + "\n")
}

// Stop asks dataDir's daemon to stop (Op "stop") or hand over (Op
// "takeover") and waits until it has released the directory. No daemon
// running is not an error.
func Stop(ctx context.Context, dataDir string, h Hello) error {
	c, err := dial(ctx, dataDir, h)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil
		}
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetReadDeadline(time.Now()) })
	defer stop()
	_, err = io.Copy(io.Discard, c.R) // EOF: the daemon has let go
	if ctx.Err() != nil {
		return fmt.Errorf("the daemon did not stop in time: %w", ctx.Err())
	}
	return err
}

// Status reads the running daemon's welcome; an error when none runs.
func Status(ctx context.Context, dataDir string) (Welcome, error) {
	c, err := dial(ctx, dataDir, Hello{Op: "status", PID: os.Getpid()})
	if err != nil {
		return Welcome{}, err
	}
	c.Close()
	return c.Welcome, nil
}

// Newer reports whether version a is a later release than b (both
// "vX.Y.Z" or "X.Y.Z"); anything that does not parse is not newer, so
// development builds never take over from each other.
func Newer(a, b string) bool {
	pa, oka := parseVersion(a)
	pb, okb := parseVersion(b)
	if !oka || !okb {
		return false
	}
	for i := range pa {
		if pa[i] != pb[i] {
			return pa[i] > pb[i]
		}
	}
	return false
}

func parseVersion(v string) ([3]int, bool) {
	var out [3]int
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	return out, true
}
