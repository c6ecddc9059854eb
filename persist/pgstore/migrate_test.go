//go:build postgres

package pgstore

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/mcp-subagent/mcp-subagent/internal/pgtest"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// A database of schema 3, children stored, opens migrated to this
// build's schema with each child's has_children filled from the rows
// already there.
func TestMigrationFromSchema3FillsHasChildren(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Shared(t).DSN(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range append(migrations[:3:3],
		`create table mcp_subagent_schema (version int not null)`,
		`insert into mcp_subagent_schema (version) values (3)`,
		`insert into children (id, parent, created_ns, header, descriptor) values
			('a', 'principal:local', 1, '{"id":"a"}', '{}'),
			('k', 'a', 2, '{"id":"k"}', '{}'),
			('leaf', 'principal:local', 3, '{"id":"leaf"}', '{}')`) {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s, err := Open(ctx, dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var v int
	if err := conn.QueryRow(ctx, `select version from mcp_subagent_schema`).Scan(&v); err != nil || v != SchemaVersion {
		t.Fatalf("schema version %d, %v; want %d", v, err, SchemaVersion)
	}
	ls, err := s.Listings(ctx, seam.PrincipalAddress("local"), seam.Page{})
	if err != nil || len(ls) != 2 {
		t.Fatalf("Listings = %+v, %v", ls, err)
	}
	if !ls[0].HasChildren || ls[1].HasChildren {
		t.Errorf("after the migration: a has children %v, leaf %v; want true, false", ls[0].HasChildren, ls[1].HasChildren)
	}
	var has bool
	if err := conn.QueryRow(ctx, `select has_children from children where id = 'a'`).Scan(&has); err != nil || !has {
		t.Errorf("a's stored has_children = %v, %v; want true", has, err)
	}
}
