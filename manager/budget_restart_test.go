package manager_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/manager/budget"
	"github.com/mcp-subagent/mcp-subagent/persist"
	"github.com/mcp-subagent/mcp-subagent/providers/spawn"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// restartable is a bbolt store that managers are started on, one after
// another, as a daemon restarted on its data directory would be.
type restartable struct {
	t      *testing.T
	store  *persist.Store
	client llm.Client
	opts   manager.Options
	tools  func(m *manager.Manager) func(seam.ParentRef) []agent.Tool
}

func newRestartable(t *testing.T, fake *fakeopenai.Server, opts manager.Options) *restartable {
	t.Helper()
	st, err := persist.Open(t.TempDir(), persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return &restartable{t: t, store: st, client: openAI(fake), opts: opts}
}

// start starts a manager on the store and recovers what the last one left.
func (r *restartable) start() *manager.Manager {
	r.t.Helper()
	opts := r.opts
	opts.Store = r.store
	m := manager.New(opts)
	so := spawn.Options{Client: r.client, Model: "m"}
	if r.tools != nil {
		so.DelegationTools = r.tools(m)
	}
	if err := m.Register(spawn.New(so)); err != nil {
		r.t.Fatal(err)
	}
	if err := m.Recover(context.Background()); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { stopManager(m) })
	return m
}

func stopManager(m *manager.Manager) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = m.Close(ctx)
}

// sendBudget sends msg (granting budget, if set) to child id for caller and
// waits for its turn, returning the outcome and how many model requests
// it made.
func sendBudget(t *testing.T, m *manager.Manager, fake *fakeopenai.Server, caller seam.ParentRef, id, msg string, budget *seam.Budget) (seam.Result, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	before := len(fake.Requests())
	sent, err := m.FollowupBudget(ctx, caller, id, msg, true, budget)
	if err != nil {
		t.Fatal(err)
	}
	res, ok := sent.Wait(ctx)
	if !ok {
		t.Fatalf("the turn of %q never ended", msg)
	}
	return res, len(fake.Requests()) - before
}

// A child that spent most of its budget before the server restarted gets
// only what it had left after the restart: its grant and its spending are
// rebuilt from its stored journal. Each case spends in its first turn, the
// manager stops, a new one opens the same bbolt store, and the follow-up
// (no new grant) stops at the budget after exactly the model requests that
// were left (counted at the fake server).
func TestABudgetSurvivesARestart(t *testing.T) {
	cases := []struct {
		name   string
		budget seam.Budget
		first  func(n int) fakeopenai.Reply // the first turn's answers
		// what the follow-up gets: its requests, and its diagnostic
		requests int
		diag     string
	}{
		// Four of five steps spent (three tool rounds and an answer).
		{name: "steps", budget: seam.Budget{Steps: 5}, first: fourSteps, requests: 1,
			diag: "budget exhausted: steps 5 of 5 (tokens 75, "},
		// 60 of 70 tokens spent (15 a call): one more call passes it.
		{name: "tokens", budget: seam.Budget{Tokens: 70}, first: fourSteps, requests: 1,
			diag: "budget exhausted: tokens 75 of 70 (steps 5, "},
		// A second of 1.5 spent: the follow-up's held call is cut after
		// what was left (asserted below by its wall time).
		{name: "seconds", budget: seam.Budget{Seconds: 1.5}, requests: 1,
			first: func(int) fakeopenai.Reply { return fakeopenai.Reply{Text: "slow", Delay: time.Second} },
			diag:  "budget exhausted: seconds 1."},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
				if req.LastUserText() == "go" {
					return tc.first(n)
				}
				r := listForever(n, req)
				r.Delay = time.Minute // a held call, for the seconds case; cancelled when the budget runs out
				if tc.name != "seconds" {
					r.Delay = 0
				}
				return r
			})
			defer fake.Close()
			rs := newRestartable(t, fake, manager.Options{})
			root := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
			m1 := rs.start()
			b := tc.budget
			id := firstTurn(t, m1, root, &b, agent.StopCompleted)
			stopManager(m1)

			m2 := rs.start()
			began := time.Now()
			res, n := sendBudget(t, m2, fake, root, id, "more", nil)
			took := time.Since(began)
			if res.StopReason != agent.StopBudget || !strings.HasPrefix(res.Diagnostic, tc.diag) {
				t.Errorf("after the restart: %s (%s); want budget, %q", res.StopReason, res.Diagnostic, tc.diag)
			}
			if n != tc.requests {
				t.Errorf("after the restart the child made %d model requests; want %d, what it had left", n, tc.requests)
			}
			// A fresh 1.5 s would hold the call that long; what was left
			// (about 0.5 s) ends it well before.
			if tc.name == "seconds" && took > 1200*time.Millisecond {
				t.Errorf("the follow-up ran %v; want it cut at the ~0.5 s its budget had left", took)
			}
		})
	}
}

