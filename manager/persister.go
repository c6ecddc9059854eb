package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// persister is a child's only writer. It commits the child's record, its
// journal events and its settlement in order, off the turn's path: the
// agent never waits for a disk sync, and whatever piles up during one sync
// goes out in the next commit. Its goroutine runs only while there is
// something to write: a parked child (a model call held for minutes, an
// idle continuable child) holds no writer goroutine and no stack. Ids handed to callers wait for the record's
// commit (committed). Events nobody waits for linger (journalLinger) so
// that a short turn's events and its settlement share one commit; a crash
// can lose at most the events of that last moment.
//
// A commit that fails is retried (retry.attempts in all, with a doubling
// delay). One that still fails breaks the writer for good: it writes
// nothing more (a later write would have to skip the lost one, and a
// journal must not have gaps), every waiter, present and future, gets the
// error, and onFail tells the activation, which stops the child. Nothing
// is ever counted as written that was not.
//
// Every write after the claim carries the claim's Fence (owner, epoch):
// once another server took the child over (this manager's lease ran out,
// paused or partitioned), the store refuses it whole with ErrOwned. That
// refusal is not retried: it breaks the writer as above, with an error
// saying the claim was lost (lostClaim), and nothing more is written.
type persister struct {
	store  seam.Store
	ctx    context.Context // the manager's, without its cancellation: a write is never dropped for a caller or a shutdown
	id     string
	owner  string
	log    *slog.Logger
	retry  retryPolicy
	onFail func(error)   // called once, from the writer, outside mu
	told   chan struct{} // closed once onFail has returned

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
	// caller waits for its own write (waitFor(mark())) without waiting for
	// everything queued after it.
	issued, written int64
	err             error // the write that failed for good; nothing after it is written
	// fence is the claim every write but the creating one is conditional
	// on: set by the creator once the record (and its claim, epoch 1) is
	// committed, or by activate for a resumed child from the claim it
	// read back. nil only before the creating write.
	fence *seam.Fence

	created   chan struct{} // closed once the record is committed (or failed)
	createErr error
	// lazyRecord lets a new child's record linger like journal progress
	// until someone waits for it (see deferRecord).
	lazyRecord bool
	onCreated  func() // called once the record is committed; must not block
}

// retryPolicy is how a child's writer retries a failed commit.
type retryPolicy struct {
	attempts int
	delay    time.Duration // before the first retry; doubled after each
}

// newPersister starts a child's writer. create, when non-nil, is the new
// child's record, committed first with the claim of its owner; otherwise
// fence is the claim the resumed child's writes are conditional on.
func (m *Manager) newPersister(id string, create *seam.NewChild, fence *seam.Fence) *persister {
	p := &persister{store: m.store, ctx: context.WithoutCancel(m.ctx), id: id, owner: m.owner, log: m.log, retry: m.retry, urge: make(chan struct{}, 1),
		created: make(chan struct{}), told: make(chan struct{}), fence: fence}
	p.drained = sync.NewCond(&p.mu)
	if create != nil {
		lease := m.lease()
		// Not started: the start queues the first message and then waits
		// for the record, so both go out in one commit.
		p.pending.Create, p.pending.Claim = create, &lease
		p.issued++
	} else {
		close(p.created)
	}
	return p
}

// deferRecord lets the record, with the first message, linger with the
// turn's events (journalLinger) instead of going out at once: a short
// turn's record, journal and settlement then share one commit. Only for a
// child whose side effects wait for the record (gatedDriver) and whose id
// reaches its caller only with the outcome. Called before anything is
// queued after the record.
func (p *persister) deferRecord() {
	p.mu.Lock()
	p.lazyRecord = true
	p.mu.Unlock()
}

