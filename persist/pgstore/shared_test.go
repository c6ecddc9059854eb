//go:build postgres

package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcp-subagent/mcp-subagent/internal/pgtest"
	"github.com/mcp-subagent/mcp-subagent/persist/pgstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

var ctx = context.Background()

func header(id string) seam.Header {
	return seam.Header{ID: id, Parent: "principal:local", Principal: "local", Depth: 1, DepthCap: 3,
		Mode: seam.ModeContinuable, Provider: "spawn", CreatedAt: time.Now()}
}

func descriptor() seam.Descriptor {
	return seam.Descriptor{Version: seam.DescriptorVersion, Mode: seam.ModeContinuable, Provider: "spawn"}
}

// Two instances on one database: a takeover by one fences the other.
func TestTwoInstancesFence(t *testing.T) {
	dsn := pgtest.Shared(t).DSN(t)
	a, err := pgstore.Open(ctx, dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := pgstore.Open(ctx, dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	oa := seam.Owner{ID: "instance-a", Expires: time.Now().Add(time.Hour)}
	if err := a.WriteChild(ctx, "c", seam.ChildWrite{Create: &seam.NewChild{Header: header("c"), Descriptor: descriptor()}, Claim: &oa}); err != nil {
		t.Fatal(err)
	}
	ob := seam.Owner{ID: "instance-b", Expires: time.Now().Add(time.Hour)}
	if err := b.WriteChild(ctx, "c", seam.ChildWrite{Claim: &ob}); !errors.Is(err, seam.ErrOwned) {
		t.Fatalf("b's claim of a's live child = %v, want ErrOwned", err)
	}
	// a's lease runs out (it stops renewing); b takes the child over.
	if err := a.Renew(ctx, seam.Owner{ID: oa.ID, Expires: time.Now().Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteChild(ctx, "c", seam.ChildWrite{Claim: &ob}); err != nil {
		t.Fatalf("b's takeover = %v", err)
	}
	c, ok, err := a.ClaimOf(ctx, "c")
	if err != nil || !ok || c.Owner.ID != ob.ID || c.Epoch != 2 {
		t.Fatalf("a reads the claim as %+v, %v, %v; want b's at epoch 2", c, ok, err)
	}
	ev := seam.ChildWrite{Fence: &seam.Fence{Owner: oa.ID, Epoch: 1}, Enqueue: []seam.QueuedMessage{{ID: "late"}}}
	if err := a.WriteChild(ctx, "c", ev); !errors.Is(err, seam.ErrOwned) {
		t.Fatalf("a's fenced write after b's takeover = %v, want ErrOwned", err)
	}
	if q, _ := b.Queued(ctx, "c"); len(q) != 0 {
		t.Errorf("b sees %v queued by a's refused write", q)
	}
}

// A database whose schema is newer than the build is refused, saying so.
func TestNewerSchemaRefused(t *testing.T) {
	dsn := pgtest.Shared(t).DSN(t)
	s, err := pgstore.Open(ctx, dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `update mcp_subagent_schema set version = version + 1`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	_, err = pgstore.Open(ctx, dsn, nil)
	if err == nil || !strings.Contains(err.Error(), "newer than this build") {
		t.Fatalf("Open of a newer schema = %v, want a refusal naming it", err)
	}
	// Opening again at the build's version applies nothing and works.
	conn, _ = pgx.Connect(ctx, dsn)
	conn.Exec(ctx, `update mcp_subagent_schema set version = version - 1`)
	conn.Close(ctx)
	s, err = pgstore.Open(ctx, dsn, nil)
	if err != nil {
		t.Fatalf("reopening at the build's schema: %v", err)
	}
	s.Close()
}

const secret = "s3cr3t-pw-91f"

// A password in the store URL appears in no error and no log line.
func TestPasswordNeverShown(t *testing.T) {
	srv := pgtest.Shared(t)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	for _, dsn := range []string{
		"postgres://postgres:" + secret + "@/nodb?host=/nonexistent-dir-for-pgstore",
		"postgresql://postgres:" + secret + "@localhost:notaport/db",
		"postgres://postgres@/nodb?host=/nonexistent-dir-for-pgstore&password=" + secret,
		"host=/nonexistent-dir-for-pgstore user=postgres password=" + secret + " dbname=x",
		"host=/nonexistent-dir-for-pgstore user=postgres password='" + secret + "' dbname=x connect_timeout=nope",
	} {
		_, err := pgstore.Open(ctx, dsn, log)
		if err == nil {
			t.Fatalf("Open(%s) succeeded", pgstore.Redact(dsn))
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error shows the password: %v", err)
		}
		if r := pgstore.Redact(dsn); strings.Contains(r, secret) || !strings.Contains(r, "xxxxx") {
			t.Errorf("Redact = %q", r)
		}
	}
	// A store that opens (trust ignores the password) logs the URL redacted.
	dsn := "postgres://postgres:" + secret + "@/" + dbName(t, srv.DSN(t)) + "?host=" + srv.SocketDir()
	s, err := pgstore.Open(ctx, dsn, log)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if strings.Contains(logs.String(), secret) || !strings.Contains(logs.String(), "xxxxx") {
		t.Errorf("logs show the password, or no redacted URL:\n%s", logs.String())
	}
}

func dbName(t *testing.T, dsn string) string {
	for _, f := range strings.Fields(dsn) {
		if v, ok := strings.CutPrefix(f, "dbname="); ok {
			return v
		}
	}
	t.Fatalf("no dbname in %s", dsn)
	return ""
}

// The store outlives a restart of the server: a call while it is down
// fails, and the pool reconnects once it is back.
func TestServerRestart(t *testing.T) {
	srv := pgtest.New(t)
	s, err := pgstore.Open(ctx, srv.DSN(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Create: &seam.NewChild{Header: header("c"), Descriptor: descriptor()}}); err != nil {
		t.Fatal(err)
	}
	srv.Stop(t)
	down, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.Header(down, "c"); err == nil {
		t.Fatal("a read while the server is down succeeded")
	}
	srv.Start(t)
	if h, err := s.Header(ctx, "c"); err != nil || h.ID != "c" {
		t.Fatalf("Header after the restart = %+v, %v", h, err)
	}
}
