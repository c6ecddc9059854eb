// Package budget owns children's budgets: the deployment's default and
// caps (Limits), each child's ledger under its parent's, the charges its
// journal records, the check before each model call and tool round (Hook),
// the run of one turn under its budget (Turn), and the rebuild of a ledger
// from the journals after a restart (Restore).
//
// A start that asks for no budget gets the deployment's default; every
// field is capped by the deployment's max (an unlimited one too) and, at
// start, by what every ancestor has left. Each child has a ledger whose
// parent is its parent's, and every charge reaches every ancestor, so no
// subtree outspends the budget of any agent above it. Charges come from
// the child's journal as it grows, the same for every provider: an
// assistant message is one step (in-process: one model call; external:
// one answer or activity note), its usage tokens (input plus output) and
// cost; a turn's end adds what its messages did not report (an external
// CLI's turn usage). Seconds are the wall time of the child's turns since
// the grant (an idle child's clock stands still). An in-process agent asks
// before each model call and each tool round (Hook) and makes no request
// once its chain is exhausted; and any running turn on the chain a charge
// exhausts, or whose seconds run out (a timer), is cancelled with a budget
// cause, which stops an external driver's process group. Either way the
// turn ends StopBudget: an error result whose diagnostic names the limit
// and the usage ("budget exhausted: steps 5 of 5 (tokens 75, 0.3s)", or
// "... ancestor agent-x's tokens ..."), with the partial output. A turn
// whose budget is already spent still records its inputs, then ends at
// once. A follow-up with a budget replaces the child's from that turn on,
// capped the same way when the turn starts; without one the child keeps
// what it has left, across settlements and cold resumes. A limit is
// checked between calls, so the call that passes it completes (and is
// charged).
//
// Budgets survive restarts; the journal is the truth. A grant (a start's
// budget after the default, the max and the ancestors' remaining; a
// follow-up's) is journaled as an agent.EventBudget just before the
// turn/start of the turn it applies to (not for one-shot runs, which are
// never resumed). A child resumed with no ledger here (the first resume
// after a restart) gets one rebuilt by Restore: its last grant after its
// fork seed, charged with what its journal records since (agent.Spent:
// steps, tokens and cost as above; seconds from turn start to end, a turn
// a crash cut short ending at its last event) and with what its stored
// descendants' journals record since the grant's time. Its parent's ledger
// is this manager's, or rebuilt the same way from the store, up to the
// root child. A journal from before budget events gets the deployment's
// default, journaled at its next turn. A ledger this Book has is the
// truth: it is never rebuilt.
//
// Caveats: a rebuilt ledger recounts descendants from the store, at most
// 256 journals (past that the rest is left out and a warning logged):
// one-shot runs are not stored, so what a one-shot child (and anything
// under it) spent before a restart is not counted against its ancestors
// again, and an ancestor's recount goes by event times, so a clock set
// back across a restart undercounts.
//
// The manager calls a Book with ids, a driver and the journal it reads;
// what a rebuild reads it reads through Store, a read-only slice of the
// session store. Book.mu is a leaf: nothing of the manager is called while
// it is held.
package budget

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Limits are the deployment's budget rules.
type Limits struct {
	// Default is the budget of a start that asks for none; zero: none.
	Default seam.Budget
	// Max caps every field of what a start or a follow-up asks (an
	// unlimited field included); a zero field caps nothing.
	Max seam.Budget
}

// capped is b with every field at most max's (an unlimited field of b
// takes max's).
func capped(b, max seam.Budget) seam.Budget {
	b.Tokens = minLimit(b.Tokens, max.Tokens)
	b.Steps = minLimit(b.Steps, max.Steps)
	b.Seconds = minLimit(b.Seconds, max.Seconds)
	b.CostUSD = minLimit(b.CostUSD, max.CostUSD)
	return b
}

