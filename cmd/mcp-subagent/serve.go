package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/edge"
	"github.com/mcp-subagent/mcp-subagent/edge/tokens"
	"github.com/mcp-subagent/mcp-subagent/llm/openai"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist"
	"github.com/mcp-subagent/mcp-subagent/persist/pgstore"
	"github.com/mcp-subagent/mcp-subagent/providers/spawn"
	"github.com/mcp-subagent/mcp-subagent/seam"
	"github.com/mcp-subagent/mcp-subagent/tasks/taskstore"
)

type serveOptions struct {
	httpAddr, configPath, dataDir, logLevel, logFormat, principal string
	store                                                         string // --store
	ephemeral, noDaemon                                           bool
	idle                                                          time.Duration
	// terminal, set when a person started serve on a terminal, gets one
	// line saying what serve is and how to use it (banner.go).
	terminal io.Writer
}

// defaultDataDir is $XDG_STATE_HOME/mcp-subagent, or
// ~/.local/state/mcp-subagent.
func defaultDataDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "mcp-subagent"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no data directory: set --data-dir, XDG_STATE_HOME or HOME")
	}
	return filepath.Join(home, ".local", "state", "mcp-subagent"), nil
}

// llmModelEnv is the llm block as the model "default" (without a models
// list), reading the variables with getenv: the config first, then
// OPENAI_BASE_URL / OPENAI_API_KEY / MCP_SUBAGENT_MODEL, then DeepSeek's
// endpoint when only DEEPSEEK_API_KEY is set, then OpenAI's.
func llmModelEnv(c LLMConfig, getenv func(string) string) ModelConfig {
	m := ModelConfig{Name: spawn.DefaultModel, API: apiOpenAI, BaseURL: c.BaseURL, APIKeyEnv: c.APIKeyEnv, Model: c.Model, MaxTokens: c.MaxTokens,
		from: modelSources{baseURL: "llm.base_url", key: "llm.api_key_env", model: "llm.model"}}
	deepseek := getenv("OPENAI_API_KEY") == "" && getenv("DEEPSEEK_API_KEY") != ""
	if m.APIKeyEnv == "" {
		m.APIKeyEnv = "OPENAI_API_KEY"
		if deepseek {
			m.APIKeyEnv = "DEEPSEEK_API_KEY"
		}
		m.from.key = m.APIKeyEnv
	}
	if m.BaseURL == "" {
		m.BaseURL, m.from.baseURL = getenv("OPENAI_BASE_URL"), "OPENAI_BASE_URL"
		if m.BaseURL == "" && deepseek {
			m.BaseURL, m.from.baseURL = "https://api.deepseek.com/v1", "DeepSeek's default, DEEPSEEK_API_KEY being set"
		}
		if m.BaseURL == "" {
			m.BaseURL, m.from.baseURL = openai.DefaultBaseURL, "the default, OPENAI_BASE_URL being unset"
		}
	}
	if m.Model == "" {
		m.Model, m.from.model = getenv("MCP_SUBAGENT_MODEL"), "MCP_SUBAGENT_MODEL"
		if m.Model == "" && deepseek {
			m.Model, m.from.model = "deepseek-chat", "DeepSeek's default, DEEPSEEK_API_KEY being set"
		}
		if m.Model == "" {
			m.Model, m.from.model = "gpt-4.1-mini", "the default, MCP_SUBAGENT_MODEL being unset"
		}
	}
	return m
}

// app is the server proper: store, manager, providers, tools, MCP server
// and callback listener, as one process (a daemon, or --no-daemon) runs it.
type app struct {
	cfg     Config
	dataDir string // "" with --ephemeral
	mgr     *manager.Manager
	store   *persist.Store // nil with --ephemeral or a PostgreSQL store
	ts      *edge.Server
	ms      *server.MCPServer
	web     *webView        // the web view, its loopback listener started by the first ui op
	tasks   *edge.TaskLayer // durable MCP tasks; nil with --ephemeral
	log     *slog.Logger
	// settings are the connected sessions' (settings.go), which their
	// children run with.
	settings sessionSettings
	shell    shellSetting // run_shell's mode, for the log and daemon status
	// storeStatus says where the session store lives, its password
	// redacted, for daemon status.
	storeStatus string
	closers     []func() // run in reverse by close
	// insecure turns protections off, for the tests that prove their
	// probes reach what the protections guard; zero keeps every one.
	insecure insecureHooks

	// owner is this instance's owner id in the store's claims (see
	// instanceOwnerID), which daemon status and doctor show.
	owner string
}

