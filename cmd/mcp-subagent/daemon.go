package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/mcp-subagent/mcp-subagent/daemon"
	"github.com/mcp-subagent/mcp-subagent/edge"
	"github.com/mcp-subagent/mcp-subagent/internal/subreaper"
)

// defaultIdle is how long a daemon stays up with no session and no live
// child.
const defaultIdle = 10 * time.Minute

func idleTimeout(o serveOptions, cfg Config, foreground bool) time.Duration {
	switch {
	case o.idle != 0:
		return max(o.idle, 0)
	case foreground:
		return 0 // serve --http runs until stopped
	case cfg.Daemon.IdleSeconds < 0:
		return 0
	case cfg.Daemon.IdleSeconds > 0:
		return time.Duration(cfg.Daemon.IdleSeconds * float64(time.Second))
	}
	return defaultIdle
}

// runDaemon runs the data directory's daemon in this process: the store,
// the manager, every child, the socket sessions relay to, and with
// foreground (serve --http) the HTTP transport too. A foreground daemon
// takes over from one already running; a daemon started by a session
// that finds another holding the lock reports "busy" and exits.
func runDaemon(ctx context.Context, o serveOptions, cfg Config, foreground bool, log *slog.Logger) (err error) {
	dataDir, err := resolveDataDir(o, cfg)
	if err != nil {
		daemon.ReportReady("", err)
		return err
	}
	l, err := daemon.Listen(dataDir)
	if errors.Is(err, daemon.ErrBusy) && foreground {
		log.Info("another daemon owns the data directory: taking over", "data_dir", dataDir)
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = daemon.Stop(sctx, dataDir, daemon.Hello{Version: version, Op: "takeover", PID: os.Getpid()})
		cancel()
		if err == nil {
			l, err = daemon.Listen(dataDir)
		}
	}
	if errors.Is(err, daemon.ErrBusy) {
		daemon.ReportReady("busy", nil)
		log.Debug("another daemon owns the data directory", "data_dir", dataDir)
		return nil
	}
	if err != nil {
		daemon.ReportReady("", err)
		return err
	}
	defer l.Close()
	if o.httpAddr != "" {
		ln, err := listenHTTP(o.httpAddr, cfg)
		if err != nil {
			daemon.ReportReady("", err)
			return err
		}
		defer ln.Close()
		a, err := newApp(ctx, o, cfg, dataDir, false, log)
		if err != nil {
			daemon.ReportReady("", err)
			return err
		}
		defer a.close()
		hc, err := a.httpAuth(cfg.HTTP, os.Stderr)
		if err != nil {
			daemon.ReportReady("", err)
			return err
		}
		hctx, cancel := context.WithCancel(ctx)
		httpErr := make(chan error, 1)
		go func() { httpErr <- serveHTTP(hctx, ln, a, hc, log) }()
		defer func() { cancel(); <-httpErr }()
		return serveSocket(ctx, o, cfg, l, a, foreground, log)
	}
	a, err := newApp(ctx, o, cfg, dataDir, true, log)
	if err != nil {
		daemon.ReportReady("", err)
		return err
	}
	defer a.close()
	return serveSocket(ctx, o, cfg, l, a, foreground, log)
}

func serveSocket(ctx context.Context, o serveOptions, cfg Config, l *daemon.Listener, a *app, foreground bool, log *slog.Logger) error {
	daemon.ReportReady("ready", nil)
	idle := idleTimeout(o, cfg, foreground)
	log.Info("daemon serving", "version", version, "pid", os.Getpid(), "data_dir", a.dataDir, "socket", l.Path(), "idle_timeout", idle)
	reason := l.Serve(ctx, daemon.Options{
		Version: version, Shell: a.shell.Status, Store: a.daemonStoreStatus(), Logger: log.With("component", "daemon"), IdleTimeout: idle,
		Busy:  func() bool { return a.mgr.Live() > 0 },
		Admin: a.admin,
		// A confined command's tree is refused whatever the ABI: below 9
		// Landlock lets it reach this socket, and from 9 this costs a few
		// reads of /proc per connection.
		Peer:   subreaper.InConfinedTree,
		Config: absConfig(o.configPath),
		Serve: func(ctx context.Context, c *daemon.SessionConn) error {
			p := c.Principal
			if p == "" {
				p = "local"
			}
			cwd := c.Cwd
			if cwd != "" {
				if real, err := filepath.EvalSymlinks(cwd); err == nil {
					cwd = real
				}
			}
			settings, forget := a.settings.opened(c.ID, p, c.Settings)
			defer forget()
			return a.ts.ServeConn(ctx, edge.Conn{Session: edge.SessionInfo{ID: c.ID, Principal: p, Cwd: cwd, Settings: settings},
				R: c.Reader, W: c.Conn, Close: func() { _ = c.Conn.Close() }, SetWriteDeadline: c.Conn.SetWriteDeadline,
				Bye: c.Bye, Relayed: true, MaxMessage: cfg.MaxMessageBytes}, log.With("component", "daemon"), a.intercept())
		},
	})
	log.Info("daemon stopping", "reason", reason)
	return nil
}

