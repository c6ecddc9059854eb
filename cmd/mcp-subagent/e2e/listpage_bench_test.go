//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/internal/seed"
	"github.com/mcp-subagent/mcp-subagent/persist"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// BenchmarkListPageOverStdio pages list_agents over 100,000 stored root
// children of the stdio principal, through a real mcp-go client, on a
// server relayed to its daemon and on an in-process one, interleaved with
// the echo floor. Each round fetches the first, a middle and the last
// page of 50 rows (their cursors found by following next_cursor once).
// Reported: the median page round trip and its ratio to the floor, and
// the largest page's bytes.
func BenchmarkListPageOverStdio(b *testing.B) {
	const n = 100_000
	// Each server has a data directory of its own: a daemon and an
	// in-process server cannot share one.
	seeded := func() string {
		dataDir := b.TempDir()
		st, err := persist.Open(dataDir, persist.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if err := seed.Children(st, seam.ParentRef{Principal: "local"}, n); err != nil {
			b.Fatal(err)
		}
		if err := st.Close(); err != nil {
			b.Fatal(err)
		}
		return dataDir
	}
	floor := startEchoFloor(b)
	type server struct {
		name    string
		s       *instance
		cursors []string
		ds      []time.Duration
	}
	servers := []server{
		{name: "relayed", s: start(b, nil, serverOpts{dataDir: seeded(), args: []string{"--log-level", "error"}})},
		{name: "inprocess", s: start(b, nil, serverOpts{dataDir: seeded(), args: []string{"--log-level", "error", "--no-daemon"}})},
	}
	ctx := context.Background()
	page := func(s *instance, cursor string) (next string, size int) {
		req := mcp.CallToolRequest{}
		req.Params.Name = "list_agents"
		// The seeded children's cwd is not the session's project.
		args := map[string]any{"all_projects": true}
		if cursor != "" {
			args["cursor"] = cursor
		}
		req.Params.Arguments = args
		res, err := s.client.CallTool(ctx, req)
		if err != nil || res.IsError {
			b.Fatalf("list_agents: %v %+v", err, res)
		}
		raw, err := json.Marshal(res)
		if err != nil {
			b.Fatal(err)
		}
		var sc struct {
			Agents     []json.RawMessage `json:"agents"`
			NextCursor string            `json:"next_cursor"`
		}
		if err := json.Unmarshal(mustJSON(b, res.StructuredContent), &sc); err != nil {
			b.Fatal(err)
		}
		if len(sc.Agents) != 50 {
			b.Fatalf("a page of %d rows, want 50", len(sc.Agents))
		}
		return sc.NextCursor, len(raw)
	}
	maxBytes := 0
	find := func(s *instance) []string {
		cursors, cur := []string{""}, ""
		for i := 1; ; i++ {
			next, size := page(s, cur)
			maxBytes = max(maxBytes, size)
			if next == "" {
				return append(cursors, cur)
			}
			if i == n/50/2 {
				cursors = append(cursors, next)
			}
			cur = next
		}
	}
	for i := range servers {
		servers[i].cursors = find(servers[i].s)
	}
	echo := mcp.CallToolRequest{}
	echo.Params.Name = "echo"
	echo.Params.Arguments = map[string]any{"text": "go"}
	var floorDs []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := floor.CallTool(ctx, echo); err != nil {
			b.Fatal(err)
		}
		floorDs = append(floorDs, time.Since(t0))
		for i := range servers {
			for _, c := range servers[i].cursors {
				t0 := time.Now()
				page(servers[i].s, c)
				servers[i].ds = append(servers[i].ds, time.Since(t0))
			}
		}
	}
	b.StopTimer()
	f := median(floorDs)
	b.ReportMetric(float64(f.Microseconds())/1000, "floor-p50-ms")
	for _, s := range servers {
		m := median(s.ds)
		b.ReportMetric(float64(m.Microseconds())/1000, s.name+"-page-p50-ms")
		b.ReportMetric(float64(m)/float64(f), s.name+"-x-floor")
	}
	b.ReportMetric(float64(maxBytes), "max-page-bytes")
}

func mustJSON(tb testing.TB, v any) []byte {
	raw, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}