// fourSteps is a first turn of three tool rounds and an answer: four
// model calls, 60 tokens.
func fourSteps(n int) fakeopenai.Reply {
	if n < 3 {
		return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "list_dir", Arguments: `{"path":"."}`}}}
	}
	return fakeopenai.Reply{Text: "looked"}
}

// firstTurn starts a continuable child with prompt "go" and budget and
// waits for its first turn to end with want.
func firstTurn(t *testing.T, m *manager.Manager, root seam.ParentRef, budget *seam.Budget, want agent.StopReason) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := m.StartContinuable(ctx, "spawn", seam.StartRequest{Label: "l", Prompt: "go", Parent: root, Budget: budget}, true)
	if err != nil {
		t.Fatal(err)
	}
	res, ok := st.Wait(ctx)
	if !ok || res.StopReason != want {
		t.Fatalf("first turn = %+v, %v; want %s", res, ok, want)
	}
	return st.ChildID
}

// spentFourOfFive runs a child with 5 steps through a first turn of four
// on a manager with the deployment default def, then stops the manager;
// later prompts make the model call tools forever.
func spentFourOfFive(t *testing.T, def seam.Budget) (*fakeopenai.Server, *restartable, seam.ParentRef, string) {
	t.Helper()
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		if req.LastUserText() == "go" {
			return fourSteps(n)
		}
		return listForever(n, req)
	})
	t.Cleanup(fake.Close)
	rs := newRestartable(t, fake, manager.Options{Budget: budget.Limits{Default: def}})
	root := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
	m1 := rs.start()
	id := firstTurn(t, m1, root, &seam.Budget{Steps: 5}, agent.StopCompleted)
	stopManager(m1)
	return fake, rs, root, id
}

// A follow-up's new grant is journaled too: after a restart the child
// gets the new grant, and after another restart it still has only what
// is left of it (nothing), not its first budget nor a default.
func TestAGrantAfterARestartHoldsAcrossTheNext(t *testing.T) {
	fake, rs, root, id := spentFourOfFive(t, seam.Budget{Steps: 50})

	m2 := rs.start()
	if res, n := sendBudget(t, m2, fake, root, id, "more", &seam.Budget{Steps: 3}); res.StopReason != agent.StopBudget || n != 3 ||
		!strings.HasPrefix(res.Diagnostic, "budget exhausted: steps 3 of 3") {
		t.Errorf("with a new grant of 3 after the restart: %s (%s) after %d requests; want budget after 3", res.StopReason, res.Diagnostic, n)
	}
	stopManager(m2)

	m3 := rs.start()
	if res, n := sendBudget(t, m3, fake, root, id, "again", nil); res.StopReason != agent.StopBudget || n != 0 ||
		!strings.HasPrefix(res.Diagnostic, "budget exhausted: steps 3 of 3") {
		t.Errorf("after another restart: %s (%s) after %d requests; want budget at once, the grant spent", res.StopReason, res.Diagnostic, n)
	}
}

