package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager/listing"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Several instances sharing a store (DESIGN §10): what a call at an
// instance that does not hold the child does. The child stays where it is
// resident; the call goes through the store, and the store's wake-ups
// (seam.Waker) carry it to whoever waits.

// RouteForwarded is a follow-up admitted to the stored inbox of a child
// resident at another instance, which runs it.
const RouteForwarded Route = "forwarded"

// sendElsewhere admits a follow-up for a child another live owner holds:
// it joins the child's stored inbox (a commit that wakes the owner, which
// adopts it and runs it in admission order), and the caller waits, if it
// asked to, on the child's journal. ok is false when no other live owner
// holds the child: the caller resumes it here. A child its owner settled
// between the read of its claim and the admission is resumed here, to run
// what its owner left queued (the owner checks its stored inbox after
// settling as well; whichever claims it first runs it).
func (m *Manager) sendElsewhere(ctx context.Context, hdr seam.Header, content string, wait bool, budget *seam.Budget) (*Sent, bool, error) {
	id := hdr.ID
	c, elsewhere, err := m.heldElsewhere(ctx, id)
	if err != nil {
		return nil, true, sendStoreErr(ctx, id, err)
	}
	if !elsewhere {
		return nil, false, nil
	}
	// Read before the admission, so the turn that runs it starts after.
	from, err := m.store.JournalLen(ctx, id)
	if err != nil {
		return nil, true, sendStoreErr(ctx, id, err)
	}
	msg := seam.QueuedMessage{ID: newMessageID(), Text: content, Source: agent.SourceUser, Budget: budget, At: m.adm.Stamp(),
		Awaited: wait && awaitable(m.store)}
	if err := m.storeWrite(ctx, func(ctx context.Context) error {
		return m.store.WriteChild(ctx, id, seam.ChildWrite{Enqueue: []seam.QueuedMessage{msg}})
	}); err != nil {
		return nil, true, sendStoreErr(ctx, id, err)
	}
	if _, held, err := m.store.ClaimOf(ctx, id); err == nil && !held {
		bg, cancel := m.bg()
		m.runQueued(bg, hdr)
		cancel()
	}
	m.log.Info("follow-up admitted for the child's owner", "agent_id", id, "owner", c.Owner.ID, "message_id", msg.ID)
	t := &storedWait{m: m, childID: id, msgID: msg.ID, text: content, from: from, wait: wait, awaited: msg.Awaited}
	return &Sent{MessageID: msg.ID, Route: RouteForwarded, ChildID: id, Turn: t}, true, nil
}

// heldElsewhere reads id's claim: elsewhere when another owner holds it
// and its lease runs by this manager's clock (othersLive).
func (m *Manager) heldElsewhere(ctx context.Context, id string) (c seam.Claim, elsewhere bool, err error) {
	c, claimed, err := m.store.ClaimOf(ctx, id)
	if err != nil {
		return seam.Claim{}, false, err
	}
	return c, claimed && m.othersLive(c), nil
}

// othersLive reports whether c is another owner's claim whose lease runs
// by this manager's clock.
func (m *Manager) othersLive(c seam.Claim) bool {
	return c.Owner.ID != m.owner && c.Owner.ID != "" && c.Owner.Expires.After(m.now())
}

func sendStoreErr(ctx context.Context, id string, err error) error {
	if ctx.Err() != nil {
		return &seam.Error{Code: seam.CodeCancelled, AgentID: id, Message: "the send was cancelled", Err: err}
	}
	return &seam.Error{Code: seam.CodePersistenceUnavailable, AgentID: id, Err: err,
		Message: fmt.Sprintf("subagent %s runs on another instance and the message could not be admitted in the session store (%v); nothing was queued, send again", id, err)}
}

// storedWait is a turn run wherever its child is resident, waited for on
// the store: woken at each turn's end (seam.Waker), it reads the journal
// from where it stood before the admission, finds the turn whose input is
// the message, and reports it once ended. A turn cut off by its owner's
// loss is closed by the next owner (aborted), which ends the wait too.
//
// The journal does not carry message ids: the turn is the first after the
// admission whose user input is the message's text, so two identical
// messages in flight at once may swap answers (they asked the same). The
// result holds what the journal does (output, stop reason, diagnostic,
// usage), not the structured output or the worktree's changes, which the
// owner's caller would get.
//
// The outcome reaches the caller once, as at one instance, where a turn
// answered in band issues no settlement notice: the message is admitted
// awaited (seam.QueuedMessage.Awaited) and the wait, when it gives up
// (its ctx ends: the wait ran out or the request was cancelled; or the
// store cannot be watched), marks the message abandoned (seam.AwaitMarks)
// BEFORE it reads the journal a last time. The settlement of the child
// that ran the turn takes the mark AFTER the turn's end is committed
// (activation.awaitedInBand) and issues the notice only if the mark was
// set. So, the store being linearizable:
//   - the owner finds no mark: its take came before the mark was set (or
//     none ever was), so after the turn's end was committed, and the
//     caller's last read, after setting the mark, finds the turn ended:
//     the caller has the outcome in band (or it never gave up and read it
//     at a wake-up).
//   - the owner finds the mark: it issues the notice. The caller's last
//     read may find the turn ended too (it ended between the mark and the
//     read), and a caller that then clears its mark before the owner's
//     take narrows that window to the take landing between the two; in it
//     the outcome is delivered twice, never not at all.
//
// A caller that finds the turn ended before it set a mark sets none. Only
// a caller whose instance dies while it waits loses the outcome (and its
// request with it); the journal still holds it.
type storedWait struct {
	m       *Manager
	childID string
	msgID   string
	text    string
	from    int64
	wait    bool
	awaited bool // the message was admitted awaited: a wait given up marks it
}

