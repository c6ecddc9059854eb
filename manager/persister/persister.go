// Package persister owns a child's only writer (Writer): the ordered,
// batched, fenced commits of its record, journal, inbox and settlement,
// their retry, and the tickets callers wait on. The manager makes one per
// resident child and hands it what it needs; the package imports nothing
// of the manager. Its one lock, Writer.mu, is a leaf (see the manager's
// doc, "Lock order"): it is held across no call out of the package.
package persister

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Writer is a child's only writer. It commits the child's record, its
// journal events and its settlement in order, off the turn's path: the
// agent never waits for a disk sync, and whatever piles up during one sync
// goes out in the next commit. Its goroutine runs only while there is
// something to write: a parked child (a model call held for minutes, an
// idle continuable child) holds no writer goroutine and no stack. Ids handed to callers wait for the record's
// commit (Committed). Events nobody waits for linger (journalLinger) so
// that a short turn's events and its settlement share one commit; a crash
// can lose at most the events of that last moment.
//
// A commit that fails is retried (Retry.Attempts in all, with a doubling
// delay). One that still fails breaks the writer for good: it writes
// nothing more (a later write would have to skip the lost one, and a
// journal must not have gaps), every waiter, present and future, gets the
// error, and Config.OnFail tells the activation, which stops the child. Nothing
// is ever counted as written that was not.
//
// Every write after the claim carries the claim's Fence (owner, epoch):
// once another server took the child over (this manager's lease ran out,
// paused or partitioned), the store refuses it whole with ErrOwned. That
// refusal is not retried: it breaks the writer as above, with an error
// saying the claim was lost (lostClaimErr), and nothing more is written.
type Writer struct {
	store   Store
	ctx     context.Context
	id      string
	owner   string
	log     *slog.Logger
	retry   Retry
	timeout time.Duration
	onFail  func(error)   // called once, from the writer, outside mu
	told    chan struct{} // closed once onFail has returned

	mu      sync.Mutex
	pending seam.ChildWrite
	claimed []string      // dequeues held back to ride with the events that record them
	unseen  int           // user-side messages of the claimed inputs not yet journaled
	urge    chan struct{} // buffered 1: rechecks a lingering write (see awaited)
	// awaited is the highest ticket someone waits for with a hurry: while
	// it is beyond what is written, nothing lingers.
	awaited int64
	drained *sync.Cond // broadcast after each commit, and when the writer goroutine ends
	running bool       // the writer goroutine exists (see start)
	closed  bool
	// issued counts writes queued so far, written those committed: a
	// caller waits for its own write (WaitFor(Mark())) without waiting for
	// everything queued after it.
	issued, written int64
	err             error // the write that failed for good; nothing after it is written
	// fence is the claim every write but the creating one is conditional
	// on: set by the creator once the record (and its claim, epoch 1) is
	// committed, or from Config.Fence for a resumed child (the claim the
	// manager read back). nil only before the creating write.
	fence *seam.Fence

	created   chan struct{} // closed once the record is committed (or failed)
	createErr error
	// lazyRecord lets a new child's record linger like journal progress
	// until someone waits for it (see DeferRecord).
	lazyRecord bool
	onCreated  func() // called once the record is committed; must not block
}

// Store is what a writer needs of the session store (a seam.Store).
type Store interface {
	WriteChild(ctx context.Context, childID string, w seam.ChildWrite) error
	JournalLen(ctx context.Context, childID string) (int64, error)
	Header(ctx context.Context, childID string) (seam.Header, error)
}

// Retry is how a writer retries a failed commit.
type Retry struct {
	Attempts int           // in all; at least one
	Delay    time.Duration // before the first retry; doubled after each
}

