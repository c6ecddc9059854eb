package daemon

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ProtocolVersion is the handshake's version; a daemon refuses others.
const ProtocolVersion = 1

// Hello is a client's first line.
type Hello struct {
	Protocol  int    `json:"mcp_subagent"`
	Version   string `json:"version"`             // the client binary's version
	Op        string `json:"op,omitempty"`        // "" (a session), "stop", "takeover", "status", or an admin op (admin.go)
	Cwd       string `json:"cwd,omitempty"`       // the session's working directory
	Principal string `json:"principal,omitempty"` // empty: "local"
	PID       int    `json:"pid,omitempty"`
	// Args are an admin operation's arguments.
	Args json.RawMessage `json:"args,omitempty"`
	// Settings are a session's settings (settings.go); nil: a client from
	// before they were sent, whose children run on the daemon's own.
	Settings *Settings `json:"settings,omitempty"`
}

// Welcome is the daemon's answer.
type Welcome struct {
	Protocol int    `json:"mcp_subagent"`
	Version  string `json:"version"` // the daemon binary's version
	PID      int    `json:"pid"`
	Sessions int    `json:"sessions"`
	// Shell is the daemon's run_shell mode and why (Options.Shell).
	Shell string `json:"shell,omitempty"`
	// Differing are the connected sessions whose settings differ from the
	// daemon's own (names only); sent to a "status" hello.
	Differing []SettingsDiff `json:"differing,omitempty"`
	// Store is where the daemon's session store lives (Options.Store).
	Store string `json:"store,omitempty"`
	Error string `json:"error,omitempty"`
}

// ErrBusy means another daemon holds the data directory's lock.
var ErrBusy = errors.New("another mcp-subagent daemon owns this data directory")

// Listener is a daemon's claim on a data directory: the lock and the socket.
type Listener struct {
	dataDir string
	lock    *os.File
	ln      *net.UnixListener
	path    string

	mu       sync.Mutex
	closers  []net.Conn // stop/takeover requesters, closed last
	handover bool       // a takeover: sessions are told before they close

	// closing, a test hook, runs as Serve stops, before it closes the
	// listener: a test stalls it there, as a loaded scheduler may.
	closing func()
}

// Listen takes dataDir's daemon lock (ErrBusy when another daemon has it),
// removes a stale socket and listens on a fresh one.
func Listen(dataDir string) (*Listener, error) {
	if err := privateDir(dataDir); err != nil {
		return nil, fmt.Errorf("data directory %s: %w", dataDir, err)
	}
	lock, err := os.OpenFile(LockPath(dataDir), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("daemon lock: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrBusy
		}
		return nil, fmt.Errorf("daemon lock %s: %w", LockPath(dataDir), err)
	}
	path := SocketPath(dataDir)
	if err := socketDir(dataDir, path); err != nil {
		lock.Close()
		return nil, err
	}
	// Holding the lock, any socket left is a dead daemon's.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		lock.Close()
		return nil, fmt.Errorf("removing a stale socket %s: %w", path, err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false) // Close removes it while still holding the lock
	_ = os.Chmod(path, 0o600)
	_ = lock.Truncate(0)
	_, _ = fmt.Fprintf(lock, "%d\n", os.Getpid())
	return &Listener{dataDir: dataDir, lock: lock, ln: ln, path: path}, nil
}

// Path is the socket's path.
func (l *Listener) Path() string { return l.path }