// Committed: the admission was committed before the turn was handed out.
func (t *storedWait) Committed() error { return nil }

func (t *storedWait) Wait(ctx context.Context) (seam.Result, bool) {
	wk, ok := t.m.store.(seam.Waker)
	if !t.wait || !ok {
		return seam.Result{}, false
	}
	wake, stop, err := wk.Watch(ctx, t.childID)
	if err != nil {
		return t.giveUp()
	}
	defer stop()
	for {
		if res, done := t.outcome(ctx); done {
			return res, true
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return t.giveUp()
		}
	}
}

// giveUp ends a wait that did not see the turn end: the turn may have
// ended meanwhile, so it looks once more; if not, it marks the message
// abandoned and looks a last time (see storedWait for the order).
func (t *storedWait) giveUp() (seam.Result, bool) {
	bg, cancel := t.m.bg()
	defer cancel()
	res, done := t.outcome(bg)
	if done || !t.awaited {
		return res, done
	}
	am := t.m.store.(seam.AwaitMarks) // awaited only when it is one
	if err := t.m.storeWrite(bg, func(ctx context.Context) error { return am.MarkAbandoned(ctx, t.childID, t.msgID, true) }); err != nil {
		t.m.log.Error("a caller waiting at another instance gave up and could not say so in the store: the turn's outcome may reach nobody but the child's journal",
			"agent_id", t.childID, "message_id", t.msgID, "err", err)
	}
	if res, done = t.outcome(bg); done {
		// In band after all: the owner need not issue the notice.
		if err := am.MarkAbandoned(bg, t.childID, t.msgID, false); err != nil {
			t.m.log.Debug("clearing the mark of a wait given up failed; the settlement notice may repeat the outcome", "agent_id", t.childID, "err", err)
		}
	}
	return res, done
}

// awaitable reports whether a caller can wait in band through st for a
// turn run at another instance without the owner also issuing its
// settlement notice: st wakes waiters and keeps abandonment marks.
func awaitable(st seam.Store) bool {
	_, wakes := st.(seam.Waker)
	_, marks := st.(seam.AwaitMarks)
	return wakes && marks
}

// outcome reads the journal past t.from for the message's turn; done when
// it ended. It moves t.from past the turns that are not it.
func (t *storedWait) outcome(ctx context.Context) (seam.Result, bool) {
	events, err := t.m.store.EventsFrom(ctx, t.childID, t.from)
	if err != nil {
		if ctx.Err() == nil {
			t.m.log.Debug("reading a child's journal for a waiting caller failed; retrying at the next wake-up", "agent_id", t.childID, "err", err)
		}
		return seam.Result{}, false
	}
	start, mine := -1, false // the open turn's index in events, and whether it is the message's
	for i, e := range events {
		switch {
		case e.Kind == agent.EventTurnStart:
			start, mine = i, false
		case start >= 0 && e.Kind == agent.EventMessage && e.Message != nil && e.Message.Role == seam.RoleUser &&
			e.Source == agent.SourceUser && e.Message.Content == t.text:
			mine = true
		case start >= 0 && e.Kind == agent.EventTurnEnd:
			if mine {
				turn := events[start : i+1]
				out := agent.LastOutcome(turn)
				return normalize(seam.Result{Output: out.Output, StopReason: out.StopReason, Diagnostic: out.Diagnostic, Usage: listing.FoldUsage(turn)}), true
			}
			start = -1
		}
	}
	// Ended turns that are not the message's are never read again.
	if start >= 0 {
		t.from += int64(start)
	} else {
		t.from += int64(len(events))
	}
	return seam.Result{}, false
}

