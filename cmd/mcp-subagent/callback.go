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
	mux.Handle("/mcp", callbackGuard(limitBody(streamable, hc), ts))
	var h http.Handler = mux
	if !anyHost {
		h = guardHost(mux, ln.Addr())
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

// callbackGuard resolves the request's callback token once and passes the
// child's identity on in the request's context, which mcp-go hands to the
// tool handlers. Nothing resolves it again later, so nothing can fall back
// to another identity when the token is revoked in between: the handlers
// then refuse the call.
func callbackGuard(next http.Handler, ts *edge.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := bearerToken(r.Header.Get("Authorization"))
		ctx := r.Context()
		if ok {
			ctx, ok = ts.ChildContext(ctx, tok)
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mcp-subagent-callback"`)
			http.Error(w, "Unauthorized: this endpoint serves subagents with a valid callback token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}