// Options configures Serve.
type Options struct {
	Version string
	// Shell says children's run_shell mode in a line for `daemon status`
	// (e.g. why it is off); zero: not said.
	Shell string
	// Store says where the session store lives, for `daemon status` (a
	// URL's password redacted); zero: not said.
	Store  string
	Logger *slog.Logger
	// IdleTimeout: exit after this long with no session and nothing Busy;
	// zero: never.
	IdleTimeout time.Duration
	// Busy reports live work that keeps the daemon up without sessions
	// (live children).
	Busy func() bool
	// Serve serves a session's connection past its handshake (the MCP
	// edge does): it returns when the connection ends, or when ctx ends
	// (the daemon stopping; then it sends c.Bye and closes c), once every
	// request it started has answered. Required for sessions.
	Serve func(ctx context.Context, c *SessionConn) error
	// Admin runs an admin operation (see AdminRequest); nil: they are
	// refused as unknown ops.
	Admin func(ctx context.Context, req AdminRequest) (any, error)
	// Peer vets each connecting process of the daemon's uid by its pid
	// (SO_PEERCRED) before the hello is read; an error refuses it, is
	// logged and is told to the peer. nil: every process of the uid is
	// served. The server refuses processes of its confined commands' trees
	// with it (subreaper.InConfinedTree): below Landlock ABI 9 they can
	// connect to this socket.
	Peer func(pid int) error
	// Config is the daemon's own config file, which a session's
	// (Settings.Config) is compared with; empty: none.
	Config string
	// LookupEnv reads the daemon's own environment, which a session's
	// settings are compared with; nil: os.LookupEnv.
	LookupEnv func(string) (string, bool)
}

// SessionInfo is what a session tells of itself.
type SessionInfo struct {
	ID        string
	Cwd       string
	Principal string
	// Settings are the session's settings (Hello.Settings); nil: the
	// daemon's own.
	Settings *Settings
}

// SessionConn is a session's connection past its handshake, handed to
// Options.Serve: the daemon knows the connection, not the protocol on it.
type SessionConn struct {
	SessionInfo
	// Reader is what the client sends after its hello (the hello's reader,
	// which may hold bytes read past it).
	Reader *bufio.Reader
	// Conn is the connection: writes, their deadline, and Close, which
	// ends a blocked read.
	Conn *net.UnixConn
	// Bye is the last line to send as the daemon ends the session
	// (Handover during a takeover), or nil.
	Bye func() []byte
}

// Reason says why Serve returned.
type Reason string

const (
	ReasonCancelled Reason = "cancelled" // ctx ended (a signal)
	ReasonIdle      Reason = "idle"
	ReasonStop      Reason = "stop"     // a client asked it to stop
	ReasonTakeover  Reason = "takeover" // a newer binary takes over
)

