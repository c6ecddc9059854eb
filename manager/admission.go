package manager

import (
	"cmp"
	"context"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// DefaultMaxRunningChildren is Options.MaxRunningChildren's default.
const DefaultMaxRunningChildren = 20

// queuedDiagnostic is the diagnostic of a turn stopped while it waited for
// a running slot.
const queuedDiagnostic = "stopped while queued for a running slot (limits.max_running_children or max_running_total); no model request was made"

// admission caps the turns in flight: per principal and in total. Every
// turn of every child, one-shot or continuable, in-process or external,
// takes a seat before its driver runs and leaves it when the driver
// returns. A seat past a cap waits, FIFO by when its turn's message was
// queued; it is never refused. All state is under mu, and no other lock is
// taken while it is held.
type admission struct {
	perPrincipal int // <= 0: no cap
	total        int // <= 0: no cap
	last         atomic.Int64

	mu      sync.Mutex
	running map[string]int     // seats holding a slot of their own, by principal
	all     int                // ...summed
	queues  map[string][]*seat // waiting seats by principal, in FIFO order
	turns   map[string]*seat   // the seat of each child's turn, by child id
	loans   map[string][]*loan // open loans, by the child whose turns may borrow
	seq     uint64
}

// seat is one turn's place: waiting, on a slot of its own, or on a slot a
// waiting caller lent it.
type seat struct {
	principal string
	child     string
	msg       string // the message the turn handles; "" for a one-shot run
	order     int64  // FIFO key: when the message was queued (admission.stamp)
	seq       uint64 // ties
	ready     chan struct{}
	waiting   bool
	held      bool  // it holds a slot of its own (counted against the caps)
	via       *loan // it runs on this loan's lender's slot
	to        *seat // the seat running on its slot
	left      bool
}

func (s *seat) runs() bool { return s.held || s.via != nil }

func before(a, b *seat) bool { return a.order < b.order || (a.order == b.order && a.seq < b.seq) }

// loan is a caller's slot lent, while the caller waits in band, to the
// turns of the child it waits for — up to and including the turn of msg
// ("" for a one-shot run: its only turn). The turns of a caller blocked on
// its child must not need a second slot, or a tree at its cap would wait
// on itself.
type loan struct {
	lender *seat
	child  string
	msg    string
	ended  bool
}

func newAdmission(perPrincipal, total int) *admission {
	if perPrincipal == 0 {
		perPrincipal = DefaultMaxRunningChildren
	}
	return &admission{perPrincipal: perPrincipal, total: total, running: map[string]int{},
		queues: map[string][]*seat{}, turns: map[string]*seat{}, loans: map[string][]*loan{}}
}

// stamp is a message's place in the FIFO order: now in Unix nanoseconds,
// strictly after every earlier stamp (a stored message keeps it, so a
// resume after a restart queues its turns in their old places, as far as
// the clock allows).
func (q *admission) stamp() int64 {
	for {
		last, now := q.last.Load(), time.Now().UnixNano()
		if now <= last {
			now = last + 1
		}
		if q.last.CompareAndSwap(last, now) {
			return now
		}
	}
}

// enter gives a turn its seat: a lent slot if its caller waits for it,
// else a slot of its own if both caps have room and nobody is ahead of it;
// otherwise the seat waits in its principal's queue (see await).
func (q *admission) enter(principal, child, msg string, order int64) *seat {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.seq++
	s := &seat{principal: principal, child: child, msg: msg, order: order, seq: q.seq, ready: make(chan struct{})}
	q.turns[child] = s
	if l := q.lenderFor(child); l != nil {
		q.borrow(s, l)
		return s
	}
	qu := q.queues[principal]
	i := sort.Search(len(qu), func(i int) bool { return before(s, qu[i]) })
	q.queues[principal] = slices.Insert(qu, i, s)
	s.waiting = true
	q.dispatch()
	return s
}

// await waits until s runs; when ctx ends first, s leaves and the cause is
// returned. A seat granted to a turn whose ctx has ended is given back
// too: at shutdown the slot a stopped turn frees must not start the next
// (its turn would be journaled aborted, not left queued for the restart).
func (q *admission) await(ctx context.Context, s *seat) error {
	select {
	case <-s.ready:
		if ctx.Err() == nil {
			return nil
		}
	case <-ctx.Done():
	}
	q.leave(s)
	return context.Cause(ctx)
}

// queued reports whether the child's turn waits for a slot.
func (q *admission) queued(child string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.turns[child]
	return s != nil && s.waiting
}

// leave ends s: its slot goes to the next in line (or back to its
// lender). A seat running on its slot keeps running on one of its own.
func (q *admission) leave(s *seat) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if s.left {
		return
	}
	s.left = true
	if q.turns[s.child] == s {
		delete(q.turns, s.child)
	}
	if s.waiting {
		s.waiting = false
		q.queues[s.principal] = slices.DeleteFunc(q.queues[s.principal], func(x *seat) bool { return x == s })
	}
	if b := s.to; b != nil {
		q.own(b)
	}
	if l := s.via; l != nil {
		s.via, l.lender.to = nil, nil
		if l.msg == "" || l.msg == s.msg {
			q.endLocked(l)
		}
	}
	if s.held {
		s.held = false
		q.running[s.principal]--
		q.all--
	}
	for child, ls := range q.loans { // the lender's turn is over: it lends no more
		for _, l := range ls {
			if l.lender == s {
				l.ended = true
			}
		}
		q.loans[child] = slices.DeleteFunc(ls, func(l *loan) bool { return l.ended })
		if len(q.loans[child]) == 0 {
			delete(q.loans, child)
		}
	}
	q.offer()
	q.dispatch()
}

