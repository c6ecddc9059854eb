package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-subagent/mcp-subagent/tools"
)

// serveCallbacks listens on loopback for external children calling this
// server back (report, list_agents, subagent). Every request must carry a
// bearer token minted for one child and not yet revoked; the caller is that
// child. It runs whatever transport the parent side uses (stdio too) and
// stops with ctx.
func serveCallbacks(ctx context.Context, ms *server.MCPServer, ts *tools.Server, log *slog.Logger) (url string, done <-chan struct{}, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	streamable := server.NewStreamableHTTPServer(ms,
		server.WithEndpointPath("/mcp"),
		server.WithStreamableHTTPLogger(log),
		server.WithHTTPContextFunc(func(ctx context.Context, r *http.Request) context.Context {
			tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			child, _ := ts.ChildContext(ctx, tok)
			return child
		}))
	mux := http.NewServeMux()
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if _, known := ts.ChildContext(r.Context(), tok); !ok || !known {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mcp-subagent-callback"`)
			http.Error(w, "Unauthorized: this endpoint serves subagents with a valid callback token", http.StatusUnauthorized)
			return
		}
		streamable.ServeHTTP(w, r)
	}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
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