// Do runs a write made outside a child's writer with the same bounded
// retry. A write refused for a reason a retry cannot change (ctx ended,
// the child is claimed elsewhere or unknown, the journal is not the length
// the write was made on) is not retried.
func (r Retry) Do(ctx context.Context, write func(ctx context.Context) error) error {
	delay := r.Delay
	var err error
	for i := 0; i < max(r.Attempts, 1); i++ {
		if i > 0 {
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return err
			}
			delay *= 2
		}
		if err = write(ctx); err == nil || ctx.Err() != nil || errors.Is(err, seam.ErrOwned) || errors.Is(err, seam.ErrNotFound) || errors.Is(err, seam.ErrStale) {
			return err
		}
	}
	return err
}

// Config is what a child's writer is given.
type Config struct {
	Store Store
	// Ctx is the context of its store calls: the manager's without its
	// cancellation, so a write is never dropped for a caller or a
	// shutdown. Each call is bounded by Timeout.
	Ctx       context.Context
	Timeout   time.Duration
	ID, Owner string // the child's, and the manager's that writes it
	Log       *slog.Logger
	Retry     Retry
	// Create, when non-nil, is the new child's record, committed first
	// with Claim (its owner's lease); otherwise Fence is the claim the
	// resumed child's writes are conditional on.
	Create *seam.NewChild
	Claim  *seam.Owner
	Fence  *seam.Fence
	// OnFail is called once, from the writer, with no lock held, when the
	// writer breaks for good.
	OnFail func(error)
}

// New returns a child's writer; its goroutine starts with the first write.
func New(c Config) *Writer {
	p := &Writer{store: c.Store, ctx: c.Ctx, timeout: c.Timeout, id: c.ID, owner: c.Owner, log: c.Log, retry: c.Retry, onFail: c.OnFail,
		urge: make(chan struct{}, 1), created: make(chan struct{}), told: make(chan struct{}), fence: c.Fence}
	p.drained = sync.NewCond(&p.mu)
	if c.Create != nil {
		// Not started: the start queues the first message and then waits
		// for the record, so both go out in one commit.
		p.pending.Create, p.pending.Claim = c.Create, c.Claim
		p.issued++
	} else {
		close(p.created)
	}
	return p
}

// OnCreated sets what is called once the record is committed (from the
// writer, with no lock held); it must not block.
func (p *Writer) OnCreated(f func()) {
	p.mu.Lock()
	p.onCreated = f
	p.mu.Unlock()
}

// Created is closed once the record is committed (or failed); at once for
// a resumed child.
func (p *Writer) Created() <-chan struct{} { return p.created }

// Fence is the claim the child's writes are conditional on; nil until
// the record is committed, and for good if it failed.
func (p *Writer) Fence() *seam.Fence {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fence
}

// DeferRecord lets the record, with the first message, linger with the
// turn's events (journalLinger) instead of going out at once: a short
// turn's record, journal and settlement then share one commit. Only for a
// child whose side effects wait for the record (the manager's gatedDriver) and whose id
// reaches its caller only with the outcome. Called before anything is
// queued after the record.
func (p *Writer) DeferRecord() {
	p.mu.Lock()
	p.lazyRecord = true
	p.mu.Unlock()
}

