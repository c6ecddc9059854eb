package manager

import (
	"context"
	"errors"
	"sync"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/manager/admission"
	"github.com/mcp-subagent/mcp-subagent/manager/persister"
	"github.com/mcp-subagent/mcp-subagent/manager/remote"
	"github.com/mcp-subagent/mcp-subagent/manager/wording"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// errInterrupted is the cause a turn is cancelled with by Interrupt.
var errInterrupted = errors.New("interrupted")

// inboxMsg is one message waiting in a child's inbox.
type inboxMsg struct {
	id     string
	text   string
	source string
	stop   agent.StopReason // a settlement notice's stop reason
	budget *seam.Budget     // a follow-up's new budget, from its turn on
	at     int64            // when it was queued: its turn's place in admission's FIFO order
	// awaited: a caller waits for its turn's outcome through the store
	// (seam.QueuedMessage.Awaited; see manager/remote).
	awaited bool
}

// queued is the message as the store keeps it.
func (msg inboxMsg) queued() seam.QueuedMessage {
	return seam.QueuedMessage{ID: msg.id, Text: msg.text, Source: msg.source, Budget: msg.budget, At: msg.at, Awaited: msg.awaited}
}

// fromQueued is a stored inbox message as an activation queues it.
func fromQueued(q seam.QueuedMessage) inboxMsg {
	return inboxMsg{id: q.ID, text: q.Text, source: q.Source, budget: q.Budget, at: q.At, awaited: q.Awaited}
}

// waiter is a caller waiting in band for the outcome of the turn that
// handles one message.
type waiter struct {
	ch   chan outcome // buffered 1; receives the outcome once
	p    *persister.Writer
	loan *admission.Loan // the waiting caller's slot, lent to the turn (admission)
}

// outcome is a turn's result and the ticket of the writes that hold it.
type outcome struct {
	res    seam.Result
	ticket int64
	// settling: the child was about to settle when the turn ended, and
	// its settlement (which commits the turn's events too) is urgent
	// anyway, so waiting for the ticket does not hurry the writer: the
	// events and the settlement then go out in one commit.
	settling bool
}

// committed returns o's result once its writes are committed, or the
// failure to commit them as the turn's result.
func (w *waiter) committed(o outcome) seam.Result {
	if o.ticket == 0 {
		return o.res
	}
	wait := w.p.WaitFor
	if o.settling {
		wait = w.p.WaitLazily
	}
	if err := wait(o.ticket); err != nil {
		return failedResult(o.res, err)
	}
	return o.res
}

// failedResult is a turn's result when the child's writes failed: an
// error saying so, keeping the answer the caller would otherwise lose.
func failedResult(res seam.Result, err error) seam.Result {
	res.StopReason = agent.StopError
	res.Structured = nil
	if lostClaim(err) {
		// The answer is not in the journal (the new owner closed the turn
		// as interrupted): it must not read as the turn's outcome.
		res.Output = ""
	}
	res.Diagnostic = truncate.Bound(err.Error(), seam.MaxDiagnostic)
	return res
}

// activation is a continuable child resident in memory: its driver, its
// inbox (the only turn queue) and the children it owns. One goroutine, run,
// drives it from wake to settlement.
type activation struct {
	m      *Manager
	hdr    seam.Header
	desc   seam.Descriptor
	driver seam.Driver
	parent *activation // the owning parent's activation; nil for a root parent
	ctx    context.Context

	persist     *persister.Writer
	unsubscribe func()
	isNew       bool  // a new child: its first turn waits for its record
	gate        int64 // ...and this ticket (record, seed, first message)
	deferred    bool  // ...or only its tool rounds do (see StartContinuable)

	mu         sync.Mutex
	wake       chan struct{} // closed and replaced to wake run
	inbox      []inboxMsg
	injects    []inboxMsg // quiet deliveries, prepended to the next turn
	parked     bool
	turnMsg    string // the message the current turn claimed; "" when idle
	turnCancel context.CancelCauseFunc
	owned      map[string]*activation
	settling   bool
	waiters    map[string]*waiter
	// seen are the ids of every message this activation queued, adopted
	// or loaded: the stored inbox holds them until their turn's events
	// are committed, and adoptStored must not take them twice.
	seen       map[string]bool
	last       seam.Result // the outcome of the epoch's last turn
	lastInBand bool        // ...and it was handed to a waiting caller
	usage      seam.Usage  // cumulative over the child's life as known here
	failed     error       // the child's writes failed for good: it stops
	released   chan struct{}

	// awaitedRan are the ids of the epoch's messages whose callers wait
	// through the store (inboxMsg.awaited) and whose turns ended, and
	// lastAwaited the last turn's if it is one of them: the settlement
	// takes their abandonment marks (see manager/remote).
	awaitedRan  []string
	lastAwaited string
}

func (a *activation) signal() {
	close(a.wake)
	a.wake = make(chan struct{})
}

// admit queues a message as a turn. wait registers an in-band waiter for
// its outcome. It fails only when the activation is settling. The message
// goes to the store through the child's writer; a caller handing its id
// out waits for that (durable).
func (a *activation) admit(text, source string, wait bool) (id string, w *waiter, route string, ok bool) {
	return a.admitBudget(text, source, wait, nil)
}

// admitBudget is admit for a follow-up that grants budget from its turn on.
func (a *activation) admitBudget(text, source string, wait bool, budget *seam.Budget) (id string, w *waiter, route string, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.settling {
		return "", nil, "", false
	}
	route = "woken"
	if a.turnMsg != "" || (len(a.inbox) > 0 && !a.parked) {
		route = "queued"
	}
	id = newMessageID()
	msg := inboxMsg{id: id, text: text, source: source, budget: budget, at: a.m.adm.Stamp()}
	a.inbox = append(a.inbox, msg)
	a.seen[id] = true
	a.persist.Enqueue(msg.queued())
	a.parked = false // the next message sent wakes a parked queue
	if wait {
		w = &waiter{ch: make(chan outcome, 1), p: a.persist}
		a.waiters[id] = w
	}
	a.signal()
	return id, w, route, true
}

// inject records a quiet delivery: no turn of its own, seen with the next.
func (a *activation) inject(text, source string) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.settling {
		return "", false
	}
	id := newMessageID()
	a.injects = append(a.injects, inboxMsg{id: id, text: text, source: source})
	a.seen[id] = true
	a.persist.Enqueue(seam.QueuedMessage{ID: id, Text: text, Source: source, Quiet: true})
	return id, true
}

