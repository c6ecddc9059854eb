package manager

import (
	"context"
	"slices"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager/listing"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// AwaitTurn returns the turn of message msgID in child childID for a
// caller that sent it without waiting and now waits after all: a durable
// MCP task (package tasks), whose handle is replied before the turn ends.
// While the message is queued or its turn runs in a resident activation,
// the turn's outcome comes in band, as to a caller that started it with
// wait (so the epoch's settlement is not announced a second time), and
// step hears the child's progress notes (nil: none). Otherwise the turn
// is over: it reports the activation's last outcome, or with no
// activation the stored journal's, which for a child's first turn (the
// only one a start's caller can know of) is that turn's.
func (m *Manager) AwaitTurn(childID, msgID string, step func(string)) Turn {
	m.mu.Lock()
	a := m.live[childID]
	m.mu.Unlock()
	if a == nil {
		return storedTurn{m: m, childID: childID}
	}
	a.mu.Lock()
	pending := a.turnMsg == msgID || slices.ContainsFunc(a.inbox, func(x inboxMsg) bool { return x.id == msgID })
	if !pending {
		last := a.last
		a.mu.Unlock()
		return doneTurn(last)
	}
	w := &waiter{ch: make(chan outcome, 1), p: a.persist}
	a.waiters[msgID] = w
	a.mu.Unlock()
	t := &turn{m: m, childID: childID, waiter: w, persist: a.persist}
	if step != nil {
		_, t.progress = agent.TurnProgress(a.driver.Journal(), step)
	}
	return t
}

// AwaitSent is AwaitTurn for a follow-up the caller sent itself without
// waiting (sent as Followup returned it) and now waits on after all, as a
// durable MCP task does. A follow-up forwarded to a child resident at
// another instance (RouteForwarded) is waited on the store, from where the
// journal stood before its admission (manager/remote): this instance holds
// no activation whose waiters it could join. step hears no progress notes
// for such a turn (the store wakes a waiter at a turn's end only). Any
// other is AwaitTurn's.
func (m *Manager) AwaitSent(sent *Sent, step func(string)) Turn {
	if t, ok := sent.Turn.(*storedWait); ok {
		w := *t.Turn
		w.Wait = true
		return &storedWait{&w}
	}
	return m.AwaitTurn(sent.ChildID, sent.MessageID, step)
}

// LastOutcome is the outcome of a child's last stored turn (StopReason
// empty when none ended), with the usage of its whole journal: what a
// restart can still tell of a turn whose waiter it lost.
func (m *Manager) LastOutcome(ctx context.Context, childID string) (seam.Result, error) {
	if m.store == nil {
		return seam.Result{}, newErr(seam.CodePersistenceUnavailable, "no session store is configured")
	}
	events, err := m.store.Events(ctx, childID)
	if err != nil {
		return seam.Result{}, err
	}
	out := agent.LastOutcome(events)
	return seam.Result{Output: out.Output, StopReason: out.StopReason, Diagnostic: out.Diagnostic, Usage: listing.FoldUsage(events)}, nil
}

// doneTurn is a turn that already ended.
type doneTurn seam.Result

func (d doneTurn) Wait(context.Context) (seam.Result, bool) { return seam.Result(d), true }
func (doneTurn) Committed() error                           { return nil }

// storedTurn is a turn of a child no longer resident: its outcome is the
// stored journal's last.
type storedTurn struct {
	m       *Manager
	childID string
}

func (s storedTurn) Wait(ctx context.Context) (seam.Result, bool) {
	res, err := s.m.LastOutcome(ctx, s.childID)
	if err != nil || res.StopReason == "" {
		return seam.Result{}, false
	}
	return normalize(res), true
}

func (storedTurn) Committed() error { return nil }
