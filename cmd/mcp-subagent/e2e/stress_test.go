//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
)

// The stress test's load: children started, follow-ups sent, and how many
// calls are in flight at once.
const (
	stressChildren  = 1000
	stressFollowups = 5000
	stressParallel  = 16
)

// 1,000 background children and 5,000 follow-ups (each its own marker
// text) spread over three instances on one PostgreSQL database — sent at
// the child's owner and, mostly, at the two others, which forward them
// through the store — while one instance is killed (-9) and restarted
// twice. Every follow-up an instance acknowledged reaches the model
// exactly once (a turn cut by the kill is closed, not re-run), one it did
// not acknowledge at most once; none is refused (a race between the
// instances makes a send wait, never refuses it) and one fails in transit
// only at the instance being killed; and the store never shows a child's claim
// change hands without a takeover (a new epoch), nor a journal with one
// turn inside another or a message in two turns.
func TestStressThreeInstancesWithKills(t *testing.T) {
	began := time.Now()
	url := pgURL(t)
	fake := newHeldModel(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	cl := &stressCluster{t: t, fake: fake.Server}
	for range 3 {
		cl.slots = append(cl.slots, cl.launch(clusterOpts(url)))
	}
	claims := watchClaims(t, ctx, url)
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())

	// The children, started round-robin at the three instances.
	ids := make([]string, stressChildren)
	stressRun(stressChildren, func(i int) {
		s := cl.at(i)
		res, err := stressCall(ctx, s, "subagent", map[string]any{"description": fmt.Sprintf("stress %d", i),
			"prompt": fmt.Sprintf("child-%d", i), "run_in_background": true})
		if err != nil || res.IsError {
			t.Errorf("starting child %d at %s: %v %s", i, s.url, err, textOr(res))
			return
		}
		var h handleSC
		decodeSC(t, res, &h)
		ids[i] = h.AgentID
	})
	if t.Failed() {
		t.FailNow()
	}
	started := time.Since(began)

	// The follow-ups, each to a child picked at random, at an instance
	// picked at random; one instance is killed and restarted twice while
	// they flow. The feeder holds back the last ones until both restarts
	// are done, so the kills land among sends and turns in flight.
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, seed))
	type send struct{ child, at int }
	plan := make([]send, stressFollowups)
	for k := range plan {
		plan[k] = send{rng.IntN(stressChildren), rng.IntN(3)}
	}
	var issued atomic.Int64
	var acked, refused, failed sync.Map // marker → child id; → error text
	restarted := make(chan struct{})
	jobs := make(chan int)
	go func() {
		defer close(jobs)
		for k := range plan {
			if k == stressFollowups-stressFollowups/10 {
				<-restarted
			}
			issued.Add(1)
			jobs <- k
		}
	}()
	var wg sync.WaitGroup
	for range stressParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range jobs {
				marker := fmt.Sprintf("follow-up %d", k)
				s := cl.at(plan[k].at)
				res, err := stressCall(ctx, s, "send_message", map[string]any{"subagent_id": ids[plan[k].child], "message": marker})
				var sent sentSC
				switch {
				case err != nil:
					failed.Store(marker, err.Error())
					if plan[k].at != 0 {
						t.Errorf("send_message of %q at instance %d, which is never killed, failed in transit: %v", marker, plan[k].at, err)
					}
				case res.IsError:
					refused.Store(marker, text(res))
				default:
					if decodeSC(t, res, &sent); sent.MessageID == "" {
						t.Errorf("send_message of %q acknowledged without a message id: %s", marker, text(res))
					}
					acked.Store(marker, ids[plan[k].child])
				}
			}
		}()
	}
	for round, at := range []int64{stressFollowups / 4, stressFollowups / 2} {
		if !waitFor(3*time.Minute, func() bool { return issued.Load() >= at }) {
			t.Fatalf("the follow-ups stalled at %d", issued.Load())
		}
		down := time.Now()
		cl.restart(0, clusterOpts(url), db)
		t.Logf("kill %d of instance 0 after %d follow-ups issued; its children taken over and it back %s later", round+1, at, time.Since(down).Round(time.Millisecond))
	}
	close(restarted)
	wg.Wait()
	sent := time.Since(began)

	// Everything admitted runs: the inboxes empty and every claim is
	// settled (a dead instance's children are taken over after its lease).
	var queued, claimed int
	if !waitFor(2*time.Minute, func() bool {
		return db.QueryRow(ctx, `select (select count(*) from inbox), (select count(*) from children where claim_owner is not null)`).Scan(&queued, &claimed) == nil &&
			queued == 0 && claimed == 0
	}) {
		t.Fatalf("%d messages still queued and %d children still claimed 2 minutes after the last follow-up", queued, claimed)
	}
	claims.stop()

	// Counted from the model's requests, and checked against the journals.
	st := openPG(t, url)
	journaledIn := map[string]int{} // user message → journals (turns) holding it
	cutInputs := map[string]bool{}  // user messages of turns that ended aborted
	for _, id := range ids {
		events, err := st.Events(ctx, id)
		if err != nil {
			t.Fatalf("the journal of %s: %v", id, err)
		}
		open := false
		var inputs []string
		for _, e := range events {
			switch {
			case e.Kind == agent.EventTurnStart:
				if open {
					t.Errorf("a turn of %s starts inside another (two owners writing): %q", id, inputs)
				}
				open, inputs = true, nil
			case e.Kind == agent.EventTurnEnd:
				if e.StopReason == agent.StopAborted {
					for _, in := range inputs {
						cutInputs[in] = true
					}
				}
				open = false
			case e.Message != nil && e.Message.Role == "user":
				inputs = append(inputs, e.Message.Content)
				journaledIn[e.Message.Content]++
			}
		}
		if open {
			t.Errorf("the journal of %s ends inside a turn, though the child settled", id)
		}
	}
	var nAcked, nRefused, nFailed, cutBeforeCall, unackedRan int
	var twice []string
	var suspects []string // children of messages that ran twice, whose logs tell how
	acked.Range(func(k, v any) bool {
		nAcked++
		m := k.(string)
		switch n := fake.count(m); {
		case n == 1:
		case n == 0 && cutInputs[m] && journaledIn[m] == 1:
			// Taken by a turn that the kill cut before its model call: the
			// turn is closed, not re-run.
			cutBeforeCall++
		default:
			twice = append(twice, fmt.Sprintf("%q: %d model requests, in %d journal turns", m, n, journaledIn[m]))
			if len(suspects) < 3 {
				suspects = append(suspects, v.(string))
			}
		}
		return true
	})
	unacked := func(k, _ any) bool {
		m := k.(string)
		if n := fake.count(m); n > 1 {
			twice = append(twice, fmt.Sprintf("%q (not acknowledged): %d model requests", m, n))
		} else if n == 1 {
			unackedRan++
		}
		return true
	}
	refused.Range(func(k, v any) bool { nRefused++; return unacked(k, v) })
	failed.Range(func(k, v any) bool { nFailed++; return unacked(k, v) })
	for m, n := range journaledIn {
		if n > 1 {
			twice = append(twice, fmt.Sprintf("%q journaled in %d turns", m, n))
		}
	}
	for i := range ids {
		if n := fake.count(fmt.Sprintf("child-%d", i)); n != 1 && !(n == 0 && cutInputs[fmt.Sprintf("child-%d", i)]) {
			twice = append(twice, fmt.Sprintf("child %d's first prompt: %d model requests", i, n))
		}
	}
	sort.Strings(twice)
	if len(twice) > 0 {
		t.Errorf("%d messages did not run exactly once, e.g.:\n%s", len(twice), strings.Join(twice[:min(len(twice), 20)], "\n"))
		for _, id := range suspects {
			t.Logf("the instances' log of %s:\n%s", id, cl.logOf(id))
		}
	}
	if nAcked < stressFollowups/2 {
		t.Errorf("only %d of %d follow-ups were acknowledged", nAcked, stressFollowups)
	}
	// Nothing here is a reason to refuse a send (the children stay, the
	// callers are their parents, the store stays up): a race between the
	// instances must make a send wait, never refuse it. A send fails in
	// transit only at the instance being killed (checked as they fail).
	if nRefused > 0 {
		t.Errorf("%d follow-ups were refused", nRefused)
	}
	if nFailed+nRefused > 0 {
		samples := []string{}
		add := func(k, v any) bool {
			if len(samples) < 5 {
				samples = append(samples, fmt.Sprintf("%s: %s", k, v))
			}
			return true
		}
		refused.Range(add)
		failed.Range(add)
		t.Logf("some unacknowledged sends, e.g.:\n%s", strings.Join(samples, "\n"))
		t.Logf("unacknowledged sends by cause:\n%s", strings.Join(sendCauses(&refused, &failed), "\n"))
	}
	t.Logf("%d children started in %s; %d follow-ups (%d acknowledged, %d refused, %d failed in transit, %d of those ran) sent by %s; "+
		"%d cut by a kill before their model call; %d model requests; claims sampled %d times (%d handoffs seen); settled after %s (seed %d)",
		stressChildren, started.Round(time.Millisecond), stressFollowups, nAcked, nRefused, nFailed, unackedRan, sent.Round(time.Millisecond),
		cutBeforeCall, len(fake.Requests()), claims.samples, claims.handoffs, time.Since(began).Round(time.Millisecond), seed)
	t.Logf("the instances logged %d takeovers of a child whose owner's lease expired, %d claims lost by a live owner, and %d model calls retried",
		cl.logged("took over a child whose owner's lease expired"), cl.logged("lost the claim of child"), cl.logged("chat completion failed, retrying"))
	if v := claims.violations(); len(v) > 0 {
		t.Errorf("the store showed a child claimed by two owners at one epoch, or an epoch going back:\n%s", strings.Join(v, "\n"))
	}
}