// next claims the next message, or reports that the activation must
// settle: inbox empty and no owned child left. A parked queue keeps the
// activation resident (idle) until the next message wakes it. While the
// manager shuts down it returns stop without settling; once the child's
// writes failed, fail.
func (a *activation) next() (msg inboxMsg, injects []inboxMsg, settle, stop, fail bool) {
	for {
		a.adoptStored() // cluster.go: what other instances admitted
		a.mu.Lock()
		if a.ctx.Err() != nil {
			a.mu.Unlock()
			return msg, nil, false, true, false
		}
		if a.failed != nil {
			a.settling = true
			a.mu.Unlock()
			return msg, nil, false, false, true
		}
		if len(a.inbox) > 0 && !a.parked {
			msg, a.inbox = a.inbox[0], a.inbox[1:]
			injects, a.injects = a.injects, nil
			a.turnMsg = msg.id
			a.mu.Unlock()
			return msg, injects, false, false, false
		}
		if len(a.owned) == 0 && len(a.inbox) == 0 {
			a.settling = true
			a.mu.Unlock()
			return msg, nil, true, false, false
		}
		wake := a.wake
		a.mu.Unlock()
		select {
		case <-wake:
		case <-a.ctx.Done():
		}
	}
}

func (a *activation) run() {
	defer a.m.wg.Done()
	if a.isNew && !a.deferred {
		// A new child does nothing before its record is committed: no
		// turn, no tool call, no grandchild under an id nobody was given.
		if err := a.persist.WaitFor(a.gate); err != nil {
			a.abandon()
			return
		}
	}
	// Each epoch (a start or a resume) is one start/end pair of lifecycle
	// events.
	a.m.emit(Event{Type: EventStart, RunID: a.hdr.ID, Provider: a.hdr.Provider, Local: true})
	a.m.wg.Add(1)
	go a.watchInterrupts() // remoteinterrupt.go
	for {
		msg, injects, settle, stop, fail := a.next()
		if stop {
			a.shutdown()
			return
		}
		if fail {
			a.fail()
			return
		}
		if settle {
			a.settle()
			return
		}
		inputs := make([]agent.Input, 0, len(injects)+1)
		ids := make([]string, 0, len(injects)+1)
		for _, in := range injects {
			inputs = append(inputs, agent.Input{Text: in.text, Source: in.source})
			ids = append(ids, in.id)
		}
		a.persist.Claim(append(ids, msg.id)...)
		inputs = append(inputs, agent.Input{Text: msg.text, Source: msg.source})
		ctx, cancel := context.WithCancelCause(a.ctx)
		a.mu.Lock()
		a.turnCancel = cancel
		a.mu.Unlock()
		tr := a.runTurn(ctx, msg, inputs)
		cancel(nil)
		res := a.m.commitTurn(a.hdr, resultOf(tr))
		a.finishTurn(msg, res)
	}
}

