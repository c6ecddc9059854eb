package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-subagent/mcp-subagent/edge"
)

// serveCallbacks listens on loopback for external children calling this
// server back (report, list_agents, subagent). Every request must carry a
// bearer token minted for one child and not yet revoked; the caller is that
// child. It runs whatever transport the parent side uses (stdio too), with
// hc's body limit and timeouts, and the loopback Host check (off only
// with anyHost, for tests), and stops with ctx.
func serveCallbacks(ctx context.Context, ms *server.MCPServer, ts *edge.Server, hc HTTPConfig, anyHost bool, log *slog.Logger) (url string, done <-chan struct{}, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	var sopts []server.StreamableHTTPOption
	if anyHost { // mcp-go's own Host check too
		sopts = append(sopts, server.WithDisableLocalhostProtection(true))
	}
	streamable := newStreamable(ms, hc, log, sopts...)
	mux := http.NewServeMux()
	mux.Handle("/mcp", ts.CallbackGuard(limitBody(streamable, hc)))
	var h http.Handler = mux
	if !anyHost {
		h = edge.GuardHost(mux, ln.Addr())
	}
	srv := newHTTPServer(h, hc)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = srv.Serve(ln)
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
		defer cancel()
		_ = streamable.Shutdown(sctx)
		_ = srv.Shutdown(sctx)
	}()
	url = "http://" + ln.Addr().String() + "/mcp"
	log.Info("serving callbacks for external children", "callback_url", url)
	return url, stopped, nil
}