// minLimit is the tighter of two limits where zero is no limit.
func minLimit[T int | int64 | float64](a, b T) T {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// spent is what a ledger has been charged since its grant.
type spent struct {
	tokens  int64
	steps   int
	cost    float64
	elapsed time.Duration // turn time before the current turn
}

// ledger is one child's budget: its limit, what it (with its descendants)
// spent since the grant, and its parent's ledger, which every charge
// reaches too. All ledgers of a Book share Book.mu.
type ledger struct {
	id     string
	parent *ledger
	limit  seam.Budget
	spent  spent
	// journaled is set once limit is in the child's journal (a budget
	// event); a new grant is written at the start of its first turn.
	journaled bool
	// While a turn runs: when it started, its cancel (a limit passed
	// mid-turn cancels it with a *budgetStop cause) and what its messages
	// were charged (so a turn-end total is charged only for the rest).
	since     time.Time
	cancel    context.CancelCauseFunc
	turnUsage seam.Usage
}

// Book holds the ledgers of a manager's children. A continuable child's
// ledger lives as long as the Book (so a child resumed after settling
// keeps what it had left); a one-shot run's goes with the run (Close).
type Book struct {
	limits Limits
	store  Store // nil: Restore does nothing
	log    *slog.Logger

	mu      sync.RWMutex // read: lookups and checks, on every step of every child
	ledgers map[string]*ledger
}

// Store is what a rebuild reads of the session store.
type Store interface {
	Header(ctx context.Context, childID string) (seam.Header, error)
	Events(ctx context.Context, childID string) ([]agent.Event, error)
	Listings(ctx context.Context, parent string, page seam.Page) ([]seam.Listing, error)
}

// New returns a Book applying limits; store (nil: none) is where Restore
// reads journals, log where it says what it could not read.
func New(limits Limits, store Store, log *slog.Logger) *Book {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Book{limits: limits, store: store, log: log, ledgers: map[string]*ledger{}}
}

// elapsed is l's turn time so far; mu held.
func (l *ledger) elapsed(now time.Time) time.Duration {
	e := l.spent.elapsed
	if !l.since.IsZero() {
		e += now.Sub(l.since)
	}
	return e
}

// over names the first limit l has reached, or "" while it has room; mu
// held.
func (l *ledger) over(now time.Time) string {
	switch {
	case l.limit.Steps > 0 && l.spent.steps >= l.limit.Steps:
		return "steps"
	case l.limit.Tokens > 0 && l.spent.tokens >= l.limit.Tokens:
		return "tokens"
	case l.limit.CostUSD > 0 && l.spent.cost >= l.limit.CostUSD:
		return "cost_usd"
	case l.limit.Seconds > 0 && l.elapsed(now).Seconds() >= l.limit.Seconds:
		return "seconds"
	}
	return ""
}

// exhausted is the stop of the nearest ledger on l's chain (l first) that
// has reached a limit, or nil; mu held.
func (l *ledger) exhausted(now time.Time) *budgetStop {
	for n := l; n != nil; n = n.parent {
		if kind := n.over(now); kind != "" {
			return &budgetStop{at: n, kind: kind}
		}
	}
	return nil
}

// remaining is what l's chain has left (zero: no limit); a field some
// ancestor has used up is left as asked, for the chain check catches it.
func (l *ledger) remaining(now time.Time) seam.Budget {
	var r seam.Budget
	for n := l; n != nil; n = n.parent {
		if t := n.limit.Tokens - n.spent.tokens; n.limit.Tokens > 0 && t > 0 {
			r.Tokens = minLimit(r.Tokens, t)
		}
		if s := n.limit.Steps - n.spent.steps; n.limit.Steps > 0 && s > 0 {
			r.Steps = minLimit(r.Steps, s)
		}
		if c := n.limit.CostUSD - n.spent.cost; n.limit.CostUSD > 0 && c > 0 {
			r.CostUSD = minLimit(r.CostUSD, c)
		}
		if s := n.limit.Seconds - n.elapsed(now).Seconds(); n.limit.Seconds > 0 && s > 0 {
			r.Seconds = minLimit(r.Seconds, s)
		}
	}
	return r
}

// budgetStop is the cause a turn is ended with when a budget runs out:
// at's limit kind was reached (at: the child's own ledger or an
// ancestor's).
type budgetStop struct {
	at   *ledger
	kind string
}

func (s *budgetStop) Error() string { return "budget exhausted" }

// diagnostic names the limit and the usage, as the ledger stands now, for
// the turn of child ledger self; mu held.
func (s *budgetStop) diagnostic(self *ledger, now time.Time) string {
	l := s.at
	figures := map[string]string{
		"tokens":   fmt.Sprintf("tokens %d", l.spent.tokens),
		"steps":    fmt.Sprintf("steps %d", l.spent.steps),
		"seconds":  fmt.Sprintf("%.1fs", l.elapsed(now).Seconds()),
		"cost_usd": fmt.Sprintf("cost_usd %.4f", l.spent.cost),
	}
	var head string
	switch s.kind {
	case "tokens":
		head = fmt.Sprintf("tokens %d of %d", l.spent.tokens, l.limit.Tokens)
	case "steps":
		head = fmt.Sprintf("steps %d of %d", l.spent.steps, l.limit.Steps)
	case "seconds":
		head = fmt.Sprintf("seconds %.1f of %g", l.elapsed(now).Seconds(), l.limit.Seconds)
	case "cost_usd":
		head = fmt.Sprintf("cost_usd %.4f of %g", l.spent.cost, l.limit.CostUSD)
	}
	var rest []string
	for _, k := range []string{"tokens", "steps", "seconds", "cost_usd"} {
		if k != s.kind && (k != "cost_usd" || l.spent.cost > 0) {
			rest = append(rest, figures[k])
		}
	}
	whose := ""
	if l != self {
		whose = fmt.Sprintf("ancestor %s's ", l.id)
	}
	return fmt.Sprintf("budget exhausted: %s%s (%s)", whose, head, strings.Join(rest, ", "))
}

// Grant is the budget a start asking for asked gets from the deployment:
// its default when asked is nil, then capped by its max.
func (bk *Book) Grant(asked *seam.Budget) seam.Budget {
	b := bk.limits.Default
	if asked != nil {
		b = *asked
	}
	return capped(b, bk.limits.Max)
}

// Open makes the ledger of a new child id under its parent's (a root
// caller has none): its limit is what grant leaves of every ancestor's
// remaining budget.
func (bk *Book) Open(id, parentID string, grant seam.Budget) {
	bk.mu.Lock()
	defer bk.mu.Unlock()
	l := &ledger{id: id, parent: bk.ledgers[parentID]}
	if l.parent != nil {
		grant = capped(grant, l.parent.remaining(time.Now()))
	}
	l.limit = grant
	bk.ledgers[id] = l
}

// Close forgets a one-shot run's ledger.
func (bk *Book) Close(id string) {
	bk.mu.Lock()
	delete(bk.ledgers, id)
	bk.mu.Unlock()
}

// ledgerOf returns child id's ledger, making one for a child this manager
// has none for (a resume rebuilds it first, see Restore): the
// deployment's default under parentID's.
func (bk *Book) ledgerOf(id, parentID string) *ledger {
	bk.mu.RLock()
	l := bk.ledgers[id]
	bk.mu.RUnlock()
	if l == nil {
		bk.Open(id, parentID, bk.Grant(nil))
		bk.mu.RLock()
		l = bk.ledgers[id]
		bk.mu.RUnlock()
	}
	return l
}

// Hook is the in-process agent's check (seam.DriverRequest.Budget,
// agent.Config.Budget): no model call and no tool round once the child's
// chain is exhausted.
func (bk *Book) Hook(id, parentID string) func(call bool) error {
	return func(bool) error {
		l := bk.ledgerOf(id, parentID)
		bk.mu.RLock()
		defer bk.mu.RUnlock()
		now := time.Now()
		if s := l.exhausted(now); s != nil {
			return errors.New(s.diagnostic(l, now))
		}
		return nil
	}
}

// charge records a journal event's spending on l and every ancestor's
// ledger (an assistant message is one step, and its usage; a turn's end
// adds what its messages did not report), then cancels every running turn
// on the chain the charge exhausted.
func (bk *Book) charge(l *ledger, e agent.Event) {
	var u seam.Usage
	steps := 0
	bk.mu.Lock()
	defer bk.mu.Unlock()
	switch {
	case e.Kind == agent.EventMessage && e.Message != nil && e.Message.Role == seam.RoleAssistant:
		steps = 1
		if e.Usage != nil {
			u = *e.Usage
			l.turnUsage = l.turnUsage.Add(u)
		}
	case e.Kind == agent.EventTurnEnd && e.Usage != nil:
		t := l.turnUsage
		u = seam.Usage{InputTokens: max(0, e.Usage.InputTokens-t.InputTokens),
			OutputTokens: max(0, e.Usage.OutputTokens-t.OutputTokens), CostUSD: max(0, e.Usage.CostUSD-t.CostUSD)}
	default:
		return
	}
	for n := l; n != nil; n = n.parent {
		n.spent.tokens += u.InputTokens + u.OutputTokens
		n.spent.steps += steps
		n.spent.cost += u.CostUSD
	}
	// Every running turn on the chain whose own chain is now exhausted
	// stops: an external driver has no check of its own to stop at.
	now := time.Now()
	for n := l; n != nil; n = n.parent {
		if n.cancel != nil {
			if s := n.exhausted(now); s != nil {
				n.cancel(s)
			}
		}
	}
}

// Turn runs one turn of child id on drv under its budget: grant, when
// set, replaces the child's budget first (a follow-up's, capped by the
// deployment and by what every ancestor has left); the turn's journal is
// charged as it grows; the seconds left arm a timer; and a turn its budget
// stopped ends with StopBudget and a diagnostic naming the limit and the
// usage, keeping its partial output. A turn whose budget is already spent
// runs with its ctx cancelled, so its inputs are recorded and nothing is
// requested. oneShot says the child is never resumed: its grant need not
// be journaled.
func (bk *Book) Turn(ctx context.Context, id, parentID string, grant *seam.Budget, oneShot bool, drv seam.Driver, inputs []agent.Input) agent.TurnResult {
	l := bk.ledgerOf(id, parentID)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	bk.mu.Lock()
	now := time.Now()
	if grant != nil {
		b := capped(*grant, bk.limits.Max)
		if l.parent != nil {
			b = capped(b, l.parent.remaining(now))
		}
		l.limit, l.spent, l.journaled = b, spent{}, false
	}
	// The grant goes into the journal ahead of the turn it applies to, so
	// a resume after a restart rebuilds it (Restore).
	record := !l.journaled && !oneShot
	g := agent.Grant(l.limit)
	l.journaled = true
	l.since, l.cancel, l.turnUsage = now, cancel, seam.Usage{}
	if s := l.exhausted(now); s != nil {
		cancel(s)
	} else if left := l.remaining(now).Seconds; left > 0 {
		timer := time.AfterFunc(time.Duration(left*float64(time.Second)), func() {
			bk.mu.Lock()
			defer bk.mu.Unlock()
			if s := l.exhausted(time.Now()); s != nil {
				cancel(s)
			}
		})
		defer timer.Stop()
	}
	bk.mu.Unlock()
	if record {
		drv.Journal().Append(agent.Event{Kind: agent.EventBudget, Grant: &g})
	}
	unsub := drv.Journal().Subscribe(func(e agent.Event) { bk.charge(l, e) })
	tr := drv.RunTurn(ctx, inputs)
	unsub()
	bk.mu.Lock()
	defer bk.mu.Unlock()
	now = time.Now()
	l.spent.elapsed += now.Sub(l.since)
	l.since, l.cancel = time.Time{}, nil
	var stop *budgetStop
	if tr.StopReason != agent.StopCompleted && errors.As(context.Cause(ctx), &stop) {
		tr.StopReason, tr.Diagnostic = agent.StopBudget, stop.diagnostic(l, now)
	}
	return tr
}

// maxBudgetWalk bounds the descendants' journals a rebuilt ledger reads.
const maxBudgetWalk = 256

// Restore gives a resumed child this Book has no ledger for (the
// first resume after a restart) the ledger its journal records: the limit
// of its last budget event, charged with what its events since spent and
// what its stored descendants spent since then; under its parent's
// ledger, which is rebuilt the same way from the store when this Book
// has none, and so on up to the root child. A journal from before budget
// events gets the deployment's default, as before (and journals it at its
// next turn). A child that has a ledger keeps it: it is the truth.
func (bk *Book) Restore(ctx context.Context, hdr seam.Header, events []agent.Event) {
	if bk.store == nil || bk.hasLedger(hdr.ID) {
		return
	}
	bk.keepLedger(bk.rebuildLedger(ctx, hdr, events, bk.ancestorLedger(ctx, hdr.Parent)))
}

// ancestorLedger is the ledger of the agent at parent address addr: this
// Book's, or one rebuilt from the store; nil for a root principal and
// for an agent the store cannot give (a one-shot run, which is not
// stored: its budget ended with it).
func (bk *Book) ancestorLedger(ctx context.Context, addr string) *ledger {
	if addr == "" || strings.HasPrefix(addr, seam.PrincipalAddress("")) {
		return nil
	}
	bk.mu.Lock()
	l := bk.ledgers[addr]
	bk.mu.Unlock()
	if l != nil {
		return l
	}
	hdr, err := bk.store.Header(ctx, addr)
	if err != nil {
		if !errors.Is(err, seam.ErrNotFound) {
			bk.log.Warn("an ancestor's budget cannot be rebuilt; its descendant is held to its own", "agent_id", addr, "err", err)
		}
		return nil
	}
	events, err := bk.store.Events(ctx, addr)
	if err != nil {
		bk.log.Warn("an ancestor's budget cannot be rebuilt; its descendant is held to its own", "agent_id", addr, "err", err)
		return nil
	}
	return bk.keepLedger(bk.rebuildLedger(ctx, hdr, events, bk.ancestorLedger(ctx, hdr.Parent)))
}

// rebuildLedger is the ledger hdr's journal events record, under parent.
func (bk *Book) rebuildLedger(ctx context.Context, hdr seam.Header, events []agent.Event, parent *ledger) *ledger {
	l := &ledger{id: hdr.ID, parent: parent}
	grant, sp, ok := agent.LastGrant(events, int(hdr.SeedLen))
	if !ok {
		l.limit = bk.Grant(nil)
		if parent != nil {
			bk.mu.Lock()
			l.limit = capped(l.limit, parent.remaining(time.Now()))
			bk.mu.Unlock()
		}
		return l
	}
	l.limit, l.journaled = seam.Budget(*grant.Grant), true
	l.spent = spent{tokens: sp.Tokens, steps: sp.Steps, cost: sp.CostUSD, elapsed: sp.Elapsed}
	d := bk.descendantsSpent(ctx, hdr.ID, grant.Time)
	l.spent.tokens += d.Tokens
	l.spent.steps += d.Steps
	l.spent.cost += d.CostUSD
	return l
}

// descendantsSpent is what the stored descendants of agent id spent at or
// after since, read from at most maxBudgetWalk journals (fork seeds left
// out: their spending was the parent's).
func (bk *Book) descendantsSpent(ctx context.Context, id string, since time.Time) agent.Spending {
	var total agent.Spending
	read := 0
	queue := []string{id}
	for len(queue) > 0 && ctx.Err() == nil {
		addr := queue[0]
		queue = queue[1:]
		ls, err := bk.store.Listings(ctx, addr, seam.Page{})
		if err != nil {
			bk.log.Warn("a descendant's spending cannot be read; its ancestor's budget is rebuilt without it", "agent_id", addr, "err", err)
			continue
		}
		for _, c := range ls {
			if read == maxBudgetWalk {
				bk.log.Warn("too many descendants to recount; an ancestor's budget is rebuilt without the rest", "agent_id", id, "read", read)
				return total
			}
			read++
			events, err := bk.store.Events(ctx, c.Header.ID)
			if err != nil {
				bk.log.Warn("a descendant's spending cannot be read; its ancestor's budget is rebuilt without it", "agent_id", c.Header.ID, "err", err)
			} else {
				// Listings may leave SeedLen zero; a fork's seed is its
				// parent's spending, counted in the parent's journal.
				h, herr := bk.store.Header(ctx, c.Header.ID)
				from := 0
				if herr == nil {
					from = int(min(h.SeedLen, int64(len(events))))
				}
				s := agent.Spent(events[from:], since)
				total.Tokens += s.Tokens
				total.Steps += s.Steps
				total.CostUSD += s.CostUSD
			}
			queue = append(queue, c.Header.ID)
		}
	}
	return total
}

// hasLedger reports whether child id has a ledger here.
func (bk *Book) hasLedger(id string) bool {
	bk.mu.Lock()
	defer bk.mu.Unlock()
	return bk.ledgers[id] != nil
}

// keepLedger stores l unless a ledger for its child appeared meanwhile,
// and returns the one kept.
func (bk *Book) keepLedger(l *ledger) *ledger {
	bk.mu.Lock()
	defer bk.mu.Unlock()
	if old := bk.ledgers[l.id]; old != nil {
		return old
	}
	bk.ledgers[l.id] = l
	return l
}