// stressCluster is the test's instances; one may be killed and restarted
// while calls go to the others.
type stressCluster struct {
	t     *testing.T
	fake  *fakeopenai.Server
	mu    sync.Mutex
	slots []*instance
	logs  []*syncBuffer // every instance's, in launch order
	down  int           // 1 + the slot being restarted; 0: none
}

func (c *stressCluster) launch(o serverOpts) *instance {
	s := start(c.t, c.fake, o)
	c.mu.Lock()
	c.logs = append(c.logs, s.stderr)
	c.mu.Unlock()
	return s
}

// logged counts the lines of every instance's log that contain s.
func (c *stressCluster) logged(s string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, l := range c.logs {
		n += strings.Count(l.String(), s)
	}
	return n
}

// logOf is what every instance, killed ones included, logged at info
// level or above about child id.
func (c *stressCluster) logOf(id string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for i, l := range c.logs {
		for _, line := range strings.Split(linesWith(l.String(), id), "\n") {
			if line != "" && !strings.Contains(line, `"level":"DEBUG"`) {
				out = append(out, fmt.Sprintf("[%d] %s", i, line))
			}
		}
	}
	return strings.Join(out, "\n")
}

// at is instance i, or the next one up while i is being restarted.
func (c *stressCluster) at(i int) *instance {
	c.mu.Lock()
	defer c.mu.Unlock()
	i %= len(c.slots)
	if c.down == i+1 {
		i = (i + 1) % len(c.slots)
	}
	return c.slots[i]
}