// insecureHooks are protections a test may turn off; nothing else sets
// them.
type insecureHooks struct {
	anyHost   bool // no loopback Host check on the --http and ui listeners
	anonymous bool // tokenless --http without a bearer token, as principal local
}

// resolveDataDir is --data-dir, else the config's, else the default.
//
// The directory is created (0700) here, before any daemon or log file is
// looked for inside it, so a directory that cannot be made is reported as
// that, naming where its path came from and what to do. (Whether it is
// writable is left to what opens the store: `daemon status` of another
// user's directory must reach that daemon's own refusal.)
func resolveDataDir(o serveOptions, cfg Config) (string, error) {
	dir, from := o.dataDir, "--data-dir"
	if dir == "" {
		dir, from = cfg.DataDir, `the config's "data_dir"`
	}
	if dir == "" {
		var err error
		if dir, err = defaultDataDir(); err != nil {
			return "", err
		}
		from = "the default ($XDG_STATE_HOME/mcp-subagent, else ~/.local/state/mcp-subagent)"
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("data directory %s (from %s) cannot be created: %w; create it yourself or choose another with --data-dir", dir, from, errors.Unwrap(err))
	}
	return dir, nil
}

// newApp builds the server. A daemon's working directory is nobody's
// project, so with asDaemon it is no allowed root: sessions bring theirs.
func newApp(ctx context.Context, o serveOptions, cfg Config, dataDir string, asDaemon bool, log *slog.Logger) (_ *app, err error) {
	a := &app{cfg: cfg, dataDir: dataDir, log: log}
	defer func() {
		if err != nil {
			a.close()
		}
	}()
	// The session store keeps continuable children; --ephemeral runs
	// without one: foreground one-shot children only, control tools hidden.
	var store seam.Store
	var taskStore taskstore.Store // the store's task records; nil with --ephemeral
	var worktrees string          // isolation "worktree": refused with --ephemeral (no data directory)
	shared := false               // the store is PostgreSQL, which several instances may share
	if dataDir != "" {
		worktrees = filepath.Join(dataDir, "worktrees")
		url, err := resolveStore(o, cfg)
		if err != nil {
			return nil, err
		}
		if url != "" {
			st, err := pgstore.Open(ctx, url, log.With("component", "pgstore"))
			if err != nil {
				return nil, err
			}
			a.closers = append(a.closers, func() { _ = st.Close() })
			store, taskStore, shared = st, st, true
			a.storeStatus = "PostgreSQL " + pgstore.Redact(url)
		} else {
			st, err := persist.Open(dataDir, persist.Options{Logger: log.With("component", "persist")})
			if err != nil {
				return nil, err
			}
			a.closers = append(a.closers, func() { _ = st.Close() })
			store, taskStore, a.store = st, st, st
			a.storeStatus = "bbolt " + filepath.Join(dataDir, persist.FileName)
		}
	}
	var ts *edge.Server
	a.owner = instanceOwnerID()
	mgr := manager.New(manager.Options{OwnerID: a.owner, LeaseTTL: cfg.Cluster.leaseTTL(), MaxDepth: cfg.MaxDepth, Budget: cfg.Limits.Budget.limits(), Logger: log.With("component", "manager"), Store: store,
		MaxRunningChildren: cfg.Limits.MaxRunningChildren, MaxRunningTotal: cfg.Limits.MaxRunningTotal, Worktrees: worktrees,
		OnNotice: func(principal string, n seam.Notice) {
			if ts != nil {
				ts.PushNotice(principal, n)
			}
		},
		SessionConnected: func(id string) bool { return ts != nil && ts.SessionConnected(id) },
		Removed:          func(ids []string) { removeChildCaches(dataDir, ids, log) },
		Callback: func(self seam.ParentRef) (seam.Callback, func()) {
			if ts == nil {
				return seam.Callback{}, nil
			}
			return ts.MintCallback(self)
		}})
	a.mgr = mgr
	a.closers = append(a.closers, func() {
		// Give runs a moment to wind down; the transports have cancelled
		// their calls, which aborts foreground runs.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = mgr.Close(cctx)
	})
	models := buildModels(resolveModels(cfg), cfg.LLM, log.With("component", "llm"))
	delegation := func(self seam.ParentRef) []agent.Tool {
		if ts == nil {
			return nil
		}
		return ts.AgentTools(self)
	}
	shell, err := shellFor(cfg, log)
	if err != nil {
		return nil, err
	}
	a.shell = shell
	tmpRoot, cacheRoot, err := shellDirs(dataDir)
	if err != nil {
		return nil, err
	}
	pol := shell.Policy
	pol.TempDir = tmpRoot
	if pol.Mode.Confined() && dataDir != "" {
		pol.GoCacheSeed = goSeedDir(dataDir)
		a.closers = append(a.closers, warmGoSeed(ctx, dataDir, log.With("component", "shell")))
	}
	sopts := spawn.Options{Models: models, Persona: cfg.Persona, Shell: shell.On, Sandbox: pol, CacheRoot: cacheRoot,
		MaxSteps: cfg.LLM.MaxSteps, DelegationTools: delegation, ModelsFor: a.modelsFor, Logger: log,
		AskUser: cfg.Spawn.Permission == "ask", QuestionTimeout: time.Duration(cfg.Spawn.QuestionTimeoutSeconds * float64(time.Second))}
	external, err := externalProviders(cfg.Providers, a.settings.lookup, log.With("component", "provider"))
	if err != nil {
		return nil, err
	}
	for _, p := range append([]seam.Provider{spawn.New(sopts), spawn.NewFork(sopts)}, external...) {
		if err := mgr.Register(p); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
	}
	waits := map[string]float64{}
	for k, v := range defaultClientWait {
		waits[k] = v
	}
	for k, v := range cfg.ClientWaitSeconds {
		waits[k] = v
	}
	// Durable MCP tasks need the store: a task's record lives beside its
	// child. The tools see a task call's mode in its request.
	if taskStore != nil {
		to := edge.TaskOptions{Store: taskStore, Manager: mgr, Logger: log.With("component", "tasks")}
		if shared { // a task records this instance as its runner (edge.TaskOptions.Instance)
			to.Instance = a.owner
		}
		a.tasks = edge.NewTaskLayer(to)
		a.closers = append(a.closers, a.tasks.Close) // before the manager's Close: closers run in reverse
	}
	ts, err = edge.New(mgr, edge.Options{Tasks: a.tasks, Roots: cfg.Roots, NoWorkingDirRoot: asDaemon, DefaultProvider: cfg.DefaultProvider,
		DefaultWaitSeconds: cfg.WaitSeconds, ClientWaitSeconds: waits, Limits: cfg.Limits.tools(), ModelNamesFor: a.modelNamesFor,
		Logger: log.With("component", "tools")})
	if err != nil {
		return nil, err
	}
	a.ts = ts
	// Children a crash or a shutdown left claimed are closed and announced.
	if err := mgr.Recover(ctx); err != nil {
		return nil, fmt.Errorf("recovering children from %s: %w", dataDir, err)
	}
	// Then the tasks they left working: each is resolved from its child.
	if a.tasks != nil {
		if err := a.tasks.Recover(ctx); err != nil {
			return nil, fmt.Errorf("recovering tasks from %s: %w", dataDir, err)
		}
	}
	// Recovered first: a crash's claims are announced before retention
	// may remove anything.
	ret, err := cfg.Retention.policy(principals(o, cfg))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	mgr.Retain(ret)
	sopt := []server.ServerOption{server.WithToolCapabilities(false), server.WithLogging(), server.WithRecovery(),
		server.WithResourceCapabilities(true, false), // transcripts, subscribable
		server.WithToolFilter(ts.Filter), server.WithHooks(ts.Hooks())}
	if a.tasks != nil { // advertised in server/discover (and initialize)
		sopt = append(sopt, server.WithExtensions(edge.TaskCapabilities()))
	}
	a.ms = server.NewMCPServer("mcp-subagent", version, sopt...)
	ts.Register(a.ms)
	a.closers = append(a.closers, ts.CloseSubscriptions)
	a.web = newWebView(mgr, ts.Tokens(), log.With("component", "view"))
	a.closers = append(a.closers, a.web.close)
	if len(external) > 0 { // external children reach the server back here
		cctx, stopCallbacks := context.WithCancel(ctx)
		url, stopped, err := serveCallbacks(cctx, a.ms, ts, cfg.HTTP, false, log.With("component", "callback"))
		if err != nil {
			stopCallbacks()
			return nil, fmt.Errorf("callback listener: %w", err)
		}
		ts.SetCallbackURL(url)
		a.closers = append(a.closers, func() { stopCallbacks(); <-stopped })
	}
	return a, nil
}

