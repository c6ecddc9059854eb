package manager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/mcp-subagent/mcp-subagent/agent"
)

// errInterrupted is the cause a turn is cancelled with by Interrupt.
var errInterrupted = errors.New("interrupted")

// inboxMsg is one message waiting in a child's inbox.
type inboxMsg struct {
	id     string
	text   string
	source string
	stop   agent.StopReason // a settlement notice's stop reason
}

// waiter is a caller waiting in band for the outcome of the turn that
// handles one message.
type waiter struct {
	ch chan Result // buffered 1; receives the outcome once
}

// activation is a continuable child resident in memory: its driver, its
// inbox (the only turn queue) and the children it owns. One goroutine, run,
// drives it from wake to settlement.
type activation struct {
	m      *Manager
	hdr    Header
	desc   Descriptor
	driver Driver
	parent *activation // the owning parent's activation; nil for a root parent
	ctx    context.Context

	persist     *persister
	unsubscribe func()

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
	last       Result // the outcome of the epoch's last turn
	lastInBand bool   // ...and it was handed to a waiting caller
	usage      Usage  // cumulative over the child's life as known here
	released   chan struct{}
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
	a.inbox = append(a.inbox, inboxMsg{id: id, text: text, source: source})
	a.persist.enqueue(QueuedMessage{ID: id, Text: text, Source: source})
	a.parked = false // the next message sent wakes a parked queue
	if wait {
		w = &waiter{ch: make(chan Result, 1)}
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
	a.persist.enqueue(QueuedMessage{ID: id, Text: text, Source: source, Quiet: true})
	return id, true
}

// next claims the next message, or reports that the activation must
// settle: inbox empty and no owned child left. A parked queue keeps the
// activation resident (idle) until the next message wakes it. While the
// manager shuts down it returns stop without settling.
func (a *activation) next() (msg inboxMsg, injects []inboxMsg, settle, stop bool) {
	for {
		a.mu.Lock()
		if a.ctx.Err() != nil {
			a.mu.Unlock()
			return msg, nil, false, true
		}
		if len(a.inbox) > 0 && !a.parked {
			msg, a.inbox = a.inbox[0], a.inbox[1:]
			injects, a.injects = a.injects, nil
			a.turnMsg = msg.id
			a.mu.Unlock()
			return msg, injects, false, false
		}
		if len(a.owned) == 0 && len(a.inbox) == 0 {
			a.settling = true
			a.mu.Unlock()
			return msg, nil, true, false
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
	// Each epoch (a start or a resume) is one start/end pair of lifecycle
	// events.
	a.m.emit(Event{Type: EventStart, RunID: a.hdr.ID, Provider: a.hdr.Provider, Local: true})
	for {
		msg, injects, settle, stop := a.next()
		if stop {
			a.shutdown()
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
		a.persist.claim(append(ids, msg.id)...)
		inputs = append(inputs, agent.Input{Text: msg.text, Source: msg.source})
		ctx, cancel := context.WithCancelCause(a.ctx)
		a.mu.Lock()
		a.turnCancel = cancel
		a.mu.Unlock()
		tr := a.driver.RunTurn(ctx, inputs)
		cancel(nil)
		res := resultOf(tr)
		a.finishTurn(msg.id, res)
	}
}

func resultOf(tr agent.TurnResult) Result {
	return normalize(Result{Output: tr.Output, Structured: tr.Structured, Diagnostic: tr.Diagnostic,
		StopReason: tr.StopReason, Usage: Usage{InputTokens: tr.Usage.InputTokens, OutputTokens: tr.Usage.OutputTokens, CostUSD: tr.Usage.CostUSD}})
}

func (a *activation) finishTurn(msgID string, res Result) {
	a.mu.Lock()
	a.turnMsg, a.turnCancel = "", nil
	a.last, a.lastInBand = res, false
	a.usage.InputTokens += res.Usage.InputTokens
	a.usage.OutputTokens += res.Usage.OutputTokens
	a.usage.CostUSD += res.Usage.CostUSD
	if w, ok := a.waiters[msgID]; ok {
		w.ch <- res
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
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.turnMsg != "" || (len(a.inbox) > 0 && !a.parked) {
		return "running"
	}
	return "idle"
}

// settle ends the epoch: the agent is quiescent and owns no live child.
// It flushes the projection checkpoint, disposes the driver, releases the
// child from the manager and its parent, and delivers the settlement notice
// (unless the epoch's last turn was already answered in band).
func (a *activation) settle() {
	m := a.m
	a.mu.Lock()
	// next() settles only with an empty inbox, so no waiter is left.
	last, inBand := a.last, a.lastInBand
	a.mu.Unlock()
	m.flush(a, true)
	if err := a.driver.Close(); err != nil {
		m.log.Warn("closing a child's driver failed", "agent_id", a.hdr.ID, "err", err)
	}
	var notice *inboxMsg
	if !inBand {
		notice = &inboxMsg{id: newMessageID(), text: settlementText(a.hdr.ID, last), source: agent.SourceSettled, stop: last.StopReason}
	}
	m.release(a, notice)
	close(a.released)
	m.emit(Event{Type: EventEnd, RunID: a.hdr.ID, Provider: a.hdr.Provider, Local: true, StopReason: last.StopReason, Output: last.Output})
	m.log.Info("subagent settled", "agent_id", a.hdr.ID, "stop_reason", last.StopReason, "in_band", inBand)
}

// shutdown stops an activation as the server stops: no notice; the active
// mark stays, so the next start closes the epoch and announces it.
func (a *activation) shutdown() {
	a.m.flush(a, false)
	_ = a.driver.Close()
	a.m.release(a, nil)
	close(a.released)
	a.m.emit(Event{Type: EventEnd, RunID: a.hdr.ID, Provider: a.hdr.Provider, Local: true, StopReason: agent.StopAborted})
}

// settlementText is the runtime's statement of how an epoch ended.
func settlementText(id string, last Result) string {
	var how string
	switch last.StopReason {
	case agent.StopCompleted:
		how = "finished and will do no further work unless you send it more."
	case agent.StopAborted:
		how = "was stopped before it finished."
	case agent.StopMaxTokens:
		how = "ran out of room before it finished."
	case agent.StopRefusal:
		how = "declined the task."
	default:
		how = "failed before it finished."
	}
	s := fmt.Sprintf("Background subagent %s %s", id, how)
	if last.Diagnostic != "" && last.StopReason != agent.StopCompleted {
		s += " Diagnostic: " + last.Diagnostic
	}
	if strings.TrimSpace(last.Output) != "" {
		return s + "\nIts closing message:\n" + last.Output
	}
	return s + "\nIt left no closing message."
}

// reportText is how a child's report reads to its parent.
func reportText(id, content string) string {
	return fmt.Sprintf("Background subagent %s reported:\n%s", id, content)
}

func newMessageID() string { return "msg-" + NewID()[len("agent-"):] }

// durable waits until everything the activation has admitted so far is
// committed (not the journal events queued after).
func (a *activation) durable() { a.persist.waitFor(a.persist.mark()) }
