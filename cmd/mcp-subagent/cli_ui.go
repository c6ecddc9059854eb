package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcp-subagent/mcp-subagent/daemon"
	"github.com/mcp-subagent/mcp-subagent/edge"
	"github.com/mcp-subagent/mcp-subagent/edge/tokens"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/view"
)

// webView is the daemon's web view (package view): one view.Server whose
// tokens serve both its own loopback listener, started on the first ui
// admin op and kept while the daemon lives, and under serve --http the
// /view/ path of the HTTP listener.
type webView struct {
	view *view.Server
	log  *slog.Logger

	mu     sync.Mutex
	base   string       // the loopback listener's root URL; "" until started
	srv    *http.Server // ...and its server
	served chan struct{}
	closed bool
	// anyHost turns the loopback Host check of the view's own listener
	// off: for the tests that prove their probes, set before the first url.
	anyHost bool
	tokens  *tokens.Registry // the view's tokens, and /view/url's bearer tokens
}

// newWebView is the view over m, its tokens in reg (the edge's registry;
// nil: one of the view's own).
func newWebView(m *manager.Manager, reg *tokens.Registry, log *slog.Logger) *webView {
	if reg == nil {
		reg = tokens.New()
	}
	return &webView{view: view.New(m, view.Options{Logger: log, SameOrigin: edge.ViewSameOrigin, Tokens: reg}), tokens: reg, log: log}
}

// uiResult is the ui op's answer.
type uiResult struct {
	URL string `json:"url"`
}

// url is principal's view URL on the loopback listener, starting it on
// first use.
func (w *webView) url(principal string) (uiResult, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return uiResult{}, errors.New("DRAINING: the daemon is stopping")
	}
	if w.base == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return uiResult{}, fmt.Errorf("the web view's listener: %w", err)
		}
		h := w.view.Handler()
		if !w.anyHost {
			h = edge.GuardHost(h, ln.Addr())
		}
		w.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
		w.served = make(chan struct{})
		go func() {
			defer close(w.served)
			if err := w.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				w.log.Error("the web view stopped serving", "err", err)
			}
		}()
		w.base = "http://" + ln.Addr().String() + "/"
		w.log.Info("web view serving", "addr", ln.Addr().String())
	}
	u, err := w.view.URL(w.base, principal)
	return uiResult{URL: u}, err
}

// close stops the listener (its connections first, so no stream write is
// left hanging) and then the view, which waits for its streams.
func (w *webView) close() {
	w.mu.Lock()
	w.closed = true
	srv, served := w.srv, w.served
	w.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
		<-served
	}
	w.view.Close()
}

// mount serves the view under /view/ beside next (serve --http's
// handler), for the HTTP principals: GET /view/url with a principal's
// bearer token (guarded as /mcp is) answers that principal's view URL on
// this listener, and /view/... is the view itself, authenticated by the
// view token in the URL (a browser has no bearer token to send).
func (w *webView) mount(next http.Handler, hc HTTPConfig) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", next)
	mux.Handle("/view/", http.StripPrefix("/view", w.view.Handler()))
	mux.Handle("GET /view/url", guard(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		u, err := w.view.URL(scheme+"://"+r.Host+"/view/", edge.Principal(r.Context()))
		if err != nil {
			http.Error(rw, err.Error(), http.StatusServiceUnavailable)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		rw.Header().Set("Cache-Control", "no-store")
		_ = printJSON(rw, uiResult{URL: u})
	}), hc, w.tokens))
	return mux
}

// runUI is `mcp-subagent ui`: it asks the daemon (starting one when none
// runs) for principal local's view URL, prints it, and with --open hands
// it to a browser.
func runUI(args []string, stdout, stderr io.Writer) int {
	fs, o, asJSON := adminFlags("ui", stderr)
	open := fs.Bool("open", false, "also open the URL in a browser ($BROWSER, else xdg-open)")
	if code, ok := parseAdmin(fs, args, stderr); !ok {
		return code
	}
	var res uiResult
	if !askDaemon(daemon.OpUI, nil, o, &res, stderr) {
		return 1
	}
	if *asJSON {
		if code := jsonOut(stdout, stderr, res); code != 0 {
			return code
		}
	} else {
		fmt.Fprintln(stdout, res.URL)
	}
	if *open {
		if err := openBrowser(res.URL); err != nil {
			fmt.Fprintln(stderr, "mcp-subagent ui: --open:", err)
		}
	}
	return 0
}

// openBrowser starts $BROWSER (its first entry; "%s" in it is the URL)
// or xdg-open on url, and leaves it running: the browser is the user's.
func openBrowser(url string) error {
	var argv []string
	if b := strings.TrimSpace(strings.Split(os.Getenv("BROWSER"), ":")[0]); b != "" {
		argv = strings.Fields(b)
		if i := slices.IndexFunc(argv, func(s string) bool { return strings.Contains(s, "%s") }); i >= 0 {
			argv[i] = strings.ReplaceAll(argv[i], "%s", url)
		} else {
			argv = append(argv, url)
		}
	} else if p, err := exec.LookPath("xdg-open"); err == nil {
		argv = []string{p, url}
	} else {
		return errors.New("no browser to open: set $BROWSER or install xdg-open, or open the URL above yourself")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, nil, nil
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", argv[0], err)
	}
	return cmd.Process.Release()
}
