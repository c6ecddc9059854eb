//go:build postgres

package pgstore_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/pgtest"
	"github.com/mcp-subagent/mcp-subagent/persist/pgstore"
	"github.com/mcp-subagent/mcp-subagent/persist/storetest"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// open opens a store on a fresh database of the package's server.
func open(t *testing.T) *pgstore.Store {
	t.Helper()
	s, err := pgstore.Open(context.Background(), pgtest.Shared(t).DSN(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) seam.Store { return open(t) })
}

// Two handles of one database, as two instances have: a wake-up crosses
// from the writer's commit to the watcher's connection, and a session one
// records is live at the other.
func TestShared(t *testing.T) {
	open := func(t *testing.T) (seam.Store, seam.Store) {
		dsn := pgtest.Shared(t).DSN(t)
		var hs [2]seam.Store
		for i := range hs {
			s, err := pgstore.Open(context.Background(), dsn, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			hs[i] = s
		}
		return hs[0], hs[1]
	}
	storetest.RunShared(t, open)
	storetest.RunSessions(t, open)
}