// lend lends the slot of lenderID's turn in flight to the turns of child,
// up to the turn of msg, until the loan ends. Nil when the lender has no
// turn on a slot (a root caller).
func (q *admission) lend(lenderID, child, msg string) *loan {
	if lenderID == "" {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.turns[lenderID]
	if s == nil || !s.runs() {
		return nil
	}
	l := &loan{lender: s, child: child, msg: msg}
	q.loans[child] = append(q.loans[child], l)
	q.offer()
	return l
}

// end ends a loan when its lender stops waiting. A turn still running on
// the lent slot goes on, on a slot of its own from now on, even past the
// cap (a foreground wait that ran out hands back a handle at once; no new
// turn starts until the count is under the cap again).
func (l *loan) end(q *admission) {
	if l == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if l.ended {
		return
	}
	if b := l.lender.to; b != nil && b.via == l {
		q.own(b)
	}
	q.endLocked(l)
	q.offer()
}

func (q *admission) endLocked(l *loan) {
	l.ended = true
	q.loans[l.child] = slices.DeleteFunc(q.loans[l.child], func(x *loan) bool { return x == l })
	if len(q.loans[l.child]) == 0 {
		delete(q.loans, l.child)
	}
}

// own moves b from its lender's slot to one of its own.
func (q *admission) own(b *seat) {
	if b.via != nil {
		b.via.lender.to = nil
		b.via = nil
	}
	b.held = true
	q.running[b.principal]++
	q.all++
}

// lenderFor returns an open loan to child whose lender's slot is free.
func (q *admission) lenderFor(child string) *loan {
	for _, l := range q.loans[child] {
		if l.lender.runs() && l.lender.to == nil {
			return l
		}
	}
	return nil
}

func (q *admission) borrow(s *seat, l *loan) {
	if s.waiting {
		s.waiting = false
		q.queues[s.principal] = slices.DeleteFunc(q.queues[s.principal], func(x *seat) bool { return x == s })
	}
	s.via, l.lender.to = l, s
	close(s.ready)
}

// offer hands free lent slots to the waiting turns they were lent to.
func (q *admission) offer() {
	for child := range q.loans {
		if s := q.turns[child]; s != nil && s.waiting {
			if l := q.lenderFor(child); l != nil {
				q.borrow(s, l)
			}
		}
	}
}

func (q *admission) room(principal string) bool {
	return (q.perPrincipal <= 0 || q.running[principal] < q.perPrincipal) && (q.total <= 0 || q.all < q.total)
}

// dispatch grants slots while there is room: each time to the earliest
// queued turn (across principals) whose principal is under its cap.
func (q *admission) dispatch() {
	for q.total <= 0 || q.all < q.total {
		var next *seat
		for p, qu := range q.queues {
			if len(qu) == 0 {
				delete(q.queues, p)
				continue
			}
			if q.room(p) && (next == nil || before(qu[0], next)) {
				next = qu[0]
			}
		}
		if next == nil {
			return
		}
		q.queues[next.principal] = q.queues[next.principal][1:]
		next.waiting, next.held = false, true
		q.running[next.principal]++
		q.all++
		close(next.ready)
	}
}

// lendTo lends the caller's slot to the turn that handles msgID, for as
// long as the caller waits on w (see waitTurn).
func (m *Manager) lendTo(w *waiter, caller seam.ParentRef, childID, msgID string) {
	if w != nil {
		w.loan = m.adm.lend(caller.AgentID, childID, msgID)
	}
}

// runTurn runs a claimed turn once it has a seat. A turn stopped while
// queued (interrupted, or its child's writes failed) never reaches its
// driver: it ends aborted, journaled as a turn with its inputs, so the
// journal keeps what the child was given and the stored inbox lets the
// messages go, as for any interrupted turn. At shutdown nothing is
// journaled: the messages stay queued in the store for the next start.
func (a *activation) runTurn(ctx context.Context, msg inboxMsg, inputs []agent.Input) agent.TurnResult {
	q := a.m.adm
	s := q.enter(a.hdr.Principal, a.hdr.ID, msg.id, msg.at)
	defer q.leave(s)
	if err := q.await(ctx, s); err != nil {
		res := agent.TurnResult{StopReason: agent.StopAborted, Diagnostic: queuedDiagnostic}
		if a.ctx.Err() == nil {
			journalSkipped(a.driver.Journal(), inputs, res)
		}
		return res
	}
	return a.m.budgetedTurn(ctx, a.hdr.ID, a.hdr.Parent, msg.budget, a.driver, inputs)
}

// journalSkipped records a turn that ended before its driver ran.
func journalSkipped(j *agent.Journal, inputs []agent.Input, res agent.TurnResult) {
	turn := j.NextTurn()
	j.Append(agent.Event{Kind: agent.EventTurnStart, Turn: turn})
	for _, in := range inputs {
		j.Append(agent.Event{Kind: agent.EventMessage, Turn: turn, Source: cmp.Or(in.Source, agent.SourceUser),
			Message: &llm.Message{Role: llm.RoleUser, Content: in.Text}})
	}
	j.Append(agent.Event{Kind: agent.EventTurnEnd, Turn: turn, StopReason: res.StopReason, Diagnostic: res.Diagnostic})
}

// runTurn runs a one-shot run's turn once it has a seat (on its caller's
// slot when the caller is an agent: it waits for the run).
func (r *oneShot) runTurn(ctx context.Context, prompt string) agent.TurnResult {
	q := r.m.adm
	defer r.loan.end(q)
	s := q.enter(r.principal, r.id, "", r.at)
	defer q.leave(s)
	if err := q.await(ctx, s); err != nil {
		return agent.TurnResult{StopReason: agent.StopAborted, Diagnostic: queuedDiagnostic}
	}
	return r.m.budgetedTurn(ctx, r.id, r.parent, nil, r.drv, []agent.Input{{Text: prompt, Source: agent.SourceUser}})
}
