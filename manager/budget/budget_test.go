package budget

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// spender is a driver whose turn spends one step of 10 tokens at a time
// until its ctx ends (a budget stop) or it has taken steps steps.
type spender struct {
	j     *agent.Journal
	steps int
}

func newSpender(t *testing.T, steps int) *spender {
	j, err := agent.NewJournal(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &spender{j: j, steps: steps}
}

func (d *spender) Journal() *agent.Journal { return d.j }
func (d *spender) Close() error            { return nil }
func (d *spender) RunTurn(ctx context.Context, inputs []agent.Input) agent.TurnResult {
	turn := d.j.NextTurn()
	d.j.Append(agent.Event{Kind: agent.EventTurnStart, Turn: turn})
	for i := 0; i < d.steps; i++ {
		if ctx.Err() != nil {
			return agent.TurnResult{StopReason: agent.StopAborted, Output: "partial"}
		}
		d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: turn, Message: &seam.Message{Role: seam.RoleAssistant, Content: "step"},
			Usage: &seam.Usage{InputTokens: 6, OutputTokens: 4}})
	}
	return agent.TurnResult{StopReason: agent.StopCompleted, Output: "done"}
}

var _ seam.Driver = (*spender)(nil)

func TestTheDefaultAndTheMaxShapeAGrant(t *testing.T) {
	bk := New(Limits{Default: seam.Budget{Steps: 5}, Max: seam.Budget{Steps: 10, Tokens: 1000}}, nil, nil)
	if g := bk.Grant(nil); g != (seam.Budget{Steps: 5, Tokens: 1000}) {
		t.Fatalf("Grant(nil) = %+v, want the default capped by the max (an unlimited field takes the max's)", g)
	}
	if g := bk.Grant(&seam.Budget{Steps: 50, Tokens: 10}); g != (seam.Budget{Steps: 10, Tokens: 10}) {
		t.Fatalf("Grant(asked) = %+v, want each field at most the max's", g)
	}
}

// TestAChargeExhaustsTheChainAndStopsTheTurn: a child's steps are charged
// to its parent too; the turn that uses up the parent's budget is
// cancelled with a diagnostic naming the ancestor, and the child's check
// refuses the next call.
func TestAChargeExhaustsTheChainAndStopsTheTurn(t *testing.T) {
	bk := New(Limits{}, nil, nil)
	bk.Open("parent", "", seam.Budget{Steps: 3})
	bk.Open("child", "parent", seam.Budget{Steps: 100})
	if l := bk.ledgerOf("child", "parent"); l.limit.Steps != 3 {
		t.Fatalf("the child's grant is %d steps, want it capped by its parent's remaining 3", l.limit.Steps)
	}
	d := newSpender(t, 10)
	tr := bk.Turn(context.Background(), "child", "parent", nil, false, d, []agent.Input{{Text: "go"}})
	if tr.StopReason != agent.StopBudget {
		t.Fatalf("stop = %s, want %s", tr.StopReason, agent.StopBudget)
	}
	if !strings.HasPrefix(tr.Diagnostic, "budget exhausted: steps 3 of 3") {
		t.Fatalf("diagnostic %q does not name the limit", tr.Diagnostic)
	}
	if tr.Output != "partial" {
		t.Fatalf("output %q: the partial output must be kept", tr.Output)
	}
	events := d.j.Events()
	if events[0].Kind != agent.EventBudget || events[0].Grant == nil || events[0].Grant.Steps != 3 {
		t.Fatalf("first event %+v: the grant must be journaled before the turn", events[0])
	}
	err := bk.Hook("child", "parent")(true)
	if err == nil || !strings.Contains(err.Error(), "steps 3 of 3") {
		t.Fatalf("Hook = %v, want the exhausted budget", err)
	}
	bk.Open("sibling", "parent", seam.Budget{})
	if err := bk.Hook("sibling", "parent")(true); err == nil || !strings.Contains(err.Error(), "ancestor parent's steps") {
		t.Fatalf("a sibling's Hook = %v, want its ancestor's exhausted budget named", err)
	}
}