// RecordFailed reports whether the record's commit failed: nothing of the
// child was stored, and its id was never handed out.
func (p *Writer) RecordFailed() bool {
	if !isClosed(p.created) {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.createErr != nil
}

// Recorded reports, without waiting, whether the record is committed.
func (p *Writer) Recorded() bool {
	if !isClosed(p.created) {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.createErr == nil
}

// Committed waits until the child's record is committed.
func (p *Writer) Committed() error {
	<-p.created
	return p.createErr
}

// Add queues an event; it is the journal listener. Messages a turn claimed
// leave the stored inbox in the same commit as the last of the journal
// events that record them (each input is a user-side message; the turn's
// end, for a driver that records fewer), so a crash leaves each message
// queued or journaled, never neither. That commit is made before Add
// returns to the driver, which has not yet acted on its inputs (no model
// call, no process): a crash from then on closes the turn rather than
// running its messages again. This is the one write a turn waits for; the
// rest of its events linger. A new child whose record is deferred does not
// wait: nothing of it is stored and nobody has its id.
func (p *Writer) Add(e agent.Event) {
	p.mu.Lock()
	p.pending.Events = append(p.pending.Events, e)
	taken := false
	if len(p.claimed) > 0 {
		if e.Kind == agent.EventMessage && e.Message != nil && e.Message.Role == seam.RoleUser {
			p.unseen--
		}
		if p.unseen <= 0 || e.Kind == agent.EventTurnEnd {
			p.pending.Dequeue = append(p.pending.Dequeue, p.claimed...)
			p.claimed, p.unseen = nil, 0
			taken = e.Kind != agent.EventTurnEnd && !(p.lazyRecord && p.written == 0)
		}
	}
	p.issued++
	t := p.issued
	p.start()
	p.mu.Unlock()
	if taken && p.WaitFor(t) != nil && p.broken() {
		// Refused (the claim lost to another server) or failed for good:
		// the driver goes on only once onFail has cancelled its turn, so
		// it never acts on messages the store still holds queued.
		<-p.told
	}
}

// broken reports whether a write failed for good.
func (p *Writer) broken() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err != nil
}

// Enqueue records a message admitted to the inbox.
func (p *Writer) Enqueue(q seam.QueuedMessage) {
	p.mu.Lock()
	p.pending.Enqueue = append(p.pending.Enqueue, q)
	p.issued++
	p.start()
	p.mu.Unlock()
}

// Claim records that a turn took these messages, one input each; see Add.
func (p *Writer) Claim(ids ...string) {
	p.mu.Lock()
	p.claimed = append(p.claimed, ids...)
	p.unseen += len(ids)
	p.mu.Unlock()
}

// start makes sure a writer goroutine will see what is pending: it starts
// one unless one runs (which rechecks pending before it ends), the writer
// is broken or closed, or nothing is pending. Called under p.mu.
func (p *Writer) start() {
	if p.running || p.closed || p.err != nil || emptyWrite(p.pending) {
		return
	}
	p.running = true
	go p.run()
}

func emptyWrite(w seam.ChildWrite) bool {
	return w.Create == nil && len(w.Events) == 0 && w.Settle == nil && len(w.Enqueue)+len(w.Dequeue) == 0
}

// run writes until nothing is pending, then ends.
func (p *Writer) run() {
	// A panic here would take the whole server down; the store is the
	// likeliest source (a damaged file), so it becomes a failed write.
	defer func() {
		if r := recover(); r != nil {
			p.fail(fmt.Errorf("the store panicked: %v", r), p.Mark())
			p.mu.Lock()
			p.running = false
			p.drained.Broadcast()
			p.mu.Unlock()
		}
	}()
	for {
		p.linger()
		p.mu.Lock()
		w := p.pending
		p.pending = seam.ChildWrite{}
		if p.err != nil { // broken: nothing more is written
			w = seam.ChildWrite{}
		}
		if w.Create == nil {
			w.Fence = p.fence
		}
		if emptyWrite(w) {
			p.running = false
			p.drained.Broadcast()
			p.mu.Unlock()
			return
		}
		hi := p.issued
		p.mu.Unlock()
		if err := p.write(w); err != nil {
			p.fail(err, hi)
			continue
		}
		if n := len(w.Events); n > 0 && p.log.Enabled(p.ctx, slog.LevelDebug) {
			// What a crash can no longer lose: the journal up to here.
			p.log.Debug("journal committed", "agent_id", p.id, "journal_len", w.Events[n-1].Seq+1)
		}
		if w.Create != nil {
			// A new child's first claim is epoch 1 (seam.Store's
			// Residency); every later write is fenced by it.
			p.mu.Lock()
			p.fence = &seam.Fence{Owner: p.owner, Epoch: 1}
			onCreated := p.onCreated
			p.mu.Unlock()
			// Before the waiters wake: a caller handed its outcome has had
			// its "started" note.
			close(p.created)
			if onCreated != nil {
				onCreated()
			}
		}
		p.mu.Lock()
		p.written = hi
		p.drained.Broadcast()
		p.mu.Unlock()
	}
}

// journalLinger is how long journal events wait for company before they
// are committed when nobody waits for them: a turn that ends within it
// commits its events with its settlement, in one commit instead of two,
// and a long turn's events go out in batches. It is the crash window of
// an unwaited-for journal (see the package doc's caveats).
const journalLinger = 10 * time.Millisecond

// linger holds a write that is only journal progress (events, and the
// inbox messages they record), which nobody waits for, until
// journalLinger passes or someone waits (urge).
func (p *Writer) linger() {
	if !p.lazy() {
		return // the common case pays for no timer
	}
	t := time.NewTimer(journalLinger)
	defer t.Stop()
	for p.lazy() {
		select {
		case <-t.C:
			return
		case <-p.urge: // recheck: an urge for a write already made is stale
		}
	}
}

// lazy reports whether the pending write is only journal progress that
// nobody waits for (or, deferred, a new child's record and first message
// nobody waits for yet).
func (p *Writer) lazy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.pending
	record := w.Create != nil || w.Claim != nil || len(w.Enqueue) > 0
	if record && !(p.lazyRecord && p.written == 0) {
		return false
	}
	return w.Settle == nil && !emptyWrite(w) && !p.closed && p.err == nil && p.awaited <= p.written
}

