//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/persist/pgstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// doctor --store URL checks a PostgreSQL store against a real server: the
// schema's version, every owner's lease by the database's clock with its
// number of claims, the stale claims by child and epoch, and the root
// sessions with their owner's liveness; the password never shows.
func TestDoctorStore(t *testing.T) {
	url := pgURL(t)
	doctor := func(url string) (int, string) {
		t.Helper()
		code, out, errs := runOut(t, 60*time.Second, nil, "doctor", "--data-dir", t.TempDir(), "--store", url)
		all := out + errs
		if strings.Contains(all, doctorSecret) {
			t.Fatalf("doctor shows the password:\n%s", all)
		}
		return code, all
	}

	// Before any server ran on it: no schema yet, nothing else.
	if code, out := doctor(url); code != 0 || !strings.Contains(out, "schema: none yet") || !strings.Contains(out, "owners (0)") || !strings.Contains(out, "root sessions (0)") {
		t.Fatalf("doctor of an empty database = %d:\n%s", code, out)
	}

	ctx := context.Background()
	s, err := pgstore.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	live := seam.Owner{ID: "host-a-1", Expires: time.Now().Add(time.Hour)}
	dead := seam.Owner{ID: "host-b-2", Expires: time.Now().Add(time.Hour)}
	for i, c := range []struct {
		id    string
		owner *seam.Owner
	}{{"agent-a1", &live}, {"agent-a2", &live}, {"agent-b1", &dead}, {"agent-free", nil}} {
		h := seam.Header{ID: c.id, Parent: "principal:local", Principal: "local", Depth: 1, DepthCap: 3, Mode: seam.ModeContinuable,
			Provider: "spawn", CreatedAt: time.Now().Add(time.Duration(i) * time.Second)}
		d := seam.Descriptor{Version: seam.DescriptorVersion, Mode: seam.ModeContinuable, Provider: "spawn"}
		if err := s.WriteChild(ctx, c.id, seam.ChildWrite{Create: &seam.NewChild{Header: h, Descriptor: d}, Claim: c.owner}); err != nil {
			t.Fatal(err)
		}
	}
	// A session connected at each; host-b-2's goes stale with its lease.
	for _, ss := range []seam.Session{{ID: "sess-1", Principal: "alice", Owner: live}, {ID: "sess-2", Principal: "bob", Owner: dead}} {
		if err := s.OpenSession(ctx, ss); err != nil {
			t.Fatal(err)
		}
	}
	// host-b-2 stops renewing: its lease runs out by the database's clock.
	if err := s.Renew(ctx, seam.Owner{ID: dead.ID, Expires: time.Now().Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	code, out := doctor(url)
	t.Logf("doctor --store:\n%s", out)
	if code != 0 {
		t.Fatalf("doctor = %d:\n%s", code, out)
	}
	for _, want := range []string{
		"store: PostgreSQL postgres://postgres:xxxxx@",
		"schema: version " + itoa(pgstore.SchemaVersion) + ", this build's",
		"database clock: ",
		"owners (2):",
		"stale claims (1)",
		"root sessions (2):",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor's output lacks %q:\n%s", want, out)
		}
	}
	for _, re := range []string{
		`(?m)^  host-a-1 +lease until \S+ \(\S+ from now\) +live +2 claims$`,
		`(?m)^  host-b-2 +lease until \S+ \(\S+ ago\) +expired +1 claims$`,
		`(?m)^  agent-b1 +owner host-b-2 +epoch 1$`,
		`(?m)^  alice +session sess-1 +at host-a-1 +live$`,
		`(?m)^  bob +session sess-2 +at host-b-2 +stale \(its owner's lease expired\)$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("doctor's output has no line matching %s:\n%s", re, out)
		}
	}
	if stale := out[strings.Index(out, "stale claims"):]; strings.Contains(stale, "agent-a1") || strings.Contains(stale, "agent-free") {
		t.Errorf("a live or unclaimed child is listed as stale:\n%s", out)
	}

	// A schema newer than the build fails the check, saying so.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `update mcp_subagent_schema set version = version + 1`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if code, out := doctor(url); code != 1 || !strings.Contains(out, "NEWER than this build's") {
		t.Errorf("doctor of a newer schema = %d:\n%s", code, out)
	}

	// An unreachable database fails, the password still hidden.
	if code, out := doctor("postgres://postgres:" + doctorSecret + "@/nodb?host=/nonexistent-dir-for-doctor"); code != 1 || !strings.Contains(out, "xxxxx") {
		t.Errorf("doctor of an unreachable database = %d:\n%s", code, out)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// The daemon of a server on a PostgreSQL store: daemon status shows the
// store, password redacted, and this instance's owner id, which is the
// owner doctor --store lists, live, once the instance has claimed a child.
func TestDaemonStatusShowsStoreAndOwner(t *testing.T) {
	url := pgURL(t)
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		return fakeopenai.Reply{Text: "done"}
	})
	defer fake.Close()
	s := start(t, fake, serverOpts{env: []string{"MCP_SUBAGENT_STORE=" + url}})
	ctx := testCtx(t)
	startBackground(t, s, ctx, "claims", "hello")

	out, err := exec.Command(binary, "daemon", "status", "--data-dir", s.dataDir).CombinedOutput()
	if err != nil {
		t.Fatalf("daemon status: %v\n%s", err, out)
	}
	if strings.Contains(string(out), doctorSecret) {
		t.Fatalf("daemon status shows the password:\n%s", out)
	}
	m := regexp.MustCompile(`(?m)^store: PostgreSQL postgres://postgres:xxxxx@\S+; this instance's owner id: (\S+)$`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("daemon status has no store line with the owner id:\n%s", out)
	}
	owner := string(m[1])
	code, dout, derr := runOut(t, 60*time.Second, nil, "doctor", "--data-dir", t.TempDir(), "--store", url)
	if code != 0 {
		t.Fatalf("doctor = %d: %s%s", code, dout, derr)
	}
	if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(owner) + ` +lease until .* live `).MatchString(dout) {
		t.Errorf("doctor does not list the daemon's owner %s as live:\n%s", owner, dout)
	}
}
