//go:build postgres

package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/mcp-subagent/mcp-subagent/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func query(t *testing.T, dsn string) (int, error) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, "select count(*) from t").Scan(&n)
	return n, err
}

// Each DSN is its own database: a table made in one is not in another.
func TestSharedDatabasesAreFresh(t *testing.T) {
	s := pgtest.Shared(t)
	a, b := s.DSN(t), s.DSN(t)
	if a == b {
		t.Fatalf("two DSNs are the same: %s", a)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "create table t (x int); insert into t values (1)"); err != nil {
		t.Fatal(err)
	}
	if n, err := query(t, a); err != nil || n != 1 {
		t.Fatalf("count in a = %d, %v", n, err)
	}
	if _, err := query(t, b); err == nil {
		t.Fatal("the table made in one database is visible in another")
	}
}

// A stopped server refuses connections; started again it has its data.
func TestStopStart(t *testing.T) {
	s := pgtest.New(t)
	dsn := s.DSN(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "create table t (x int); insert into t values (1), (2)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	s.Stop(t)
	if _, err := query(t, dsn); err == nil {
		t.Fatal("a stopped server answered")
	}
	s.Start(t)
	if n, err := query(t, dsn); err != nil || n != 2 {
		t.Fatalf("after a restart count = %d, %v; want 2", n, err)
	}
}