// hurry marks ticket t as awaited, so the write carrying it does not
// linger, and wakes a lingering writer to see it. Called under p.mu.
func (p *Writer) hurry(t int64) {
	if t > p.awaited {
		p.awaited = t
	}
	select {
	case p.urge <- struct{}{}:
	default:
	}
}

// write commits w, retrying a failed commit. Before a retry it checks
// whether the failed attempt landed after all (a commit can fail after its
// data reached the file): a journal already as long as w's last event, or
// a created record already stored, means it did, and w is not applied
// twice.
func (p *Writer) write(w seam.ChildWrite) error {
	attempts := max(p.retry.Attempts, 1)
	delay := p.retry.Delay
	var err error
	for i := 0; i < attempts; i++ {
		if i > 0 {
			p.log.Warn("retrying a failed child write", "agent_id", p.id, "attempt", i+1, "err", err)
			time.Sleep(delay)
			delay *= 2
			if p.landed(w) {
				return nil
			}
		}
		if err = p.call(func(ctx context.Context) error { return p.store.WriteChild(ctx, p.id, w) }); err == nil || errors.Is(err, seam.ErrOwned) {
			return err // a lost claim stays lost: no retry
		}
	}
	return err
}

// call runs one store call under the writer's context, bounded.
func (p *Writer) call(fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	defer cancel()
	return fn(ctx)
}

func (p *Writer) landed(w seam.ChildWrite) bool {
	if n := len(w.Events); n > 0 {
		var l int64
		err := p.call(func(ctx context.Context) (err error) { l, err = p.store.JournalLen(ctx, p.id); return err })
		return err == nil && l >= w.Events[n-1].Seq+1
	}
	if w.Create != nil {
		return p.call(func(ctx context.Context) error { _, err := p.store.Header(ctx, p.id); return err }) == nil
	}
	return false
}

