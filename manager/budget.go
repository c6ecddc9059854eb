package manager

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/llm"
)

// BudgetLimits are the deployment's budget rules (Options.Budget).
type BudgetLimits struct {
	// Default is the budget of a start that asks for none; zero: none.
	Default Budget
	// Max caps every field of what a start or a follow-up asks (an
	// unlimited field included); a zero field caps nothing.
	Max Budget
}

// Check reports a field of b that is not a valid budget value, named as
// the field of what prefix names ("budget" for a tool argument).
func (b Budget) Check(prefix string) error {
	bad := func(field, why string) error {
		return &Error{Code: CodeInvalidRequest, Message: fmt.Sprintf("field %q: %s; 0 (or leaving it out) means no limit", prefix+"."+field, why)}
	}
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	switch {
	case b.Tokens < 0:
		return bad("tokens", "must not be negative")
	case b.Steps < 0:
		return bad("steps", "must not be negative")
	case !finite(b.Seconds) || b.Seconds < 0:
		return bad("seconds", "must be a finite, non-negative number")
	case !finite(b.CostUSD) || b.CostUSD < 0:
		return bad("cost_usd", "must be a finite, non-negative number")
	}
	return nil
}

// capped is b with every field at most max's (an unlimited field of b
// takes max's).
func (b Budget) capped(max Budget) Budget {
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
	limit  Budget
	spent  spent
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
	mu      sync.Mutex
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
func (l *ledger) remaining(now time.Time) Budget {
	var r Budget
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
func (m *Manager) grantFor(asked *Budget) Budget {
	b := m.opts.Budget.Default
	if asked != nil {
		b = *asked
	}
	return b.capped(m.opts.Budget.Max)
}

// openLedger makes the ledger of a new child id under its parent's (a root
// caller has none): its limit is what grant leaves of every ancestor's
// remaining budget.
func (m *Manager) openLedger(id, parentID string, grant Budget) {
	bk := &m.budgets
	bk.mu.Lock()
	defer bk.mu.Unlock()
	if bk.ledgers == nil {
		bk.ledgers = map[string]*ledger{}
	}
	l := &ledger{id: id, parent: bk.ledgers[parentID]}
	if l.parent != nil {
		grant = grant.capped(l.parent.remaining(time.Now()))
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
// has none for (resumed after a restart): the deployment's default under
// parentID's.
func (m *Manager) ledgerOf(id, parentID string) *ledger {
	m.budgets.mu.Lock()
	l := m.budgets.ledgers[id]
	m.budgets.mu.Unlock()
	if l == nil {
		m.openLedger(id, parentID, m.grantFor(nil))
		m.budgets.mu.Lock()
		l = m.budgets.ledgers[id]
		m.budgets.mu.Unlock()
	}
	return l
}

// budgetHook is the in-process agent's check (agent.Config.Budget): no
// model call and no tool round once the child's chain is exhausted.
func (m *Manager) budgetHook(id, parentID string) func(call bool) error {
	return func(bool) error {
		l := m.ledgerOf(id, parentID)
		m.budgets.mu.Lock()
		defer m.budgets.mu.Unlock()
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
func (m *Manager) budgetedTurn(ctx context.Context, id, parentID string, grant *Budget, drv Driver, inputs []agent.Input) agent.TurnResult {
	l := m.ledgerOf(id, parentID)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	m.budgets.mu.Lock()
	now := time.Now()
	if grant != nil {
		b := grant.capped(m.opts.Budget.Max)
		if l.parent != nil {
			b = b.capped(l.parent.remaining(now))
		}
		l.limit, l.spent = b, spent{}
	}
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