// Serve accepts sessions until ctx ends, the daemon has been idle for
// IdleTimeout, or a client asks it to stop or take over. It stops taking
// connections, ends every session and waits for their requests, then
// returns; the caller shuts the manager and the store down, then calls
// Close.
func (l *Listener) Serve(ctx context.Context, o Options) Reason {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		sessions int
		idleFrom = time.Now() // last time a session or a live child kept it up
		noneFrom = time.Now() // last time a session was connected
		held     bool         // said that live children keep it up, this idle stretch
		reason   Reason
		wg       sync.WaitGroup
		differ   = map[string]SettingsDiff{} // connected sessions whose settings differ, by id
	)
	finish := func(r Reason) {
		mu.Lock()
		if reason == "" {
			reason = r
		}
		mu.Unlock()
		if r == ReasonTakeover {
			l.mu.Lock()
			l.handover = true
			l.mu.Unlock()
		}
		cancel()
	}
	// Sessions end only once the listener is closed: a relay whose session
	// ends reconnects at once, and a listener still open would welcome it
	// to this stopping daemon, which it would take for the next one. The
	// values of ctx are kept; its end reaches the sessions through sctx.
	sessCtx, endSessions := context.WithCancel(context.WithoutCancel(ctx))
	defer endSessions()
	// Closing the listener ends Accept.
	stopAccept := context.AfterFunc(sctx, func() {
		if l.closing != nil {
			l.closing()
		}
		_ = l.ln.Close()
		endSessions()
	})
	defer stopAccept()
	if o.IdleTimeout > 0 {
		tick := max(o.IdleTimeout/10, 10*time.Millisecond)
		wg.Go(func() {
			t := time.NewTicker(tick)
			defer t.Stop()
			for {
				select {
				case <-sctx.Done():
					return
				case now := <-t.C:
					mu.Lock()
					children := o.Busy != nil && o.Busy()
					busy := sessions > 0 || children
					if busy {
						idleFrom = now
					}
					idle := !busy && now.Sub(idleFrom) >= o.IdleTimeout
					hold := sessions == 0 && children && !held && now.Sub(noneFrom) >= o.IdleTimeout
					held = held || hold
					mu.Unlock()
					if hold {
						log.Info("no session for the idle period; live children keep the daemon up", "idle", o.IdleTimeout)
					}
					if idle {
						log.Info("no session and no live child: exiting", "idle", o.IdleTimeout)
						finish(ReasonIdle)
						return
					}
				}
			}
		})
	}
	for {
		c, err := l.ln.AcceptUnix()
		if err != nil {
			if sctx.Err() == nil {
				log.Error("accepting a connection failed", "err", err)
				finish(ReasonCancelled)
			}
			break
		}
		wg.Go(func() {
			hello, r, err := l.handshake(c, o.Peer)
			if err != nil {
				log.Warn("refused a connection", "err", err)
				_ = c.Close()
				return
			}
			mu.Lock()
			n := sessions
			mu.Unlock()
			welcome := Welcome{Protocol: ProtocolVersion, Version: o.Version, PID: os.Getpid(), Sessions: n, Shell: o.Shell, Store: o.Store}
			switch hello.Op {
			case "stop", "takeover":
				_ = writeLine(c, welcome)
				log.Info("asked to hand over the data directory", "op", hello.Op, "by_version", hello.Version, "by_pid", hello.PID)
				l.mu.Lock()
				l.closers = append(l.closers, c)
				l.mu.Unlock()
				finish(map[string]Reason{"stop": ReasonStop, "takeover": ReasonTakeover}[hello.Op])
				return
			case "status":
				mu.Lock()
				for _, d := range differ {
					welcome.Differing = append(welcome.Differing, d)
				}
				mu.Unlock()
				slices.SortFunc(welcome.Differing, func(a, b SettingsDiff) int { return strings.Compare(a.Session, b.Session) })
				_ = writeLine(c, welcome)
				_ = c.Close()
				return
			case OpPrune, OpCompact, OpUI, OpWorktreeRm:
				if o.Admin == nil {
					welcome.Error = fmt.Sprintf("this daemon does not serve %q", hello.Op)
					_ = writeLine(c, welcome)
					_ = c.Close()
					return
				}
			case "":
			default:
				welcome.Error = fmt.Sprintf("unknown op %q", hello.Op)
				_ = writeLine(c, welcome)
				_ = c.Close()
				return
			}
			// A connection accepted just before the listener closed is not
			// welcomed by a daemon that is stopping: its client dials again
			// and finds the next daemon (or none), never this one, which
			// would end its session at once.
			if sctx.Err() != nil {
				log.Debug("closed a connection that came as the daemon stops, without a welcome", "op", hello.Op, "client_pid", hello.PID)
				_ = c.Close()
				return
			}
			if err := writeLine(c, welcome); err != nil {
				_ = c.Close()
				return
			}
			mu.Lock()
			sessions++
			mu.Unlock()
			defer func() {
				mu.Lock()
				sessions--
				idleFrom, noneFrom, held = time.Now(), time.Now(), false
				mu.Unlock()
			}()
			if isAdmin(hello.Op) { // counted as a session: the daemon does not go idle under it
				serveAdmin(sessCtx, o, log, c, hello)
				return
			}
			id := newSessionID()
			if vars, cfg := hello.Settings.Differs(o.LookupEnv, o.Config); len(vars) > 0 || cfg {
				// Names only: a value may be a key.
				log.Info("this session's settings differ from the daemon's own; its children run with the session's",
					"session", id, "client_pid", hello.PID, "vars", vars, "config_differs", cfg, "config", hello.Settings.Config)
				mu.Lock()
				differ[id] = SettingsDiff{Session: id, Principal: hello.Principal, ClientPID: hello.PID, Vars: vars, Config: cfg}
				mu.Unlock()
				defer func() {
					mu.Lock()
					delete(differ, id)
					mu.Unlock()
				}()
			}
			l.serveSession(sessCtx, o, log, c, r, hello, id)
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if reason == "" {
		reason = ReasonCancelled
	}
	return reason
}

// maxHello bounds a hello line, newline included: a hello is a few
// hundred bytes (an admin op's arguments are small), and a peer that sends
// more is not an mcp-subagent client.
const maxHello = 64 << 10

// helloTimeout bounds how long a peer may take to send its hello.
const helloTimeout = 10 * time.Second

// handshake checks the peer's uid, then vets it with peer (nil: none),
// and reads its Hello.
func (l *Listener) handshake(c *net.UnixConn, peer func(pid int) error) (Hello, *bufio.Reader, error) {
	var h Hello
	uid, err := peerUID(c)
	if err != nil {
		return h, nil, fmt.Errorf("reading the peer's credentials: %w", err)
	}
	if uid != os.Getuid() {
		_ = writeLine(c, Welcome{Protocol: ProtocolVersion, Error: fmt.Sprintf("refused: this daemon serves uid %d only (you are uid %d)", os.Getuid(), uid)})
		return h, nil, fmt.Errorf("peer uid %d is not the daemon's uid %d", uid, os.Getuid())
	}
	if peer != nil {
		if err := checkPeer(c, peer); err != nil {
			_ = writeLine(c, Welcome{Protocol: ProtocolVersion, Error: "refused: " + err.Error()})
			return h, nil, fmt.Errorf("refused the peer: %w", err)
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(helloTimeout))
	// The reader's buffer is the bound: a hello that does not fit is
	// refused as soon as the buffer is full, never accumulated.
	r := bufio.NewReaderSize(c, maxHello)
	line, err := r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		_ = writeLine(c, Welcome{Protocol: ProtocolVersion, Error: fmt.Sprintf("refused: the hello is over %d bytes; an mcp-subagent hello is one short JSON line", maxHello)})
		return h, nil, fmt.Errorf("the hello is over %d bytes", maxHello)
	}
	if err != nil {
		return h, nil, fmt.Errorf("reading the hello: %w", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	if err := json.Unmarshal(line, &h); err != nil || h.Protocol != ProtocolVersion {
		_ = writeLine(c, Welcome{Protocol: ProtocolVersion, Error: fmt.Sprintf("refused: not an mcp-subagent hello of protocol %d", ProtocolVersion)})
		return h, nil, fmt.Errorf("bad hello %.200q", line)
	}
	return h, r, nil
}

func newSessionID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "sock-" + hex.EncodeToString(b[:])
}

func (l *Listener) serveSession(ctx context.Context, o Options, log *slog.Logger, c *net.UnixConn, r *bufio.Reader, hello Hello, id string) {
	defer c.Close()
	if o.Serve == nil {
		log.Error("this daemon serves no sessions (no Options.Serve)", "session", id)
		return
	}
	sc := &SessionConn{SessionInfo: SessionInfo{ID: id, Cwd: hello.Cwd, Principal: hello.Principal, Settings: hello.Settings},
		Reader: r, Conn: c, Bye: func() []byte {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.handover {
				return Handover
			}
			return nil
		}}
	log.Info("session started", "session", id, "cwd", hello.Cwd, "client_pid", hello.PID, "client_version", hello.Version)
	if err := o.Serve(ctx, sc); err != nil {
		log.Debug("session read failed", "session", id, "err", err)
	}
	log.Info("session ended", "session", id)
}

// Close releases the data directory: it removes the socket, drops the lock,
// then closes the connections that asked for a stop or a takeover, so that
// their EOF means the directory is free.
func (l *Listener) Close() error {
	_ = l.ln.Close()
	_ = os.Remove(l.path)
	_ = syscall.Flock(int(l.lock.Fd()), syscall.LOCK_UN)
	err := l.lock.Close()
	l.mu.Lock()
	for _, c := range l.closers {
		_ = c.Close()
	}
	l.closers = nil
	l.mu.Unlock()
	return err
}

func writeLine(c net.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = c.Write(append(b, '\n'))
	return err
}

// peerUID is the uid of the process at the other end of c (SO_PEERCRED).
func peerUID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return int(cred.Uid), nil
}