// adoptStored moves into a resident activation's inbox the messages other
// instances admitted to its stored inbox: each once (seen), in the FIFO
// order of their admission stamps among what is queued and not yet run.
// Called by next, outside a.mu, before it takes each message and after
// each wake-up (the store's wake-up of an admission too, see
// watchInterrupts), so a message admitted elsewhere before a local one is
// run before it.
func (a *activation) adoptStored() {
	if !shared(a.m.store) {
		return // nobody else admits to its stored inbox
	}
	ctx, cancel := context.WithTimeout(a.ctx, storeTimeout)
	defer cancel()
	queued, err := a.m.store.Queued(ctx, a.hdr.ID)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, seam.ErrNotFound) {
			a.m.log.Debug("reading a child's stored inbox failed; retrying at the next wake-up", "agent_id", a.hdr.ID, "err", err)
		}
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.settling {
		return // the settlement looks at the stored inbox once more (settledQueue)
	}
	adopted := false
	for _, q := range queued {
		if a.seen[q.ID] {
			continue
		}
		a.seen[q.ID] = true
		msg := fromQueued(q)
		if q.Quiet {
			a.injects = append(a.injects, msg)
			continue
		}
		a.inbox = append(a.inbox, msg)
		a.parked = false // as a local send wakes a parked queue
		adopted = true
	}
	if adopted {
		slices.SortStableFunc(a.inbox, func(x, y inboxMsg) int {
			switch {
			case x.at < y.at:
				return -1
			case x.at > y.at:
				return 1
			}
			return 0
		})
		a.signal()
		a.m.log.Debug("adopted messages admitted at another instance", "agent_id", a.hdr.ID)
	}
}

// settledQueue runs, here, the messages an instance admitted to a child's
// stored inbox while it settled (after its last look, before the claim was
// revoked): the sender resumes it too if it sees the claim gone, and
// whichever claims it first runs them.
func (m *Manager) settledQueue(h seam.Header) {
	if !shared(m.store) {
		return // nobody else admits to its stored inbox
	}
	ctx, cancel := m.bg()
	defer cancel()
	m.runQueued(ctx, h)
}

// shared reports whether another instance can admit messages to st's
// inboxes (seam.Shared; a store that does not say may be shared).
func shared(st seam.Store) bool {
	s, ok := st.(seam.Shared)
	return !ok || s.Shared()
}

// elsewhere is every claim of another owner whose lease runs by this
// manager's clock: children resident at other instances, by id. A store
// that cannot say yields none (they list as stored).
func (m *Manager) elsewhere(ctx context.Context) map[string]seam.Claim {
	claims, err := m.store.Residents(ctx)
	if err != nil {
		m.log.Debug("reading the store's claims for a listing failed", "err", err)
		return nil
	}
	out := map[string]seam.Claim{}
	for _, c := range claims {
		if m.othersLive(c) {
			out[c.ChildID] = c
		}
	}
	return out
}

// statusElsewhere is the status of a child resident at another instance
// as the store shows it: running while its journal's last turn is open or
// a message waits in its stored inbox, idle otherwise — and idle too with
// a queue behind an interrupted turn (an interrupt parks the queue until
// the next send; the store does not tell a parked queue from one about to
// run, so a turn cut off by a takeover lists idle until the next starts).
// journal is the child's journal when the caller read it; nil: its last
// event is read here.
func (m *Manager) statusElsewhere(ctx context.Context, id string, journal []agent.Event) string {
	var last *agent.Event
	if journal != nil {
		if len(journal) > 0 {
			last = &journal[len(journal)-1]
		}
	} else if n, err := m.store.JournalLen(ctx, id); err == nil && n > 0 {
		if es, err := m.store.EventsFrom(ctx, id, n-1); err == nil && len(es) == 1 {
			last = &es[0]
		}
	}
	if last != nil && last.Kind != agent.EventTurnEnd {
		return StatusRunning
	}
	queued, err := m.store.Queued(ctx, id)
	if err == nil && slices.ContainsFunc(queued, func(q seam.QueuedMessage) bool { return !q.Quiet }) &&
		(last == nil || last.StopReason != agent.StopAborted) {
		return StatusRunning
	}
	return StatusIdle
}

// residentElsewhere are the listings of parent's children resident at
// other instances (claims as elsewhere reads them).
func (m *Manager) residentElsewhere(ctx context.Context, parent string, claims map[string]seam.Claim) []seam.Listing {
	var ls []seam.Listing
	for id, c := range claims {
		if c.Parent != "" && c.Parent != parent {
			continue // another parent's, maybe another principal's: its header is not read
		}
		h, err := m.store.Header(ctx, id)
		if err == nil && h.Parent == parent {
			ls = append(ls, seam.Listing{Header: h})
		}
	}
	return ls
}

// watchAddr watches addr in the store, so a notice another instance
// queued under it wakes a waiter here; nil (never ready) when the store
// has no wake-ups or the watch fails.
func (m *Manager) watchAddr(ctx context.Context, addr string) (<-chan struct{}, func()) {
	wk, ok := m.store.(seam.Waker)
	if !ok {
		return nil, func() {}
	}
	ch, stop, err := wk.Watch(ctx, addr)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Debug("cannot watch the store for notices; only this instance's wake this waiter", "address", addr, "err", err)
		}
		return nil, func() {}
	}
	return ch, stop
}
