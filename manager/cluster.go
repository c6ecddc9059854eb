package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager/listing"
	"github.com/mcp-subagent/mcp-subagent/manager/remote"
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
// asked to (wait), on the child's journal; awaited: it waits, now or
// after the send returns (FollowupAwaited). ok is false when no other live owner
// holds the child: the caller resumes it here. A child its owner settled
// between the read of its claim and the admission is resumed here, to run
// what its owner left queued (the owner checks its stored inbox after
// settling as well; whichever claims it first runs it).
func (m *Manager) sendElsewhere(ctx context.Context, hdr seam.Header, content string, wait, awaited bool, budget *seam.Budget) (*Sent, bool, error) {
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
		Awaited: awaited && remote.Awaitable(m.store)}
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
	t := &storedWait{&remote.Turn{Host: m.remoteHost(), ChildID: id, MsgID: msg.ID, Text: content, From: from, Wait: wait, Awaited: msg.Awaited}}
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

// storedWait is a turn run at another instance (manager/remote), its
// outcome normalized as a local turn's is.
type storedWait struct{ *remote.Turn }

func (t storedWait) Wait(ctx context.Context) (seam.Result, bool) {
	res, ok := t.Outcome(ctx)
	if ok {
		res = normalize(res)
	}
	return res, ok
}

// remoteHost is what manager/remote needs of the manager.
func (m *Manager) remoteHost() remote.Host {
	return remote.Host{Store: m.store, Log: m.log, Background: m.bg, Write: m.storeWrite, Usage: listing.FoldUsage}
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
// as the store shows it (remote.Running); journal as Running takes it.
func (m *Manager) statusElsewhere(ctx context.Context, id string, journal []agent.Event) string {
	if remote.Running(ctx, m.store, id, journal) {
		return StatusRunning
	}
	return StatusIdle
}

// watchAddr watches a key in the store (seam.Waker: a notice address, or
// a child's id for a send pacing its tries), so another instance's commit
// that signals it wakes a waiter here; nil (never ready) when the store
// has no wake-ups or the watch fails.
func (m *Manager) watchAddr(ctx context.Context, addr string) (<-chan struct{}, func()) {
	wk, ok := m.store.(seam.Waker)
	if !ok {
		return nil, func() {}
	}
	ch, stop, err := wk.Watch(ctx, addr)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Debug("cannot watch the store; only this instance's commits wake this waiter", "key", addr, "err", err)
		}
		return nil, func() {}
	}
	return ch, stop
}