// fail breaks the writer: the writes up to hi (and everything after) are
// not stored.
func (p *Writer) fail(cause error, hi int64) {
	err := &seam.Error{Code: seam.CodePersistenceUnavailable, AgentID: p.id,
		Message: fmt.Sprintf("storing subagent %s failed (%v); it is stopped, and what it was last given may not have been kept", p.id, cause), Err: cause}
	if errors.Is(cause, seam.ErrOwned) {
		err = lostClaimErr(p.id, cause)
		p.log.Warn(fmt.Sprintf("lost the claim of child %s to another owner; stopping it here, writing nothing more", p.id), "agent_id", p.id, "owner", p.owner, "err", cause)
	} else {
		p.log.Error("persisting a child failed for good; stopping it", "agent_id", p.id, "err", cause)
	}
	p.mu.Lock()
	first := p.err == nil
	if first {
		p.err = err
	}
	p.pending = seam.ChildWrite{}
	p.claimed, p.unseen = nil, 0
	createPending := p.written == 0 && p.createErr == nil && !isClosed(p.created)
	if createPending {
		p.createErr = err
	}
	p.drained.Broadcast()
	p.mu.Unlock()
	if createPending {
		close(p.created)
	}
	if first {
		if p.onFail != nil {
			p.onFail(err)
		}
		close(p.told)
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Flush waits until everything queued so far is committed; with settle it
// first queues the final checkpoint (and the revocation of the claim) and
// notice, so that they commit together.
func (p *Writer) Flush(settle *seam.Checkpoint, notify *seam.ParentNotice) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	if p.closed {
		return errWriterClosed // the server is stopping; nothing waits on it
	}
	if settle != nil {
		p.pending.Settle = settle
		p.pending.Notify = notify
		p.issued++
	}
	if settle != nil && len(p.claimed) > 0 { // a turn that wrote no event
		p.pending.Dequeue = append(p.pending.Dequeue, p.claimed...)
		p.claimed, p.unseen = nil, 0
	}
	t := p.issued
	for p.written < t && p.err == nil {
		p.start()
		p.hurry(t)
		p.drained.Wait()
	}
	return p.err
}

var errWriterClosed = errors.New("the child's writer is closed")

// Mark returns a ticket for everything queued so far.
func (p *Writer) Mark() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.issued
}

// WaitFor waits until the writes up to ticket t are committed (not those
// queued after). It fails when the writer broke before writing them.
func (p *Writer) WaitFor(t int64) error { return p.wait(t, true) }

// WaitLazily is WaitFor without hurrying a lingering write: for a waiter
// whose write something else is about to hurry (the settlement that
// follows the turn).
func (p *Writer) WaitLazily(t int64) error { return p.wait(t, false) }

func (p *Writer) wait(t int64, hurry bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.written < t && p.err == nil && !p.closed {
		p.start()
		if hurry {
			p.hurry(t)
		}
		p.drained.Wait()
	}
	if p.written >= t {
		return nil
	}
	if p.err != nil {
		return p.err
	}
	return &seam.Error{Code: seam.CodePersistenceUnavailable, AgentID: p.id, Message: "the server is stopping; the write was not made", Err: errWriterClosed}
}

// Close stops the writer once it is drained, and waits for its goroutine
// to end.
func (p *Writer) Close() {
	_ = p.Flush(nil, nil)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.hurry(p.issued)
	for p.running {
		p.drained.Wait()
	}
}

// Gate is what a new child's tool rounds wait for: the commit of its
// record, while it is deferred (see Writer.DeferRecord); nothing once it
// is committed, or when it was never deferred. It exists before the
// child's writer: the driver is built with it.
type Gate struct{ wait atomic.Pointer[func() error] }

// DeferTo makes the tool rounds wait for wait.
func (g *Gate) DeferTo(wait func() error) { g.wait.Store(&wait) }

// Hook is budget with the gate before each tool round (call false).
func (g *Gate) Hook(budget func(call bool) error) func(call bool) error {
	return func(call bool) error {
		if w := g.wait.Load(); w != nil && !call {
			if err := (*w)(); err != nil {
				return err
			}
		}
		return budget(call)
	}
}

// lostClaimErr is the error of a write (and of the turn it held) refused
// because another server took the child over: this one's lease ran out.
func lostClaimErr(id string, cause error) *seam.Error {
	return &seam.Error{Code: seam.CodeNotResumable, AgentID: id, Err: cause,
		Message: fmt.Sprintf("this server lost the claim of subagent %s to another server sharing the session store (its lease here ran out): "+
			"the turn's outcome was not kept; the other server closed that turn as interrupted and runs the queued messages; send to it again", id)}
}
