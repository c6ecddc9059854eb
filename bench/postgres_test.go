//go:build postgres

// The PostgreSQL store's benchmarks (issue 26): each starts a throwaway
// server of its own (internal/pgtest), so run them one at a time, e.g.
//
//	go test -tags postgres -run XXX -bench PGDelegation -benchtime 1x ./bench/

package bench

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/internal/pgtest"
	"github.com/mcp-subagent/mcp-subagent/llm/openai"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist"
	"github.com/mcp-subagent/mcp-subagent/persist/pgstore"
	"github.com/mcp-subagent/mcp-subagent/providers/spawn"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

var quiet = slog.New(slog.DiscardHandler)

// openDSN opens a store on the database dsn names, closed when the
// benchmark ends.
func openDSN(b *testing.B, dsn string) *pgstore.Store {
	st, err := pgstore.Open(context.Background(), dsn, quiet)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return st
}

// BenchmarkPGDelegation compares foreground delegations on the PostgreSQL
// store with the same on bbolt, in one run: a manager on each, spawn
// children on one fake model (its own process) answering at once, so what
// is measured is the manager and its store. Each round (after one of
// warm-up) runs, on each store in turn (the first alternating), N
// sequential delegations for their latency (MCP_SUBAGENT_BENCH_CALLS,
// default 200) and then K at once for the throughput
// (MCP_SUBAGENT_BENCH_CONCURRENT, default 100), for
// MCP_SUBAGENT_BENCH_ROUNDS rounds (default 3). Reported: each store's
// p50/p99 and children a second, PostgreSQL's over bbolt's, and the
// median round trip of a bare statement to the server (the floor).
func BenchmarkPGDelegation(b *testing.B) {
	calls := envInt(b, "MCP_SUBAGENT_BENCH_CALLS", 200)
	concurrent := envInt(b, "MCP_SUBAGENT_BENCH_CONCURRENT", 100)
	rounds := envInt(b, "MCP_SUBAGENT_BENCH_ROUNDS", 3)
	fakeURL, hc, stopFake := startFakeModel(b, "prompt", false)
	b.Cleanup(stopFake)
	client := openai.New(transport.Config{BaseURL: fakeURL, APIKey: "k", Model: "fake-model", HTTPClient: hc})
	bolt, err := persist.Open(b.TempDir(), persist.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = bolt.Close() })
	type arm struct {
		name string
		m    *manager.Manager
		lats []time.Duration
		wall time.Duration // of the concurrent bursts
		n    int           // children in them
	}
	arms := []*arm{{name: "bbolt"}, {name: "pg"}}
	dsn := pgtest.New(b).DSN(b)
	floor := roundTrip(b, dsn)
	for i, st := range []seam.Store{bolt, openDSN(b, dsn)} {
		// No admission cap: the burst measures children running at once.
		m := manager.New(manager.Options{Store: st, MaxRunningChildren: -1, Logger: quiet})
		if err := m.Register(spawn.New(spawn.Options{Client: client, Model: "fake-model"})); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = m.Close(context.Background()) })
		arms[i].m = m
	}
	cwd := b.TempDir()
	run := func(a *arm, record bool) {
		for range calls {
			lat, err := foreground(a.m, cwd, "sleep 0")
			if err != nil {
				b.Fatal(err)
			}
			if record {
				a.lats = append(a.lats, lat)
			}
		}
		t0 := time.Now()
		var wg sync.WaitGroup
		for range concurrent {
			wg.Go(func() {
				if _, err := foreground(a.m, cwd, "sleep 0"); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		if record {
			a.wall += time.Since(t0)
			a.n += concurrent
		}
	}
	for _, a := range arms { // warm-up: connections, code, the first residents
		run(a, false)
	}
	for r := range rounds {
		for i := range arms {
			run(arms[(i+r)%len(arms)], true)
		}
	}
	rate := func(a *arm) float64 { return float64(a.n) / a.wall.Seconds() }
	for _, a := range arms {
		b.ReportMetric(pct(a.lats, 50), a.name+"-p50-ms")
		b.ReportMetric(pct(a.lats, 99), a.name+"-p99-ms")
		b.ReportMetric(rate(a), a.name+"-children/s")
	}
	bo, pg := arms[0], arms[1]
	b.ReportMetric(pct(pg.lats, 50)/pct(bo.lats, 50), "pg/bbolt-p50")
	b.ReportMetric(pct(pg.lats, 99)/pct(bo.lats, 99), "pg/bbolt-p99")
	b.ReportMetric(rate(pg)/rate(bo), "pg/bbolt-children/s")
	b.ReportMetric(floor, "pg-roundtrip-ms")
}

// connect is a connection of its own to dsn, closed when the benchmark
// ends.
func connect(b *testing.B, dsn string) *pgx.Conn {
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// roundTrip is the median of 200 `select 1` on one connection to dsn, in
// milliseconds: the floor under each of a store write's statements, which
// the load on this machine moves.
func roundTrip(b *testing.B, dsn string) float64 {
	ctx := context.Background()
	conn := connect(b, dsn)
	ds := make([]time.Duration, 200)
	for i := range ds {
		t := time.Now()
		if _, err := conn.Exec(ctx, "select 1"); err != nil {
			b.Fatal(err)
		}
		ds[i] = time.Since(t)
	}
	return pct(ds, 50)
}

// BenchmarkPGListPage lists pages of 50 (list_agents' default) of
// 100,000 stored children of one parent, at the start, the middle and the
// end, on PostgreSQL and, beside it, on bbolt. The PostgreSQL tables are
// analyzed once seeded, as autovacuum does within minutes, so the plans
// are those a running server settles on (with every child under one
// parent, the statistics once made the planner scan all of them for each
// listed row; persist/pgstore stores has_children since).
func BenchmarkPGListPage(b *testing.B) {
	places, rows := []string{"first", "middle", "last"}, []int{0, listN / 2, listN - 50}
	b.Run("bbolt", func(b *testing.B) { benchListPage(b, openStore(b), nil, places, rows) })
	b.Run("pgstore", func(b *testing.B) {
		dsn := pgtest.New(b).DSN(b)
		analyze := func() {
			if _, err := connect(b, dsn).Exec(context.Background(), "analyze"); err != nil {
				b.Fatal(err)
			}
		}
		benchListPage(b, &countingStore{Store: openDSN(b, dsn)}, analyze, places, rows)
	})
}

// The takeover benchmark's fake model tells these prompts apart: the
// first turn, which the model holds until instance A dies, and the
// follow-up queued behind it, which instance B runs after the takeover.
const (
	holdPrompt  = "hold"
	afterPrompt = "after the takeover"
)

func init() { helpers["pg-instance-a"] = instanceA }

// instanceA is BenchmarkPGTakeover's instance A, in a process of its own
// so that it can be killed: a manager (owner "instance-a", lease
// $BENCH_LEASE) on the PostgreSQL store at $BENCH_PG_DSN, its spawn
// children on the fake model at $BENCH_FAKE_URL. It starts a child whose
// turn the model holds, queues a follow-up behind it (both committed when
// the calls return), prints the child's id and waits for its stdin to
// close, or to be killed.
func instanceA() {
	ctx := context.Background()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "instance A:", err)
		os.Exit(1)
	}
	lease, err := time.ParseDuration(os.Getenv("BENCH_LEASE"))
	if err != nil {
		fail(err)
	}
	st, err := pgstore.Open(ctx, os.Getenv("BENCH_PG_DSN"), quiet)
	if err != nil {
		fail(err)
	}
	client := openai.New(transport.Config{BaseURL: os.Getenv("BENCH_FAKE_URL"), APIKey: "k", Model: "fake-model", RetryBaseDelay: time.Millisecond})
	m := manager.New(manager.Options{Store: st, OwnerID: "instance-a", LeaseTTL: lease, Logger: quiet})
	if err := m.Register(spawn.New(spawn.Options{Client: client, Model: "fake-model"})); err != nil {
		fail(err)
	}
	s, err := m.StartContinuable(ctx, "spawn", seam.StartRequest{Label: "takeover", Prompt: holdPrompt, Parent: root, Cwd: os.TempDir()}, false)
	if err != nil {
		fail(err)
	}
	if _, err := m.Followup(ctx, root, s.ChildID, afterPrompt, false); err != nil {
		fail(err)
	}
	fmt.Println(s.ChildID)
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// BenchmarkPGTakeover is the failover a user of several instances sees:
// instance A (a process of its own) holds a child mid-turn, a follow-up
// queued behind the turn, when it is killed with SIGKILL; instance B (a
// manager in this process, on the same database, past its Recover so it
// sweeps at each lease renewal) takes the child over once A's lease runs
// out. Both have the lease MCP_SUBAGENT_BENCH_LEASE (default 10s).
// Reported, from the kill: B's notice closing the cut-off turn (takeover),
// B's claim of the child seen in the store (claimed) and the queued
// follow-up's model request from B (resumed), and resumed over the lease.
// Each iteration is one takeover on a fresh database; the child then lists
// as running at B, and its follow-up completes there. The instances are
// managers, not `serve --http` servers: the config has no
// cluster.lease_seconds yet to give a server another lease than 30 s.
func BenchmarkPGTakeover(b *testing.B) {
	lease, err := time.ParseDuration(cmp.Or(os.Getenv("MCP_SUBAGENT_BENCH_LEASE"), "10s"))
	if err != nil || lease <= 0 {
		b.Fatalf("MCP_SUBAGENT_BENCH_LEASE=%q: want a duration such as 10s", os.Getenv("MCP_SUBAGENT_BENCH_LEASE"))
	}
	srv := pgtest.New(b)
	var takeover, claimed, resumed time.Duration
	for b.Loop() {
		t, c, r := takeoverOnce(b, srv, lease)
		takeover, claimed, resumed = takeover+t, claimed+c, resumed+r
	}
	n := float64(b.N)
	b.ReportMetric(lease.Seconds(), "lease-s")
	b.ReportMetric(takeover.Seconds()/n, "takeover-s")
	b.ReportMetric(claimed.Seconds()/n, "claimed-s")
	b.ReportMetric(resumed.Seconds()/n, "resumed-s")
	b.ReportMetric(resumed.Seconds()/n/lease.Seconds(), "resumed/lease")
}

// takeoverOnce runs one takeover (BenchmarkPGTakeover) on a fresh
// database of srv and returns its three times from the kill.
func takeoverOnce(b *testing.B, srv *pgtest.Server, lease time.Duration) (takeover, claimed, resumed time.Duration) {
	ctx := context.Background()
	held, after, release := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{})
	fake, client := fakeClient(b, func(_ int, req fakeopenai.Request) fakeopenai.Reply {
		switch req.LastUserText() {
		case holdPrompt: // until A dies and the request with it
			signal(held)
			return fakeopenai.Reply{Text: "A's answer", Delay: time.Hour}
		case afterPrompt: // held until B's residency is checked
			signal(after)
			<-release
		}
		return fakeopenai.Reply{Text: "done"}
	})
	// Released before the fake closes, which waits for its requests.
	defer fake.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	dsn := srv.DSN(b)

	st, err := pgstore.Open(ctx, dsn, quiet)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	notices := make(chan seam.Notice, 8)
	// B's log, shown when the takeover does not come.
	logB, err := os.CreateTemp(b.TempDir(), "instance-b-*.log")
	if err != nil {
		b.Fatal(err)
	}
	defer logB.Close()
	mb := manager.New(manager.Options{Store: st, OwnerID: "instance-b", LeaseTTL: lease,
		Logger:   slog.New(slog.NewTextHandler(logB, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnNotice: func(_ string, n seam.Notice) { notices <- n }})
	defer mb.Close(ctx)
	if err := mb.Register(spawn.New(spawn.Options{Client: client, Model: "fake-model"})); err != nil {
		b.Fatal(err)
	}
	if err := mb.Recover(ctx); err != nil { // B sweeps from now on, at each renewal
		b.Fatal(err)
	}

	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	a := exec.Command(self)
	a.Env = append(os.Environ(), "BENCH_HELPER=pg-instance-a", "BENCH_PG_DSN="+dsn, "BENCH_FAKE_URL="+fake.URL(), "BENCH_LEASE="+lease.String())
	a.Stderr = os.Stderr
	stdin, _ := a.StdinPipe()
	defer stdin.Close()
	stdout, _ := a.StdoutPipe()
	if err := a.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = a.Process.Kill(); _ = a.Wait() }() // on a failure before the kill
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("instance A printed no child id: %v", err)
	}
	id := strings.TrimSpace(line)
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		b.Fatal("instance A's child never reached the model")
	}
	// The turn is recorded once its prompt has left the stored inbox (in
	// the commit of the turn's first events), the follow-up alone queued:
	// killed before that, A leaves the prompt queued and B runs it again.
	recorded := time.Now().Add(30 * time.Second)
	for q := []seam.QueuedMessage(nil); len(q) != 1 || q[0].Text != afterPrompt; time.Sleep(5 * time.Millisecond) {
		if q, err = st.Queued(ctx, id); err != nil || time.Now().After(recorded) {
			b.Fatalf("A's turn not recorded within 30s: queued %+v, %v", q, err)
		}
	}
	if c, ok, err := st.ClaimOf(ctx, id); err != nil || !ok || c.Owner.ID != "instance-a" {
		b.Fatalf("before the kill, ClaimOf(%s) = %+v, %v, %v; want instance A's claim", id, c, ok, err)
	}

	t0 := time.Now()
	if err := a.Process.Kill(); err != nil {
		b.Fatal(err)
	}
	_ = a.Wait()
	// One loop polls the store and watches B's notices and the model, so
	// each time is when it was first seen (within the 5 ms poll).
	deadline := time.After(2*lease + 30*time.Second)
	for takeover == 0 || claimed == 0 || resumed == 0 {
		select {
		case n := <-notices:
			if n.ChildID == id && n.StopReason == agent.StopAborted && takeover == 0 {
				takeover = time.Since(t0)
			}
		case <-after:
			resumed = time.Since(t0)
		case <-deadline:
			log, _ := os.ReadFile(logB.Name())
			b.Fatalf("after %s (lease %s): takeover %s, claimed %s, resumed %s; B's log:\n%s", time.Since(t0).Round(time.Millisecond), lease, takeover, claimed, resumed, log)
		case <-time.After(5 * time.Millisecond):
		}
		if claimed == 0 {
			if c, ok, err := st.ClaimOf(ctx, id); err == nil && ok && c.Owner.ID == "instance-b" {
				claimed = time.Since(t0)
			}
		}
	}

	// The child is resident at B, in its follow-up's turn; the follow-up
	// then completes there.
	p, err := mb.List(root, manager.ListQuery{})
	if err != nil || len(p.Rows) != 1 || p.Rows[0].ID != id || p.Rows[0].Status != manager.StatusRunning {
		b.Fatalf("B lists %+v, %v; want %s running", p.Rows, err, id)
	}
	close(release)
	for {
		select {
		case n := <-notices:
			if n.ChildID == id && n.StopReason == agent.StopCompleted && strings.Contains(n.Text, "done") {
				return takeover, claimed, resumed
			}
		case <-time.After(30 * time.Second):
			b.Fatal("B did not complete the follow-up")
		}
	}
}

// signal is a send that never blocks: a retried request signals once.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