// defaultClientWait bounds every wait of clients that cancel tool calls on
// a fixed timer: Codex after tool_timeout_sec (60 s by default).
var defaultClientWait = map[string]float64{"codex-mcp-client": 50}

// intercept is what sees each stdio message before MCP: the resources/read
// error codes, and the tasks layer (none with --ephemeral).
func (a *app) intercept() edge.Intercept {
	if a.tasks == nil {
		return resourceCodes(nil)
	}
	return resourceCodes(a.tasks.Handle)
}

func (a *app) close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
	a.closers = nil
}

// listenHTTP binds --http, refusing an unguarded public address.
func listenHTTP(addr string, cfg Config) (net.Listener, error) {
	if !isLoopbackAddr(addr) && len(cfg.HTTP.Tokens) == 0 {
		return nil, fmt.Errorf("--http %s is not a loopback address: configure http.tokens in the config file to serve it, or bind 127.0.0.1", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http %s: %w", addr, err)
	}
	return ln, nil
}

// serve runs the server: in process with --no-daemon or --ephemeral;
// otherwise stdio is relayed to the data directory's daemon, and --http
// runs the daemon itself in the foreground.
func serve(ctx context.Context, o serveOptions, stdin io.Reader, stdout io.Writer, log *slog.Logger) error {
	cfg, err := loadConfig(o.configPath)
	if err != nil {
		return err
	}
	switch {
	case o.ephemeral || o.noDaemon:
		return serveInProcess(ctx, o, cfg, stdin, stdout, log)
	case o.httpAddr != "":
		return runDaemon(ctx, o, cfg, true, log)
	default:
		return relay(ctx, o, cfg, stdin, stdout, log)
	}
}

// serveInProcess is the server in this process, stdio or HTTP.
func serveInProcess(ctx context.Context, o serveOptions, cfg Config, stdin io.Reader, stdout io.Writer, log *slog.Logger) error {
	var listener net.Listener
	if o.httpAddr != "" {
		var err error
		if listener, err = listenHTTP(o.httpAddr, cfg); err != nil {
			return err
		}
	}
	dataDir := ""
	if !o.ephemeral {
		var err error
		if dataDir, err = resolveDataDir(o, cfg); err != nil {
			return err
		}
	}
	a, err := newApp(ctx, o, cfg, dataDir, false, log)
	if err != nil {
		return err
	}
	defer a.close()
	if listener != nil {
		hc, err := a.httpAuth(cfg.HTTP, os.Stderr)
		if err != nil {
			return err
		}
		return serveHTTP(ctx, listener, a, hc, log)
	}
	log.Info("serving MCP over stdio", "version", version, "principal", o.principal)
	// Not mcp-go's stdio server: its worker pool lets long calls (waits,
	// foreground children) stall every call behind them. Each request runs
	// on its own goroutine, as in a daemon session.
	err = a.ts.ServeStdio(ctx, o.principal, stdin, stdout, cfg.MaxMessageBytes,
		log.With("component", "stdio"), a.intercept())
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// serveHTTP serves --http on ln until ctx ends: /mcp, the web view under
// /view/, and on a loopback listener the Host check in front of them all.
// hc is the config's http section after httpAuth.
func serveHTTP(ctx context.Context, ln net.Listener, a *app, hc HTTPConfig, log *slog.Logger) error {
	var sopts []server.StreamableHTTPOption
	if a.insecure.anyHost { // mcp-go's own Host check on /mcp too
		sopts = append(sopts, server.WithDisableLocalhostProtection(true))
	}
	h, streamable := httpHandler(a.ms, a.ts, hc, log, a.tasks, sopts...)
	root := a.web.mount(h, hc)
	if !a.insecure.anyHost {
		root = edge.GuardHost(root, ln.Addr())
	}
	srv := newHTTPServer(root, hc)
	srv.RegisterOnShutdown(a.web.view.Close) // its streams never go idle: end them, or Shutdown waits them out
	log.Info("serving MCP over streamable HTTP", "version", version, "url", "http://"+ln.Addr().String()+"/mcp",
		"max_body_bytes", hc.maxBody(), "read_timeout", srv.ReadTimeout, "idle_timeout", srv.IdleTimeout, "session_idle", hc.sessionIdle())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		_ = streamable.Shutdown(context.WithoutCancel(ctx)) // stops its session sweeper
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = streamable.Shutdown(sctx)
	_ = srv.Shutdown(sctx)
	return nil
}

// httpHandler is serve --http's handler: the origin and token guard, the
// body limit, sessions bound to their principal, the tasks layer (tl; nil
// with --ephemeral), then mcp-go's streamable HTTP server (with opts),
// whose Shutdown stops its session sweeper. mcp-go's own Host check covers
// only what reaches it (not the tasks layer's answers, nor the view):
// edge.GuardHost in front of the whole listener is the one that counts.
func httpHandler(ms *server.MCPServer, ts *edge.Server, hc HTTPConfig, log *slog.Logger, tl *edge.TaskLayer, opts ...server.StreamableHTTPOption) (http.Handler, *server.StreamableHTTPServer) {
	streamable := newStreamable(ms, hc, log.With("component", "http"), opts...)
	var inner http.Handler = streamable
	if tl != nil {
		inner = tl.HTTP(streamable, ms.HandleMessage)
	}
	inner = resourceCodesHTTP(inner, ms.HandleMessage)
	mux := http.NewServeMux()
	sessions := limitBody(bindSessions(inner, ts), hc)
	mux.Handle("/mcp", sessionEnd(guard(sessions, hc, ts.Tokens()), sessions, ts, hc))
	return mux, streamable
}

// newStreamable is mcp-go's streamable HTTP server with abandoned sessions
// expiring: a session with no request for hc.sessionIdle() is forgotten
// (its transport state, its registration, and through the unregister
// hook the tools' record of it). An open GET stream counts as activity
// only when it carries an event, so the stream's heartbeat runs well
// inside the idle period.
func newStreamable(ms *server.MCPServer, hc HTTPConfig, log *slog.Logger, opts ...server.StreamableHTTPOption) *server.StreamableHTTPServer {
	ttl := hc.sessionIdle()
	return server.NewStreamableHTTPServer(ms, append([]server.StreamableHTTPOption{
		server.WithEndpointPath("/mcp"),
		server.WithStreamableHTTPLogger(log),
		server.WithSessionIdleTTL(ttl),
		server.WithHeartbeatInterval(ttl / 3),
	}, opts...)...)
}

// newHTTPServer bounds how long a client may take to send a request
// (headers and body: ReadTimeout; net/http clears the read deadline once
// the body is read, so SSE streams and long tool calls are not cut) and
// how long an idle keep-alive connection is kept. There is deliberately no
// WriteTimeout: a foreground subagent call answers after minutes.
func newHTTPServer(h http.Handler, hc HTTPConfig) *http.Server {
	read := hc.readTimeout()
	return &http.Server{Handler: h, ReadTimeout: read, ReadHeaderTimeout: min(read, 10*time.Second), IdleTimeout: hc.idleTimeout()}
}

// limitBody reads a POST body whole, within hc.maxBody() bytes, before
// anything parses it (mcp-go would read it whole, unbounded): a larger one
// is refused with 413 before it is buffered, so its size costs no memory.
func limitBody(next http.Handler, hc HTTPConfig) http.Handler {
	limit := hc.maxBody()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		tooLarge := func() {
			// Refuse the rest of the body too: the connection is closed.
			w.Header().Set("Connection", "close")
			http.Error(w, fmt.Sprintf("Request Entity Too Large: the request body exceeds %d bytes; a larger one needs http.max_body_bytes raised in the config", limit), http.StatusRequestEntityTooLarge)
		}
		if r.ContentLength > limit {
			tooLarge()
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
		if err != nil {
			var mbe *http.MaxBytesError
			var ne net.Error
			switch {
			case errors.As(err, &mbe):
				tooLarge()
			case errors.As(err, &ne) && ne.Timeout():
				w.Header().Set("Connection", "close")
				http.Error(w, "Request Timeout: the request body was not sent within http.read_timeout_seconds", http.StatusRequestTimeout)
			default:
				http.Error(w, "Bad Request: reading the request body failed", http.StatusBadRequest)
			}
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// guard is the bearer and Origin check of /mcp (edge.BearerGuard), with
// hc's tokens registered in reg.
func guard(next http.Handler, hc HTTPConfig, reg *tokens.Registry) http.Handler {
	for _, t := range hc.Tokens {
		_ = reg.Add(tokens.HTTP, t.Token, t.Principal) // an empty one (refused) resolves nothing
	}
	return edge.BearerGuard(next, reg, len(hc.Tokens) > 0, func(o string) bool { return originAllowed(o, hc.AllowedOrigins) })
}

// sessionEnd lets a DELETE of a known session end it without a bearer
// token, as its principal: mcp-go's client (and others) send their
// configured headers on every request but the closing DELETE, and a
// session left open would keep its principal's notices from the next
// session. The session id is unguessable and names the session it ends, so
// it is credential enough for that; anything else goes through guarded.
func sessionEnd(guarded, sessions http.Handler, ts *edge.Server, hc HTTPConfig) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(server.HeaderKeySessionID)
		if r.Method != http.MethodDelete || id == "" || r.Header.Get("Authorization") != "" {
			guarded.ServeHTTP(w, r)
			return
		}
		p, ok := ts.SessionPrincipal(id)
		if o := r.Header.Get("Origin"); !ok || (o != "" && !originAllowed(o, hc.AllowedOrigins)) {
			guarded.ServeHTTP(w, r)
			return
		}
		sessions.ServeHTTP(w, r.WithContext(edge.WithPrincipal(r.Context(), p)))
	})
}

// bindSessions binds each HTTP session to the principal that created it: a
// request naming another principal's session gets 404, as an unknown
// session would. The binding is the tools' record of the session (made at
// initialize; for an id this process did not mint, one from before a
// restart, by its first request), so it ends when the session does: at a
// DELETE, or when the session idles out.
func bindSessions(next http.Handler, ts *edge.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(server.HeaderKeySessionID)
		if id != "" {
			if !ts.BindSession(id, edge.Principal(r.Context())) {
				http.Error(w, "Not Found: no such session", http.StatusNotFound)
				return
			}
			if r.Method == http.MethodDelete {
				defer ts.EndSession(id)
			}
		}
		next.ServeHTTP(w, r)
	})
}

func originAllowed(origin string, allowed []string) bool {
	for _, a := range allowed {
		if strings.EqualFold(a, origin) {
			return true
		}
	}
	u, err := url.Parse(origin)
	if err != nil {
		return false
	}
	return isLoopbackAddr(u.Host)
}

func isLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
