package edge

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
)

// A wait ends at its bound: the wait_seconds asked for, capped by the
// client's bound (Codex cancels a call after 60 s, so its waits end at
// 50 s). In a synctest bubble the clock moves only when every goroutine
// waits, so the elapsed time is the bound exactly, and the ten-minute wait
// takes no real time. The session is the stdio one (ServeStdio
// over pipes), as --no-daemon serves it.
func TestWaitsEndAtTheirBound(t *testing.T) {
	for _, tc := range []struct {
		client     string
		wait, want float64
	}{
		{"some-client", 600, 600},
		{"codex-mcp-client", 600, 50},
		{"codex-mcp-client", 10, 10},
	} {
		t.Run(fmt.Sprintf("%s/%v", tc.client, tc.wait), func(t *testing.T) {
			dir := t.TempDir()
			synctest.Test(t, func(t *testing.T) {
				mgr := manager.New(manager.Options{Store: memstore.New()})
				if err := mgr.Register(&plainProvider{}); err != nil {
					t.Fatal(err)
				}
				ts, err := New(mgr, Options{Roots: []string{dir}, ClientWaitSeconds: map[string]float64{"codex-mcp-client": 50}})
				if err != nil {
					t.Fatal(err)
				}
				ms := server.NewMCPServer("test", "1", server.WithToolCapabilities(false),
					server.WithToolFilter(ts.Filter), server.WithHooks(ts.Hooks()))
				ts.Register(ms)

				ctx, cancel := context.WithCancel(context.Background())
				tr, served := serveStdioPipes(ctx, ts)
				c := client.NewClient(tr)
				if err := c.Start(ctx); err != nil {
					t.Fatal(err)
				}
				init := mcp.InitializeRequest{}
				init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
				init.Params.ClientInfo = mcp.Implementation{Name: tc.client, Version: "1"}
				if _, err := c.Initialize(ctx, init); err != nil {
					t.Fatal(err)
				}

				t0 := time.Now()
				req := mcp.CallToolRequest{}
				req.Params.Name = "list_agents"
				req.Params.Arguments = map[string]any{"wait_seconds": tc.wait}
				res, err := c.CallTool(ctx, req)
				if err != nil || res.IsError {
					t.Fatalf("list_agents: %v %+v", err, res)
				}
				if got, want := time.Since(t0), time.Duration(tc.want*float64(time.Second)); got != want {
					t.Errorf("the wait took %v, want %v", got, want)
				}

				c.Close()
				cancel()
				if err := served(); err != nil {
					t.Errorf("ServeStdio: %v", err)
				}
				_ = mgr.Close(context.Background())
			})
		})
	}
}

// serveStdioPipes serves ts over pipes as principal "local"'s stdio
// session (ServeStdio, as --no-daemon serves it) until ctx ends; tr is
// the client's end. served waits for the session to end, then ends the
// client's reader, and returns how ServeStdio ended.
func serveStdioPipes(ctx context.Context, ts *Server) (tr *transport.Stdio, served func() error) {
	clientIn, serverOut := io.Pipe()
	serverIn, clientOut := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- ts.ServeStdio(ctx, "local", serverIn, serverOut, 0, slog.New(slog.DiscardHandler))
	}()
	return transport.NewIO(clientIn, clientOut, nil), func() error {
		err := <-done
		serverOut.Close()
		return err
	}
}