// A journal written before budgets were journaled (no budget event)
// resumes with the deployment's default, as it did before. The old
// child is the stored record of a new one with its budget events left
// out, which is what an older build wrote.
func TestAnOldJournalResumesWithTheDefault(t *testing.T) {
	fake, rs, root, id := spentFourOfFive(t, seam.Budget{Steps: 2})

	ctx := context.Background()
	hdr, err := rs.store.Header(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := rs.store.Descriptor(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	events, err := rs.store.Events(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var old []agent.Event
	for _, e := range events {
		if e.Kind != agent.EventBudget {
			e.Seq = int64(len(old))
			old = append(old, e)
		}
	}
	if len(old) != len(events)-1 {
		t.Fatalf("the child's journal has %d budget events; want its one grant", len(events)-len(old))
	}
	hdr.ID = manager.NewID()
	if err := rs.store.WriteChild(ctx, hdr.ID, seam.ChildWrite{Create: &seam.NewChild{Header: hdr, Descriptor: desc}, Events: old}); err != nil {
		t.Fatal(err)
	}

	m2 := rs.start()
	if res, n := sendBudget(t, m2, fake, root, hdr.ID, "more", nil); res.StopReason != agent.StopBudget || n != 2 ||
		!strings.HasPrefix(res.Diagnostic, "budget exhausted: steps 2 of 2") {
		t.Errorf("the old child: %s (%s) after %d requests; want the default's 2 steps", res.StopReason, res.Diagnostic, n)
	}
	// The default it was given is journaled now: after another restart it
	// has nothing left.
	stopManager(m2)
	m3 := rs.start()
	if res, n := sendBudget(t, m3, fake, root, hdr.ID, "again", nil); res.StopReason != agent.StopBudget || n != 0 {
		t.Errorf("the old child after another restart: %s (%s) after %d requests; want budget at once", res.StopReason, res.Diagnostic, n)
	}
}

// A grandchild resumed after a restart cannot outspend its grandparent:
// the grandparent's 150 tokens bound the whole tree (each waits for its
// foreground child's first turn), the ledgers of the
// grandchild's parent and grandparent (neither resident) are rebuilt from
// the store with what their descendants spent since their grants, and
// the grandchild stops at what its grandparent has left, naming it.
func TestAGrandchildResumedAfterARestartCannotOutspendItsGrandparent(t *testing.T) {
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		answered := false
		for _, msg := range req.Messages {
			answered = answered || msg.Role == "tool"
		}
		switch last := req.LastUserText(); {
		case last == "more":
			return listForever(n, req)
		case !answered && last == "grandparent":
			return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "delegate", Arguments: `{"prompt":"parent"}`}}}
		case !answered && last == "parent":
			return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "delegate", Arguments: `{"prompt":"grandchild"}`}}}
		}
		return fakeopenai.Reply{Text: "done"}
	})
	defer fake.Close()
	rs := newRestartable(t, fake, manager.Options{})
	rs.tools = func(m *manager.Manager) func(seam.ParentRef) []agent.Tool {
		return func(self seam.ParentRef) []agent.Tool { return []agent.Tool{delegateTool{m, self}} }
	}
	root := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	m1 := rs.start()
	st, err := m1.StartContinuable(ctx, "spawn", seam.StartRequest{Label: "gp", Prompt: "grandparent", Parent: root,
		Budget: &seam.Budget{Tokens: 150}}, false)
	if err != nil {
		t.Fatal(err)
	}
	gp := st.ChildID
	// The tree is quiet once the grandparent settles: it stays resident
	// while its descendants run.
	for settled := false; !settled; {
		notes := m1.WaitNotices(ctx, "p", "")
		if ctx.Err() != nil {
			t.Fatal("the grandparent never settled")
		}
		for _, n := range notes {
			settled = settled || n.ChildID == gp
		}
	}
	spent := 15 * len(fake.Requests())
	parent, grandchild := onlyChild(t, rs.store, gp), ""
	grandchild = onlyChild(t, rs.store, parent)
	stopManager(m1)
	if spent >= 150-15 {
		t.Fatalf("the tree spent %d tokens before the restart; the test needs it to leave room for more than one call", spent)
	}

	m2 := rs.start()
	caller := seam.ParentRef{Principal: "p", AgentID: parent, Depth: 2, Cwd: root.Cwd}
	res, n := sendBudget(t, m2, fake, caller, grandchild, "more", nil)
	// What the grandparent had left, 15 tokens a call, the call that
	// passes it included.
	if want := (150 - spent + 14) / 15; n != want {
		t.Errorf("the grandchild made %d model requests after the restart; want %d, what its grandparent had left of 150 after %d", n, want, spent)
	}
	if res.StopReason != agent.StopBudget || !strings.HasPrefix(res.Diagnostic, "budget exhausted: ancestor "+gp+"'s tokens ") ||
		!strings.Contains(res.Diagnostic, " of 150 ") {
		t.Errorf("the grandchild ended %s (%s); want budget at its grandparent's 150 tokens", res.StopReason, res.Diagnostic)
	}
}

// onlyChild is the id of parent's one stored child.
func onlyChild(t *testing.T, st seam.Store, parent string) string {
	t.Helper()
	ls, err := st.Listings(context.Background(), parent, seam.Page{})
	if err != nil || len(ls) != 1 {
		t.Fatalf("children of %s = %+v, %v; want one", parent, ls, err)
	}
	return ls[0].Header.ID
}

// A start's grant is stored with its first prompt: a crash before the
// first turn's budget event reached the store (here: the store is gone
// after the child's record and prompt were committed) reruns the prompt
// on the next start under the budget the start asked for, not the
// default.
func TestAStartsGrantSurvivesACrashBeforeItsFirstTurnIsStored(t *testing.T) {
	fake := fakeopenai.New(listForever)
	defer fake.Close()
	inner, err := persist.Open(t.TempDir(), persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	fs := &faultStore{inner: inner, k: 2, always: true, cleared: map[string]int{}}
	m1 := manager.New(manager.Options{Store: fs})
	if err := m1.Register(spawn.New(spawn.Options{Client: openAI(fake), Model: "m"})); err != nil {
		t.Fatal(err)
	}
	root := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
	st, err := m1.StartContinuable(context.Background(), "spawn", seam.StartRequest{Label: "l", Prompt: "go", Parent: root,
		Budget: &seam.Budget{Steps: 2}}, false)
	if err != nil {
		t.Fatal(err)
	}
	stopManager(m1)
	if n, err := inner.JournalLen(context.Background(), st.ChildID); err != nil || n != 0 {
		t.Fatalf("the stored journal has %d events, %v; want none (the store went before the first turn's write)", n, err)
	}

	rs := &restartable{t: t, store: inner, client: openAI(fake)}
	m2 := rs.start()
	res, n := sendBudget(t, m2, fake, root, st.ChildID, "more", nil)
	if n != 2 || res.StopReason != agent.StopBudget || !strings.HasPrefix(res.Diagnostic, "budget exhausted: steps 2 of 2") {
		t.Errorf("after the crash: %d model requests, then %s (%s); want the first prompt rerun under its 2 steps, then budget", n, res.StopReason, res.Diagnostic)
	}
}