// recordFailed reports whether the record's commit failed: nothing of the
// child was stored, and its id was never handed out.
func (p *persister) recordFailed() bool {
	if !isClosed(p.created) {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.createErr != nil
}

// recorded reports, without waiting, whether the record is committed.
func (p *persister) recorded() bool {
	if !isClosed(p.created) {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.createErr == nil
}

// committed waits until the child's record is committed.
func (p *persister) committed() error {
	<-p.created
	return p.createErr
}

// add queues an event; it is the journal listener. Messages a turn claimed
// leave the stored inbox in the same commit as the last of the journal
// events that record them (each input is a user-side message; the turn's
// end, for a driver that records fewer), so a crash leaves each message
// queued or journaled, never neither. That commit is made before add
// returns to the driver, which has not yet acted on its inputs (no model
// call, no process): a crash from then on closes the turn rather than
// running its messages again. This is the one write a turn waits for; the
// rest of its events linger. A new child whose record is deferred does not
// wait: nothing of it is stored and nobody has its id.
func (p *persister) add(e agent.Event) {
	p.mu.Lock()
	p.pending.Events = append(p.pending.Events, e)
	taken := false
	if len(p.claimed) > 0 {
		if e.Kind == agent.EventMessage && e.Message != nil && e.Message.Role == llm.RoleUser {
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
	if taken && p.waitFor(t) != nil && p.broken() {
		// Refused (the claim lost to another server) or failed for good:
		// the driver goes on only once onFail has cancelled its turn, so
		// it never acts on messages the store still holds queued.
		<-p.told
	}
}

// broken reports whether a write failed for good.
func (p *persister) broken() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err != nil
}

// enqueue records a message admitted to the inbox.
func (p *persister) enqueue(q seam.QueuedMessage) {
	p.mu.Lock()
	p.pending.Enqueue = append(p.pending.Enqueue, q)
	p.issued++
	p.start()
	p.mu.Unlock()
}

// claim records that a turn took these messages, one input each; see add.
func (p *persister) claim(ids ...string) {
	p.mu.Lock()
	p.claimed = append(p.claimed, ids...)
	p.unseen += len(ids)
	p.mu.Unlock()
}

// start makes sure a writer goroutine will see what is pending: it starts
// one unless one runs (which rechecks pending before it ends), the writer
// is broken or closed, or nothing is pending. Called under p.mu.
func (p *persister) start() {
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
func (p *persister) run() {
	// A panic here would take the whole server down; the store is the
	// likeliest source (a damaged file), so it becomes a failed write.
	defer func() {
		if r := recover(); r != nil {
			p.fail(fmt.Errorf("the store panicked: %v", r), p.mark())
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
			p.mu.Unlock()
			// Before the waiters wake: a caller handed its outcome has had
			// its "started" note.
			close(p.created)
			if p.onCreated != nil {
				p.onCreated()
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
func (p *persister) linger() {
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
func (p *persister) lazy() bool {
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
func (p *persister) hurry(t int64) {
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
func (p *persister) write(w seam.ChildWrite) error {
	attempts := max(p.retry.attempts, 1)
	delay := p.retry.delay
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
func (p *persister) call(fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(p.ctx, storeTimeout)
	defer cancel()
	return fn(ctx)
}

func (p *persister) landed(w seam.ChildWrite) bool {
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
func (p *persister) fail(cause error, hi int64) {
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

// flush waits until everything queued so far is committed; with settle it
// first queues the final checkpoint (and the revocation of the claim) and
// notice, so that they commit together.
func (p *persister) flush(settle *seam.Checkpoint, notify *seam.ParentNotice) error {
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

// mark returns a ticket for everything queued so far.
func (p *persister) mark() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.issued
}

// waitFor waits until the writes up to ticket t are committed (not those
// queued after). It fails when the writer broke before writing them.
func (p *persister) waitFor(t int64) error { return p.wait(t, true) }

// waitLazily is waitFor without hurrying a lingering write: for a waiter
// whose write something else is about to hurry (the settlement that
// follows the turn).
func (p *persister) waitLazily(t int64) error { return p.wait(t, false) }

func (p *persister) wait(t int64, hurry bool) error {
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

// close stops the writer once it is drained, and waits for its goroutine
// to end.
func (p *persister) close() {
	_ = p.flush(nil, nil)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.hurry(p.issued)
	for p.running {
		p.drained.Wait()
	}
}

// storeTimeout bounds one store call the manager makes on its own behalf
// (its writers, settlements, recovery, and lookups whose caller passed no
// context). bbolt and the in-memory store check a context only before they
// start; a network store aborts a call when it expires.
const storeTimeout = 30 * time.Second

// bg is the context of a store call made on the manager's own behalf: not
// cancelled by a caller leaving or by Close (a settlement write, a notice
// or a shutdown checkpoint must not be dropped), bounded by storeTimeout.
func (m *Manager) bg() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(m.ctx), storeTimeout)
}

// storeWrite runs a write outside a child's writer with the same bounded
// retry. A write refused for a reason a retry cannot change (ctx ended,
// the child is claimed elsewhere or unknown) is not retried.
func (m *Manager) storeWrite(ctx context.Context, write func(ctx context.Context) error) error {
	delay := m.retry.delay
	var err error
	for i := 0; i < max(m.retry.attempts, 1); i++ {
		if i > 0 {
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return err
			}
			delay *= 2
		}
		if err = write(ctx); err == nil || ctx.Err() != nil || errors.Is(err, seam.ErrOwned) || errors.Is(err, seam.ErrNotFound) {
			return err
		}
	}
	return err
}

// lostClaimErr is the error of a write (and of the turn it held) refused
// because another server took the child over: this one's lease ran out.
func lostClaimErr(id string, cause error) *seam.Error {
	return &seam.Error{Code: seam.CodeNotResumable, AgentID: id, Err: cause,
		Message: fmt.Sprintf("this server lost the claim of subagent %s to another server sharing the session store (its lease here ran out): "+
			"the turn's outcome was not kept; the other server closed that turn as interrupted and runs the queued messages; send to it again", id)}
}

// lostClaim reports whether err is a write refused because the child was
// taken over.
func lostClaim(err error) bool { return errors.Is(err, seam.ErrOwned) }

// now is the manager's clock (Options.Clock).
func (m *Manager) now() time.Time {
	if m.opts.Clock != nil {
		return m.opts.Clock()
	}
	return time.Now()
}

// lease is the manager's owner record as of now: claims made or renewed
// with it expire after the lease TTL.
func (m *Manager) lease() seam.Owner {
	return seam.Owner{ID: m.owner, Expires: m.now().Add(m.opts.LeaseTTL)}
}

// startRenewer starts the goroutine that renews the manager's claims while
// any child is resident; called under m.mu when a child becomes resident,
// and by Recover. It ends on its own once nothing is resident (the next
// resident child starts it again) unless Recover made it sweep too (then
// it runs until Close: a server with nothing resident must still take
// over a dead server's children), and at Close; Close waits for it (m.wg).
func (m *Manager) startRenewer() {
	if m.renewing || m.store == nil {
		return
	}
	m.renewing = true
	m.wg.Add(1)
	go m.renew()
}

func (m *Manager) renew() {
	defer m.wg.Done()
	t := time.NewTicker(m.opts.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			m.mu.Lock()
			m.renewing = false
			m.mu.Unlock()
			return
		case <-t.C:
		}
		m.mu.Lock()
		resident, sweeping := len(m.live) > 0, m.sweeping
		if !resident && !sweeping {
			m.renewing = false
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
		if resident {
			// Bounded by the lease itself: a renewal later than that is moot.
			ctx, cancel := context.WithTimeout(m.ctx, m.opts.LeaseTTL/3)
			if err := m.store.Renew(ctx, m.lease()); err != nil {
				m.log.Error("renewing the lease on resident children failed; retrying at the next tick", "owner", m.owner, "err", err)
			}
			cancel()
		}
		if sweeping {
			m.startSweep()
		}
	}
}

// letGo ends the manager's lease at Close: its claims stay (the next start
// announces their epochs, as after a crash) but are expired, so a manager
// started next on the same store need not wait out the TTL. A failure is
// logged: the claims then expire on their own.
func (m *Manager) letGo(ctx context.Context) {
	if m.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if err := m.store.Renew(ctx, seam.Owner{ID: m.owner, Expires: m.now()}); err != nil {
		m.log.Warn("letting the lease on resident children go failed; they expire after the lease", "owner", m.owner, "err", err)
	}
}
