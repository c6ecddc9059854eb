// Package admission owns the caps on turns in flight: every turn of every
// child — one-shot or continuable, foreground or background, in-process or
// external — takes a Seat before its driver runs and leaves it when the
// driver returns. A Queue caps the seats per principal (its whole tree)
// and in total. A turn past a cap is never refused: it waits, FIFO by when
// its message was queued (Stamp, a place the stored inbox keeps, so a
// resume after a restart queues turns in their old places). A caller
// waiting in band for a child's turn lends that child its own turn's slot
// (Lend) up to the turn it waits for, so a tree at its cap never waits on
// itself; when the wait ends first (Loan.End), the borrowing turn keeps
// running on a slot of its own, even past the cap, and no new turn starts
// until the count is under the cap again.
//
// The manager calls it with ids and stamps only; the package knows nothing
// of children, stores or drivers. Its one mutex (Queue.mu) is a leaf:
// nothing else is called while it is held.
package admission

import (
	"context"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxRunningChildren is the per-principal cap New gives for zero.
const DefaultMaxRunningChildren = 20

// Queue caps the turns in flight: per principal and in total. All state is
// under mu, and no other lock is taken while it is held.
type Queue struct {
	perPrincipal int // <= 0: no cap
	total        int // <= 0: no cap
	last         atomic.Int64

	mu      sync.Mutex
	running map[string]int     // seats holding a slot of their own, by principal
	all     int                // ...summed
	queues  map[string][]*Seat // waiting seats by principal, in FIFO order
	turns   map[string]*Seat   // the seat of each child's turn, by child id
	loans   map[string][]*Loan // open loans, by the child whose turns may borrow
	seq     uint64
}

// Seat is one turn's place: waiting, on a slot of its own, or on a slot a
// waiting caller lent it.
type Seat struct {
	principal string
	child     string
	msg       string // the message the turn handles; "" for a one-shot run
	order     int64  // FIFO key: when the message was queued (Queue.Stamp)
	seq       uint64 // ties
	ready     chan struct{}
	waiting   bool
	held      bool  // it holds a slot of its own (counted against the caps)
	via       *Loan // it runs on this loan's lender's slot
	to        *Seat // the seat running on its slot
	left      bool
}

func (s *Seat) runs() bool { return s.held || s.via != nil }

func before(a, b *Seat) bool { return a.order < b.order || (a.order == b.order && a.seq < b.seq) }

// Loan is a caller's slot lent, while the caller waits in band, to the
// turns of the child it waits for — up to and including the turn of msg
// ("" for a one-shot run: its only turn). The turns of a caller blocked on
// its child must not need a second slot, or a tree at its cap would wait
// on itself.
type Loan struct {
	lender *Seat
	child  string
	msg    string
	ended  bool
}

// New returns a queue capping each principal at perPrincipal seats (zero:
// DefaultMaxRunningChildren; negative: no cap) and all at total (zero or
// negative: no cap beyond each principal's).
func New(perPrincipal, total int) *Queue {
	if perPrincipal == 0 {
		perPrincipal = DefaultMaxRunningChildren
	}
	return &Queue{perPrincipal: perPrincipal, total: total, running: map[string]int{},
		queues: map[string][]*Seat{}, turns: map[string]*Seat{}, loans: map[string][]*Loan{}}
}

// Stamp is a message's place in the FIFO order: now in Unix nanoseconds,
// strictly after every earlier stamp (a stored message keeps it, so a
// resume after a restart queues its turns in their old places, as far as
// the clock allows).
func (q *Queue) Stamp() int64 {
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

// Enter gives a turn its seat: a lent slot if its caller waits for it,
// else a slot of its own if both caps have room and nobody is ahead of it;
// otherwise the seat waits in its principal's queue (see Await).
func (q *Queue) Enter(principal, child, msg string, order int64) *Seat {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.seq++
	s := &Seat{principal: principal, child: child, msg: msg, order: order, seq: q.seq, ready: make(chan struct{})}
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

// Await waits until s runs; when ctx ends first, s leaves and the cause is
// returned. A seat granted to a turn whose ctx has ended is given back
// too: at shutdown the slot a stopped turn frees must not start the next
// (its turn would be journaled aborted, not left queued for the restart).
func (q *Queue) Await(ctx context.Context, s *Seat) error {
	select {
	case <-s.ready:
		if ctx.Err() == nil {
			return nil
		}
	case <-ctx.Done():
	}
	q.Leave(s)
	return context.Cause(ctx)
}

// Queued reports whether the child's turn waits for a slot.
func (q *Queue) Queued(child string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.turns[child]
	return s != nil && s.waiting
}

// Leave ends s: its slot goes to the next in line (or back to its
// lender). A seat running on its slot keeps running on one of its own.
func (q *Queue) Leave(s *Seat) {
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
		q.queues[s.principal] = slices.DeleteFunc(q.queues[s.principal], func(x *Seat) bool { return x == s })
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
		q.loans[child] = slices.DeleteFunc(ls, func(l *Loan) bool { return l.ended })
		if len(q.loans[child]) == 0 {
			delete(q.loans, child)
		}
	}
	q.offer()
	q.dispatch()
}

// Lend lends the slot of lenderID's turn in flight to the turns of child,
// up to the turn of msg, until the loan ends. Nil when the lender has no
// turn on a slot (a root caller).
func (q *Queue) Lend(lenderID, child, msg string) *Loan {
	if lenderID == "" {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.turns[lenderID]
	if s == nil || !s.runs() {
		return nil
	}
	l := &Loan{lender: s, child: child, msg: msg}
	q.loans[child] = append(q.loans[child], l)
	q.offer()
	return l
}

// End ends a loan when its lender stops waiting (nil: nothing). A turn still running on
// the lent slot goes on, on a slot of its own from now on, even past the
// cap (a foreground wait that ran out hands back a handle at once; no new
// turn starts until the count is under the cap again).
func (l *Loan) End(q *Queue) {
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

func (q *Queue) endLocked(l *Loan) {
	l.ended = true
	q.loans[l.child] = slices.DeleteFunc(q.loans[l.child], func(x *Loan) bool { return x == l })
	if len(q.loans[l.child]) == 0 {
		delete(q.loans, l.child)
	}
}

// own moves b from its lender's slot to one of its own.
func (q *Queue) own(b *Seat) {
	if b.via != nil {
		b.via.lender.to = nil
		b.via = nil
	}
	b.held = true
	q.running[b.principal]++
	q.all++
}

// lenderFor returns an open loan to child whose lender's slot is free.
func (q *Queue) lenderFor(child string) *Loan {
	for _, l := range q.loans[child] {
		if l.lender.runs() && l.lender.to == nil {
			return l
		}
	}
	return nil
}

func (q *Queue) borrow(s *Seat, l *Loan) {
	if s.waiting {
		s.waiting = false
		q.queues[s.principal] = slices.DeleteFunc(q.queues[s.principal], func(x *Seat) bool { return x == s })
	}
	s.via, l.lender.to = l, s
	close(s.ready)
}

// offer hands free lent slots to the waiting turns they were lent to.
func (q *Queue) offer() {
	for child := range q.loans {
		if s := q.turns[child]; s != nil && s.waiting {
			if l := q.lenderFor(child); l != nil {
				q.borrow(s, l)
			}
		}
	}
}

func (q *Queue) room(principal string) bool {
	return (q.perPrincipal <= 0 || q.running[principal] < q.perPrincipal) && (q.total <= 0 || q.all < q.total)
}

// dispatch grants slots while there is room: each time to the earliest
// queued turn (across principals) whose principal is under its cap.
func (q *Queue) dispatch() {
	for q.total <= 0 || q.all < q.total {
		var next *Seat
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