func (a *activation) finishTurn(msg inboxMsg, res seam.Result) {
	msgID := msg.id
	a.mu.Lock()
	a.turnMsg, a.turnCancel = "", nil
	a.last, a.lastInBand, a.lastAwaited = res, false, ""
	a.usage = a.usage.Add(res.Usage)
	if msg.awaited {
		a.awaitedRan = append(a.awaitedRan, msgID)
		a.lastAwaited = msgID
	}
	if w, ok := a.waiters[msgID]; ok {
		// The turn's events are queued by now (the journal listener runs
		// on Append): the caller gets the outcome once they are committed.
		w.ch <- outcome{res: res, ticket: a.persist.Mark(), settling: len(a.inbox) == 0 && len(a.owned) == 0}
		delete(a.waiters, msgID)
		a.lastInBand = true
	}
	a.mu.Unlock()
	a.m.log.Debug("turn ended", "agent_id", a.hdr.ID, "stop_reason", res.StopReason)
}

// interrupt cancels the current turn and parks the rest of the queue.
func (a *activation) interrupt() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.turnCancel != nil {
		a.turnCancel(errInterrupted)
	}
	a.parked = true
}

// status is the child's derived residency for listing.
func (a *activation) status() string {
	if a.m.adm.Queued(a.hdr.ID) {
		return StatusQueued
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.turnMsg != "" || (len(a.inbox) > 0 && !a.parked) {
		return StatusRunning
	}
	return StatusIdle
}

// settle ends the epoch: the agent is quiescent and owns no live child.
// It commits the projection checkpoint, the revocation of its claim and
// the settlement notice in one write, disposes the driver, releases the
// child from the manager and its parent, and delivers the notice (unless
// the epoch's last turn was already answered in band).
func (a *activation) settle() {
	m := a.m
	a.mu.Lock()
	// next() settles only with an empty inbox, so no waiter is left.
	last, inBand := a.last, a.lastInBand
	ran, lastAwaited := a.awaitedRan, a.lastAwaited
	a.mu.Unlock()
	if len(ran) > 0 && remote.InBand(m.remoteHost(), a.hdr.ID, ran, lastAwaited, func() error { return a.persist.WaitFor(a.persist.Mark()) }) {
		inBand = true
	}
	var notice *inboxMsg
	if !inBand {
		notice = &inboxMsg{id: newMessageID(), text: wording.Settled(a.hdr.ID, last), source: agent.SourceSettled, stop: last.StopReason, at: m.adm.Stamp()}
	}
	notify := m.settleNotice(a, notice)
	revoked := true
	if err := m.flush(a, true, notify); err != nil {
		revoked = false
		// Not stored: the claim stays, so the next start announces the
		// epoch again; the parent is told now all the same.
		notify = nil
	}
	if err := a.driver.Close(); err != nil {
		m.log.Warn("closing a child's driver failed", "agent_id", a.hdr.ID, "err", err)
	}
	m.settleWorktree(a.hdr)
	m.release(a, notice, notify)
	close(a.released)
	m.emit(Event{Type: EventEnd, RunID: a.hdr.ID, Provider: a.hdr.Provider, Local: true, StopReason: last.StopReason, Output: last.Output})
	m.log.Info("subagent settled", "agent_id", a.hdr.ID, "stop_reason", last.StopReason, "in_band", inBand)
	if revoked {
		m.settledQueue(a.hdr) // cluster.go
	}
}

// persistFailed is the writer telling the activation its writes failed
// for good: the turn in flight is cancelled and the child stops.
func (a *activation) persistFailed(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failed == nil {
		a.failed = err
	}
	if a.turnCancel != nil {
		a.turnCancel(err)
	}
	a.signal()
}

// fail stops a child whose writes failed: every caller still waiting gets
// the failure, the queue is dropped (its messages were refused, or their
// ids never handed out), and the parent is told the child failed. The
// claim stays (revoking it is a write too), so the next start
// announces the epoch again from what the store holds.
func (a *activation) fail() {
	m := a.m
	a.mu.Lock()
	err := a.failed
	waiters := a.waiters
	a.waiters = map[string]*waiter{}
	a.inbox, a.injects = nil, nil
	last := a.last
	a.mu.Unlock()
	res := failedResult(seam.Result{}, err)
	for _, w := range waiters {
		w.ch <- outcome{res: res}
	}
	if a.persist.RecordFailed() {
		// A deferred record that was never stored: nobody was given the
		// id (the caller gets the error from Committed), so nobody is told.
		a.abandon()
		m.emit(Event{Type: EventEnd, RunID: a.hdr.ID, Provider: a.hdr.Provider, Local: true, StopReason: agent.StopError})
		return
	}
	a.unsubscribe()
	a.persist.Close()
	if err := a.driver.Close(); err != nil {
		m.log.Warn("closing a child's driver failed", "agent_id", a.hdr.ID, "err", err)
	}
	if lostClaim(err) {
		// The child is another server's now: it closes and announces the
		// epoch. Nothing more is said or written from here.
		m.release(a, nil, nil)
		close(a.released)
		m.emit(Event{Type: EventEnd, RunID: a.hdr.ID, Provider: a.hdr.Provider, Local: true, StopReason: agent.StopError})
		return
	}
	last = failedResult(last, err)
	notice := &inboxMsg{id: newMessageID(), text: wording.Settled(a.hdr.ID, last), source: agent.SourceSettled, stop: agent.StopError, at: m.adm.Stamp()}
	m.release(a, notice, nil)
	close(a.released)
	m.emit(Event{Type: EventEnd, RunID: a.hdr.ID, Provider: a.hdr.Provider, Local: true, StopReason: agent.StopError})
	m.log.Error("subagent stopped: its writes failed", "agent_id", a.hdr.ID, "err", err)
}

// abandon undoes a new child whose record could not be committed: nobody
// was given its id, so nobody is told; it ran nothing.
func (a *activation) abandon() {
	a.mu.Lock()
	a.settling = true
	a.waiters = map[string]*waiter{}
	a.inbox, a.injects = nil, nil
	a.mu.Unlock()
	a.unsubscribe()
	a.persist.Close()
	_ = a.driver.Close() // revokes its callback token
	a.m.dropWorktree(a.hdr.ID, a.hdr.Worktree)
	a.m.release(a, nil, nil)
	close(a.released)
}

// shutdown stops an activation as the server stops: no notice; the claim
// stays, so the next start closes the epoch and announces it.
func (a *activation) shutdown() {
	_ = a.m.flush(a, false, nil)
	_ = a.driver.Close()
	a.m.release(a, nil, nil)
	close(a.released)
	a.m.emit(Event{Type: EventEnd, RunID: a.hdr.ID, Provider: a.hdr.Provider, Local: true, StopReason: agent.StopAborted})
}

func newMessageID() string { return "msg-" + NewID()[len("agent-"):] }

// durable waits until everything the activation has admitted so far is
// committed (not the journal events queued after).
func (a *activation) durable() error { return a.persist.WaitFor(a.persist.Mark()) }

// turnFor commits what a has admitted so far (a message whose id is about
// to be handed out) and returns the turn that waits on w.
func (a *activation) turnFor(w *waiter) (*turn, error) {
	t := &turn{m: a.m, childID: a.hdr.ID, waiter: w, persist: a.persist, ticket: a.persist.Mark()}
	if err := a.persist.WaitFor(t.ticket); err != nil {
		return nil, err
	}
	return t, nil
}
