//go:build postgres

package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/mcp-subagent/mcp-subagent/internal/pgtest"
	"github.com/mcp-subagent/mcp-subagent/internal/seed"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// A page of a listing reads about its own rows, however many siblings
// they have, in the plans PostgreSQL settles on once the table is
// analyzed: a custom plan and the generic one a prepared statement
// switches to. All children under one parent is the shape that made the
// planner scan every child per listed row (the statistics say any
// parent has them all), and a generic plan read every row before the
// page's key.
func TestAListingPageReadsItsOwnRows(t *testing.T) {
	const n, page = 3000, 50
	ctx := context.Background()
	dsn := pgtest.Shared(t).DSN(t)
	s, err := Open(ctx, dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	root := seam.ParentRef{Principal: "p"}
	if err := seed.Children(s, root, n); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "analyze"); err != nil {
		t.Fatal(err)
	}
	last := fmt.Sprintf("agent-%016d", n-page-1)
	var lastNS int64
	if err := conn.QueryRow(ctx, `select created_ns from children where id = $1`, last).Scan(&lastNS); err != nil {
		t.Fatal(err)
	}
	addr := root.Address()
	for _, q := range []struct{ name, sql, args string }{
		{"listings, first page", listingsFirst, fmt.Sprintf("'%s', %d", addr, page)},
		{"listings, last page", listingsAfter, fmt.Sprintf("'%s', %d, %d, '%s'", addr, page, lastNS, last)},
		{"descendants, first page", descendantsFirst, fmt.Sprintf("'%s', %d", addr, page)},
		{"descendants, last page", descendantsAfter, fmt.Sprintf("'%s', %d, %d, '%s'", addr, page, lastNS, last)},
	} {
		types := "text, int"
		if strings.Contains(q.sql, "$4") {
			types += ", bigint, text"
		}
		if _, err := conn.Exec(ctx, "prepare p("+types+") as "+q.sql); err != nil {
			t.Fatal(err)
		}
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			if _, err := conn.Exec(ctx, "set plan_cache_mode = "+mode); err != nil {
				t.Fatal(err)
			}
			var out []struct {
				Plan struct {
					Rows int   `json:"Actual Rows"`
					Hit  int64 `json:"Shared Hit Blocks"`
					Read int64 `json:"Shared Read Blocks"`
				}
			}
			var raw []byte
			if err := conn.QueryRow(ctx, "explain (analyze, buffers, format json) execute p("+q.args+")").Scan(&raw); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
				t.Fatalf("%s: the plan does not decode: %v\n%s", q.name, err, raw)
			}
			p := out[0].Plan
			// A page's rows and the index pages leading to them: a few
			// blocks each (about 200, some runs 201), far from the 2,000
			// to 14,000 of a scan.
			if p.Rows != page || p.Hit+p.Read > 10*page {
				t.Errorf("%s, %s: %d rows reading %d blocks, want %d rows in at most %d\n%s", q.name, mode, p.Rows, p.Hit+p.Read, page, 10*page, raw)
			}
		}
		if _, err := conn.Exec(ctx, "deallocate p"); err != nil {
			t.Fatal(err)
		}
	}
}