// restart kills instance i (-9), with calls to it in flight, and starts it
// again with the same configuration, data directory and workspace (a new
// process: a new owner id) once the other instances have taken over every
// child it held. (A restart's Recover that closes them first leaves their
// queued follow-ups for the next send; the sweep runs them.)
func (c *stressCluster) restart(i int, o serverOpts, db *pgx.Conn) {
	c.mu.Lock()
	old := c.slots[i]
	c.down = i + 1
	c.mu.Unlock()
	pid := old.proc.cmd.Process.Pid
	old.proc.kill()
	old.client.Close() // its listening stream would retry a dead address until the test ends
	// An owner id is host-pid-random (instanceOwnerID).
	var held int
	if !waitFor(clusterLease+30*time.Second, func() bool {
		return db.QueryRow(context.Background(), `select count(*) from children where claim_owner like '%-' || $1::text || '-%'`, strconv.Itoa(pid)).Scan(&held) == nil && held == 0
	}) {
		c.t.Errorf("%d children of the killed instance were not taken over within %s", held, clusterLease+30*time.Second)
	}
	o.dataDir, o.workspace = old.dataDir, old.workspace
	s := c.launch(o)
	c.mu.Lock()
	c.slots[i], c.down = s, 0
	c.mu.Unlock()
}

