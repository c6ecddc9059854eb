// Package pgtest runs throwaway PostgreSQL servers for tests: a cluster in
// a temporary directory, reachable only on a unix socket in that directory
// (no TCP), with trust authentication for the user postgres.
//
// A package shares one server across its tests: it calls Main from its
// TestMain, and each test takes a fresh database of it with DSN. A test
// that stops and restarts the server takes its own with New, so it never
// pulls the server from under another test.
//
// The binaries are Debian's (package postgresql, /usr/lib/postgresql/N/bin)
// or those named by $MCP_SUBAGENT_PG_BIN. Without them a test skips with a
// message saying how to install them, and fails under CI=true. PostgreSQL
// refuses to run as root: as root the server runs as the user postgres
// (which the Debian package creates) through runuser.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server is one running (or stopped) throwaway cluster.
type Server struct {
	bin  string // directory of initdb, pg_ctl, postgres
	dir  string // the cluster's temp dir: data/ and the socket
	asPG bool   // run the binaries as the user postgres (we are root)

	mu      sync.Mutex
	running bool
}

var (
	mainCalled atomic.Bool
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
	dbSeq      atomic.Int64
)

// Main runs a package's tests (call it from TestMain) and then stops and
// removes the package's shared server, if a test started one.
func Main(m *testing.M) {
	mainCalled.Store(true)
	code := m.Run()
	if shared != nil {
		if err := shared.remove(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
	}
	os.Exit(code)
}

// Shared returns the package's shared server, starting it on first use.
// The package's TestMain must call Main, which removes it at the end.
func Shared(t testing.TB) *Server {
	t.Helper()
	if !mainCalled.Load() {
		t.Fatal("pgtest.Shared needs the package's TestMain to call pgtest.Main (it removes the shared server when the tests end)")
	}
	bin := findBin(t)
	sharedOnce.Do(func() { shared, sharedErr = start(bin) })
	if sharedErr != nil {
		t.Fatalf("pgtest: starting the shared PostgreSQL server: %v", sharedErr)
	}
	return shared
}

// New starts a server of the test's own, removed when the test ends: for
// a test that stops and restarts it.
func New(t testing.TB) *Server {
	t.Helper()
	s, err := start(findBin(t))
	if err != nil {
		t.Fatalf("pgtest: starting a PostgreSQL server: %v", err)
	}
	t.Cleanup(func() {
		if err := s.remove(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// DSN creates a fresh, empty database on s for the test and returns its
// connection string (key=value form). The database is dropped when the
// test ends, after the test's own cleanups (register a store's Close
// after calling DSN).
func (s *Server) DSN(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("test_%d_%d", os.Getpid(), dbSeq.Add(1))
	if err := s.exec(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		s.mu.Lock()
		running := s.running
		s.mu.Unlock()
		if !running {
			return // a stopped server's databases go with its directory
		}
		// FORCE: a connection a failed test left open must not keep it.
		if err := s.exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return s.dsn(name)
}

// SocketDir is the directory holding the server's unix socket (the host
// of a connection string).
func (s *Server) SocketDir() string { return s.dir }

func (s *Server) dsn(db string) string {
	return fmt.Sprintf("host=%s user=postgres dbname=%s sslmode=disable", s.dir, db)
}

func (s *Server) exec(ctx context.Context, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.dsn("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// Stop stops the server (fast shutdown: sessions are ended), waiting until
// it is down.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if err := s.stop("fast"); err != nil {
		t.Fatal(err)
	}
}

// Start starts a stopped server again, waiting until it accepts
// connections.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if err := s.startServer(); err != nil {
		t.Fatal(err)
	}
}

func (s *Server) stop(mode string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return nil
	}
	if out, err := s.run("pg_ctl", "-D", filepath.Join(s.dir, "data"), "-m", mode, "-w", "stop"); err != nil {
		return fmt.Errorf("pgtest: pg_ctl stop: %v\n%s", err, out)
	}
	s.running = false
	return nil
}

func (s *Server) startServer() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return nil
	}
	// No TCP at all; the socket lives in the cluster's own directory.
	opts := fmt.Sprintf("-k %s -c listen_addresses='' -c fsync=off", s.dir)
	if out, err := s.run("pg_ctl", "-D", filepath.Join(s.dir, "data"), "-o", opts, "-l", filepath.Join(s.dir, "log"), "-w", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		return fmt.Errorf("pgtest: pg_ctl start: %v\n%s\nserver log:\n%s", err, out, log)
	}
	s.running = true
	return nil
}

// remove stops the server at once and deletes its directory.
func (s *Server) remove() error {
	err := s.stop("immediate")
	if rerr := os.RemoveAll(s.dir); rerr != nil && err == nil {
		err = fmt.Errorf("pgtest: removing %s: %w", s.dir, rerr)
	}
	return err
}

// run runs one of the server's binaries, as postgres when we are root.
func (s *Server) run(name string, args ...string) ([]byte, error) {
	path := filepath.Join(s.bin, name)
	var cmd *exec.Cmd
	if s.asPG {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd.CombinedOutput()
}

func start(bin string) (*Server, error) {
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir, asPG: os.Geteuid() == 0}
	if s.asPG {
		if err := handToPostgres(dir); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	if out, err := s.run("initdb", "-D", filepath.Join(dir, "data"), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if err := s.startServer(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// handToPostgres gives dir to the user postgres and makes the path to it
// traversable, so the server (running as postgres) can write its data and
// socket there.
func handToPostgres(dir string) error {
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("pgtest: running as root needs the user postgres (Debian's postgresql package creates it): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return err
	}
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, fi.Mode().Perm()|0o001); err != nil {
				return fmt.Errorf("pgtest: making %s reachable by postgres: %w", d, err)
			}
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// findBin returns the directory of the PostgreSQL server binaries, or
// skips the test (fails it under CI=true).
func findBin(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("MCP_SUBAGENT_PG_BIN"); d != "" {
		if isExec(filepath.Join(d, "pg_ctl")) {
			return d
		}
		skipOrFail(t, fmt.Sprintf("MCP_SUBAGENT_PG_BIN=%s holds no pg_ctl", d))
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// The newest major version first.
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "pg_ctl")) {
			return d
		}
	}
	skipOrFail(t, "PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin or $MCP_SUBAGENT_PG_BIN); install them with `apt-get install postgresql`")
	return ""
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

func skipOrFail(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: missing PostgreSQL fails instead of skipping)", msg)
	}
	t.Skip(msg)
}
