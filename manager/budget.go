package manager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// BudgetLimits are the deployment's budget rules (Options.Budget).
type BudgetLimits struct {
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
// reaches too. All ledgers of a manager share budgetBook.mu.
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
	turnUsage llm.Usage
}

// budgetBook holds the ledgers of the manager's children. A continuable
// child's ledger lives as long as the manager (so a child resumed after
// settling keeps what it had left); a one-shot run's goes with the run.
type budgetBook struct {
	mu      sync.RWMutex // read: lookups and checks, on every step of every child
	ledgers map[string]*ledger
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

// grantFor is the budget a start asking for asked gets from the
// deployment: its default when asked is nil, then capped by its max.
func (m *Manager) grantFor(asked *seam.Budget) seam.Budget {
	b := m.opts.Budget.Default
	if asked != nil {
		b = *asked
	}
	return capped(b, m.opts.Budget.Max)
}

// openLedger makes the ledger of a new child id under its parent's (a root
// caller has none): its limit is what grant leaves of every ancestor's
// remaining budget.
func (m *Manager) openLedger(id, parentID string, grant seam.Budget) {
	bk := &m.budgets
	bk.mu.Lock()
	defer bk.mu.Unlock()
	if bk.ledgers == nil {
		bk.ledgers = map[string]*ledger{}
	}
	l := &ledger{id: id, parent: bk.ledgers[parentID]}
	if l.parent != nil {
		grant = capped(grant, l.parent.remaining(time.Now()))
	}
	l.limit = grant
	bk.ledgers[id] = l
}

// closeLedger forgets a one-shot run's ledger.
func (m *Manager) closeLedger(id string) {
	m.budgets.mu.Lock()
	delete(m.budgets.ledgers, id)
	m.budgets.mu.Unlock()
}

// ledgerOf returns child id's ledger, making one for a child this manager
// has none for (a resume rebuilds it first, see restoreLedger): the
// deployment's default under parentID's.
func (m *Manager) ledgerOf(id, parentID string) *ledger {
	m.budgets.mu.RLock()
	l := m.budgets.ledgers[id]
	m.budgets.mu.RUnlock()
	if l == nil {
		m.openLedger(id, parentID, m.grantFor(nil))
		m.budgets.mu.RLock()
		l = m.budgets.ledgers[id]
		m.budgets.mu.RUnlock()
	}
	return l
}

// budgetHook is the in-process agent's check (agent.Config.Budget): no
// model call and no tool round once the child's chain is exhausted.
func (m *Manager) budgetHook(id, parentID string) func(call bool) error {
	return func(bool) error {
		l := m.ledgerOf(id, parentID)
		m.budgets.mu.RLock()
		defer m.budgets.mu.RUnlock()
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
func (m *Manager) charge(l *ledger, e agent.Event) {
	var u llm.Usage
	steps := 0
	m.budgets.mu.Lock()
	defer m.budgets.mu.Unlock()
	switch {
	case e.Kind == agent.EventMessage && e.Message != nil && e.Message.Role == llm.RoleAssistant:
		steps = 1
		if e.Usage != nil {
			u = *e.Usage
			l.turnUsage = l.turnUsage.Add(u)
		}
	case e.Kind == agent.EventTurnEnd && e.Usage != nil:
		t := l.turnUsage
		u = llm.Usage{InputTokens: max(0, e.Usage.InputTokens-t.InputTokens),
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

// budgetedTurn runs one turn of child id under its budget: grant, when
// set, replaces the child's budget first (a follow-up's, capped by the
// deployment and by what every ancestor has left); the turn's journal is
// charged as it grows; the seconds left arm a timer; and a turn its budget
// stopped ends with StopBudget and a diagnostic naming the limit and the
// usage, keeping its partial output. A turn whose budget is already spent
// runs with its ctx cancelled, so its inputs are recorded and nothing is
// requested.
func (m *Manager) budgetedTurn(ctx context.Context, id, parentID string, grant *seam.Budget, drv seam.Driver, inputs []agent.Input) agent.TurnResult {
	l := m.ledgerOf(id, parentID)
	m.mu.Lock()
	_, oneShot := m.runs[id] // never resumed: its grant need not be kept
	m.mu.Unlock()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	m.budgets.mu.Lock()
	now := time.Now()
	if grant != nil {
		b := capped(*grant, m.opts.Budget.Max)
		if l.parent != nil {
			b = capped(b, l.parent.remaining(now))
		}
		l.limit, l.spent, l.journaled = b, spent{}, false
	}
	// The grant goes into the journal ahead of the turn it applies to, so
	// a resume after a restart rebuilds it (restoreLedger).
	record := !l.journaled && !oneShot
	g := agent.Grant(l.limit)
	l.journaled = true
	l.since, l.cancel, l.turnUsage = now, cancel, llm.Usage{}
	if s := l.exhausted(now); s != nil {
		cancel(s)
	} else if left := l.remaining(now).Seconds; left > 0 {
		timer := time.AfterFunc(time.Duration(left*float64(time.Second)), func() {
			m.budgets.mu.Lock()
			defer m.budgets.mu.Unlock()
			if s := l.exhausted(time.Now()); s != nil {
				cancel(s)
			}
		})
		defer timer.Stop()
	}
	m.budgets.mu.Unlock()
	if record {
		drv.Journal().Append(agent.Event{Kind: agent.EventBudget, Grant: &g})
	}
	unsub := drv.Journal().Subscribe(func(e agent.Event) { m.charge(l, e) })
	tr := drv.RunTurn(ctx, inputs)
	unsub()
	m.budgets.mu.Lock()
	defer m.budgets.mu.Unlock()
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

// restoreLedger gives a resumed child this manager has no ledger for (the
// first resume after a restart) the ledger its journal records: the limit
// of its last budget event, charged with what its events since spent and
// what its stored descendants spent since then; under its parent's
// ledger, which is rebuilt the same way from the store when this manager
// has none, and so on up to the root child. A journal from before budget
// events gets the deployment's default, as before (and journals it at its
// next turn). A child that has a ledger keeps it: it is the truth.
func (m *Manager) restoreLedger(ctx context.Context, hdr seam.Header, events []agent.Event) {
	if m.store == nil || m.hasLedger(hdr.ID) {
		return
	}
	m.keepLedger(m.rebuildLedger(ctx, hdr, events, m.ancestorLedger(ctx, hdr.Parent)))
}

// ancestorLedger is the ledger of the agent at parent address addr: this
// manager's, or one rebuilt from the store; nil for a root principal and
// for an agent the store cannot give (a one-shot run, which is not
// stored: its budget ended with it).
func (m *Manager) ancestorLedger(ctx context.Context, addr string) *ledger {
	if addr == "" || strings.HasPrefix(addr, seam.PrincipalAddress("")) {
		return nil
	}
	m.budgets.mu.Lock()
	l := m.budgets.ledgers[addr]
	m.budgets.mu.Unlock()
	if l != nil {
		return l
	}
	hdr, err := m.store.Header(ctx, addr)
	if err != nil {
		if !errors.Is(err, seam.ErrNotFound) {
			m.log.Warn("an ancestor's budget cannot be rebuilt; its descendant is held to its own", "agent_id", addr, "err", err)
		}
		return nil
	}
	events, err := m.store.Events(ctx, addr)
	if err != nil {
		m.log.Warn("an ancestor's budget cannot be rebuilt; its descendant is held to its own", "agent_id", addr, "err", err)
		return nil
	}
	return m.keepLedger(m.rebuildLedger(ctx, hdr, events, m.ancestorLedger(ctx, hdr.Parent)))
}

// rebuildLedger is the ledger hdr's journal events record, under parent.
func (m *Manager) rebuildLedger(ctx context.Context, hdr seam.Header, events []agent.Event, parent *ledger) *ledger {
	l := &ledger{id: hdr.ID, parent: parent}
	grant, sp, ok := agent.LastGrant(events, int(hdr.SeedLen))
	if !ok {
		l.limit = m.grantFor(nil)
		if parent != nil {
			m.budgets.mu.Lock()
			l.limit = capped(l.limit, parent.remaining(time.Now()))
			m.budgets.mu.Unlock()
		}
		return l
	}
	l.limit, l.journaled = seam.Budget(*grant.Grant), true
	l.spent = spent{tokens: sp.Tokens, steps: sp.Steps, cost: sp.CostUSD, elapsed: sp.Elapsed}
	d := m.descendantsSpent(ctx, hdr.ID, grant.Time)
	l.spent.tokens += d.Tokens
	l.spent.steps += d.Steps
	l.spent.cost += d.CostUSD
	return l
}

// descendantsSpent is what the stored descendants of agent id spent at or
// after since, read from at most maxBudgetWalk journals (fork seeds left
// out: their spending was the parent's).
func (m *Manager) descendantsSpent(ctx context.Context, id string, since time.Time) agent.Spending {
	var total agent.Spending
	read := 0
	queue := []string{id}
	for len(queue) > 0 && ctx.Err() == nil {
		addr := queue[0]
		queue = queue[1:]
		ls, err := m.store.Listings(ctx, addr, seam.Page{})
		if err != nil {
			m.log.Warn("a descendant's spending cannot be read; its ancestor's budget is rebuilt without it", "agent_id", addr, "err", err)
			continue
		}
		for _, c := range ls {
			if read == maxBudgetWalk {
				m.log.Warn("too many descendants to recount; an ancestor's budget is rebuilt without the rest", "agent_id", id, "read", read)
				return total
			}
			read++
			events, err := m.store.Events(ctx, c.Header.ID)
			if err != nil {
				m.log.Warn("a descendant's spending cannot be read; its ancestor's budget is rebuilt without it", "agent_id", c.Header.ID, "err", err)
			} else {
				// Listings may leave SeedLen zero; a fork's seed is its
				// parent's spending, counted in the parent's journal.
				h, herr := m.store.Header(ctx, c.Header.ID)
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
func (m *Manager) hasLedger(id string) bool {
	m.budgets.mu.Lock()
	defer m.budgets.mu.Unlock()
	return m.budgets.ledgers[id] != nil
}

// keepLedger stores l unless a ledger for its child appeared meanwhile,
// and returns the one kept.
func (m *Manager) keepLedger(l *ledger) *ledger {
	bk := &m.budgets
	bk.mu.Lock()
	defer bk.mu.Unlock()
	if bk.ledgers == nil {
		bk.ledgers = map[string]*ledger{}
	}
	if old := bk.ledgers[l.id]; old != nil {
		return old
	}
	bk.ledgers[l.id] = l
	return l
}