// stressRun runs f(0..n-1), stressParallel at a time.
func stressRun(n int, f func(i int)) {
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range stressParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		}()
	}
	wg.Wait()
}

// stressCall calls a tool, bounded; a connection cut by a kill is an
// error, not a failure of the test.
func stressCall(ctx context.Context, s *instance, name string, args map[string]any) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = name, args
	return s.client.CallTool(ctx, req)
}

func textOr(r *mcp.CallToolResult) string {
	if r == nil {
		return ""
	}
	return text(r)
}

// claimWatch samples the children's claims in the store while the test
// runs: a child's claim may pass to another owner only with a new epoch
// (a takeover), and an epoch never goes back. Two owners holding one
// child at one epoch — both resident — breaks the first.
type claimWatch struct {
	done     chan struct{}
	stopped  chan struct{}
	mu       sync.Mutex
	bad      []string
	samples  int
	handoffs int
}

type claimSeen struct {
	owner string
	epoch int64
}

func watchClaims(t *testing.T, ctx context.Context, url string) *claimWatch {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	w := &claimWatch{done: make(chan struct{}), stopped: make(chan struct{})}
	t.Cleanup(w.stop)
	go func() {
		defer close(w.stopped)
		defer conn.Close(context.Background())
		last := map[string]claimSeen{}
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rows, err := conn.Query(ctx, `select id, coalesce(claim_owner, ''), claim_epoch from children`)
			if err != nil {
				continue // the test's own checks catch a database gone
			}
			w.mu.Lock()
			w.samples++
			for rows.Next() {
				var id string
				var now claimSeen
				if rows.Scan(&id, &now.owner, &now.epoch) != nil {
					continue
				}
				before, ok := last[id]
				switch {
				case !ok:
				case now.epoch < before.epoch:
					w.bad = append(w.bad, fmt.Sprintf("%s: epoch %d after %d", id, now.epoch, before.epoch))
				case now.epoch == before.epoch && now.owner != "" && before.owner != "" && now.owner != before.owner:
					w.bad = append(w.bad, fmt.Sprintf("%s: claimed by %s and by %s at epoch %d", id, before.owner, now.owner, now.epoch))
				case now.epoch > before.epoch && before.owner != "" && now.owner != "" && now.owner != before.owner:
					w.handoffs++
				}
				if now.owner != "" || !ok {
					last[id] = now
				} else {
					last[id] = claimSeen{owner: before.owner, epoch: now.epoch}
				}
			}
			rows.Close()
			w.mu.Unlock()
		}
	}()
	return w
}

// stop ends the sampling and waits for it.
func (w *claimWatch) stop() {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
	<-w.stopped
}

func (w *claimWatch) violations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.bad
}

// sendCauses counts the unacknowledged sends by their error text with the
// ids taken out, so a run tells which causes refused sends and how often.
func sendCauses(refused, failed *sync.Map) []string {
	counts := map[string]int{}
	count := func(kind string) func(k, v any) bool {
		return func(_, v any) bool {
			counts[kind+": "+stressIDs.ReplaceAllString(v.(string), "<id>")]++
			return true
		}
	}
	refused.Range(count("refused"))
	failed.Range(count("failed"))
	var out []string
	for c, n := range counts {
		out = append(out, fmt.Sprintf("%5d %s", n, c))
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out
}

var stressIDs = regexp.MustCompile(`[0-9a-f]{8,}(-[0-9a-f]{4,})*|\b\d+\b`)