// relay is `serve` over stdio: it connects to the data directory's daemon
// (starting it when none runs, taking over from an older release) and
// relays the protocol.
func relay(ctx context.Context, o serveOptions, cfg Config, stdin io.Reader, stdout io.Writer, log *slog.Logger) error {
	dataDir, err := resolveDataDir(o, cfg)
	if err != nil {
		return err
	}
	cwd, _ := os.Getwd()
	settings := relaySettings(cfg, o.configPath, os.LookupEnv)
	connect := func(ctx context.Context, start bool) (*daemon.Conn, error) {
		co := daemon.ConnectOptions{
			DataDir:  dataDir,
			Hello:    daemon.Hello{Version: version, Cwd: cwd, Principal: o.principal, PID: os.Getpid(), Settings: settings},
			Takeover: func(v string) bool { return daemon.Newer(version, v) },
			Await:    !start,
		}
		if start {
			co.Start = func() *exec.Cmd { return daemonCommand(o, dataDir) }
		}
		return daemon.Connect(ctx, co)
	}
	c, err := connect(ctx, true)
	if err != nil {
		return err
	}
	log.Debug("relaying to the daemon", "socket", daemon.SocketPath(dataDir), "daemon_pid", c.Welcome.PID, "daemon_version", c.Welcome.Version)
	if o.terminal != nil {
		banner(o.terminal, cfg, dataDir, c.Welcome.PID)
	}
	if c.Welcome.Version != version {
		log.Info("the daemon runs another version; `mcp-subagent daemon stop` restarts it on this one", "daemon_version", c.Welcome.Version, "version", version)
	}
	return daemon.Relay(ctx, c, stdin, stdout, cfg.MaxMessageBytes, func(ctx context.Context, start bool) (*daemon.Conn, error) {
		nc, err := connect(ctx, start)
		if err == nil {
			log.Info("relaying to a new daemon", "daemon_pid", nc.Welcome.PID, "daemon_version", nc.Welcome.Version)
		}
		return nc, err
	}, log)
}

// daemonCommand starts this binary as dataDir's daemon, detached, logging
// to daemon.log.
func daemonCommand(o serveOptions, dataDir string) *exec.Cmd {
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	args := []string{"daemon", "--data-dir", dataDir, "--log-level", o.logLevel, "--log-format", "json"}
	if o.configPath != "" {
		if abs, err := filepath.Abs(o.configPath); err == nil {
			args = append(args, "--config", abs)
		}
	}
	switch {
	case o.idle != 0:
		args = append(args, "--idle-timeout", o.idle.String())
	case goRunBinary(self):
		// `go run` deletes its temporary binary when the session ends: a
		// daemon left running from it could never be restarted or
		// upgraded from that path. It exits as soon as it is idle.
		args = append(args, "--idle-timeout", "1ms")
	}
	cmd := exec.Command(self, args...)
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), detachEnv+"=1")
	if o.store != "" {
		// In the environment, not the arguments: ps shows arguments, and
		// the URL may hold a password.
		cmd.Env = append(cmd.Env, storeEnv+"="+o.store)
	}
	if err := os.MkdirAll(dataDir, 0o700); err == nil {
		if f, err := os.OpenFile(daemon.LogPath(dataDir), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); err == nil {
			cmd.Stdout, cmd.Stderr = f, f
		}
	}
	return cmd
}

// daemonControl is `mcp-subagent daemon stop|status`.
func daemonControl(ctx context.Context, op string, o serveOptions, stdout io.Writer) error {
	cfg, err := loadConfig(o.configPath)
	if err != nil {
		return err
	}
	dataDir, err := resolveDataDir(o, cfg)
	if err != nil {
		return err
	}
	switch op {
	case "stop":
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return daemon.Stop(sctx, dataDir, daemon.Hello{Version: version, Op: "stop", PID: os.Getpid()})
	case "status":
		w, err := daemon.Status(ctx, dataDir)
		var refused *daemon.RefusedError
		var foreign *daemon.ForeignSocketError
		if errors.As(err, &refused) || errors.As(err, &foreign) {
			return err
		}
		if err != nil {
			fmt.Fprintf(stdout, "no daemon runs for %s\n", dataDir)
			return nil
		}
		fmt.Fprintf(stdout, "daemon pid %d, version %s, %d sessions, socket %s, log %s\n", w.PID, w.Version, w.Sessions, daemon.SocketPath(dataDir), daemon.LogPath(dataDir))
		if w.Shell != "" {
			fmt.Fprintf(stdout, "shell: %s\n", w.Shell)
		}
		// Names only, never values: a value may be a key.
		for _, d := range w.Differing {
			what := []string{}
			if len(d.Vars) > 0 {
				what = append(what, strings.Join(d.Vars, ", "))
			}
			if d.Config {
				what = append(what, "its config file")
			}
			fmt.Fprintf(stdout, "session %s (client pid %d) has settings of its own, which its children use: %s differ from the daemon's\n", d.Session, d.ClientPID, strings.Join(what, "; "))
		}
		if w.Store != "" {
			fmt.Fprintf(stdout, "store: %s\n", w.Store)
		}
		return nil
	}
	return fmt.Errorf("unknown daemon command %q: use stop or status", op)
}