// TestAFollowupsGrantReplacesTheBudget: a new grant starts a new count;
// a one-shot run's grant is not journaled.
func TestAFollowupsGrantReplacesTheBudget(t *testing.T) {
	bk := New(Limits{Max: seam.Budget{Steps: 4}}, nil, nil)
	bk.Open("c", "", seam.Budget{Steps: 1})
	d := newSpender(t, 2)
	if tr := bk.Turn(context.Background(), "c", "", nil, false, d, nil); tr.StopReason != agent.StopBudget {
		t.Fatalf("first turn stop = %s, want budget", tr.StopReason)
	}
	tr := bk.Turn(context.Background(), "c", "", &seam.Budget{Steps: 40}, false, d, nil)
	if tr.StopReason != agent.StopCompleted {
		t.Fatalf("after a new grant the turn stopped %s (%s)", tr.StopReason, tr.Diagnostic)
	}
	grants := 0
	for _, e := range d.j.Events() {
		if e.Kind == agent.EventBudget {
			grants++
			if e.Grant.Steps > 4 {
				t.Fatalf("a grant of %d steps was journaled past the max of 4", e.Grant.Steps)
			}
		}
	}
	if grants != 2 {
		t.Fatalf("%d grants journaled, want 2", grants)
	}
	bk.Open("once", "", seam.Budget{Steps: 9})
	o := newSpender(t, 1)
	bk.Turn(context.Background(), "once", "", nil, true, o, nil)
	for _, e := range o.j.Events() {
		if e.Kind == agent.EventBudget {
			t.Fatal("a one-shot run's grant was journaled")
		}
	}
	bk.Close("once")
	if bk.hasLedger("once") {
		t.Fatal("Close kept the one-shot run's ledger")
	}
}

// TestSecondsRunOutMidTurn: a turn that outlives its seconds is stopped by
// the timer, not by a charge.
func TestSecondsRunOutMidTurn(t *testing.T) {
	bk := New(Limits{}, nil, nil)
	bk.Open("slow", "", seam.Budget{Seconds: 0.05})
	j, _ := agent.NewJournal(nil)
	tr := bk.Turn(context.Background(), "slow", "", nil, false, blocker{j}, nil)
	if tr.StopReason != agent.StopBudget || !strings.Contains(tr.Diagnostic, "seconds") {
		t.Fatalf("stop %s (%q), want a budget stop naming seconds", tr.StopReason, tr.Diagnostic)
	}
}

type blocker struct{ j *agent.Journal }

func (b blocker) Journal() *agent.Journal { return b.j }
func (b blocker) Close() error            { return nil }
func (b blocker) RunTurn(ctx context.Context, _ []agent.Input) agent.TurnResult {
	<-ctx.Done()
	return agent.TurnResult{StopReason: agent.StopAborted}
}

// noStore is a store holding no other child.
type noStore struct{}

func (noStore) Header(context.Context, string) (seam.Header, error) {
	return seam.Header{}, seam.ErrNotFound
}
func (noStore) Events(context.Context, string) ([]agent.Event, error) { return nil, seam.ErrNotFound }
func (noStore) Listings(context.Context, string, seam.Page) ([]seam.Listing, error) {
	return nil, nil
}

// TestRestoreRebuildsTheLedgerFromTheJournal: after a restart the last
// grant and what was spent since come back; a journal without a grant
// gets the default; a ledger the Book has is never rebuilt.
func TestRestoreRebuildsTheLedgerFromTheJournal(t *testing.T) {
	bk := New(Limits{Default: seam.Budget{Steps: 7}}, noStore{}, nil)
	now := time.Now()
	step := agent.Event{Kind: agent.EventMessage, Time: now, Message: &seam.Message{Role: seam.RoleAssistant}, Usage: &seam.Usage{OutputTokens: 1}}
	events := []agent.Event{
		{Kind: agent.EventBudget, Time: now, Grant: &agent.Grant{Steps: 2}},
		{Kind: agent.EventTurnStart, Time: now, Turn: 1}, step, step,
		{Kind: agent.EventTurnEnd, Time: now, Turn: 1, StopReason: agent.StopBudget},
	}
	bk.Restore(context.Background(), seam.Header{ID: "c", Parent: seam.PrincipalAddress("alice")}, events)
	if err := bk.Hook("c", "")(true); err == nil || !strings.Contains(err.Error(), "steps 2 of 2") {
		t.Fatalf("Hook after Restore = %v, want the journaled grant spent", err)
	}
	bk.Restore(context.Background(), seam.Header{ID: "c"}, nil)
	if err := bk.Hook("c", "")(true); err == nil {
		t.Fatal("a second Restore replaced a ledger the Book had")
	}
	bk.Restore(context.Background(), seam.Header{ID: "old"}, events[1:])
	if l := bk.ledgerOf("old", ""); l.limit.Steps != 7 || l.journaled {
		t.Fatalf("a journal without a grant got %+v (journaled %v), want the default, journaled at its next turn", l.limit, l.journaled)
	}
}
