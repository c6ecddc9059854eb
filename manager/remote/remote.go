// Package remote owns what an instance reads of a child resident at
// another instance sharing the store (its owner): whether it runs, the
// listings of such children, and a turn that a caller here waits for
// there, both sides of the wait. The waiting side (Turn), woken at each turn's
// end (seam.Waker), reads the journal from where it stood before the
// admission, finds the turn whose input is the message, and reports it
// once ended. A turn cut off by its owner's
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
// (InBand) and issues the notice only if the mark was set. So, the store being linearizable:
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
package remote

import (
	"context"
	"log/slog"
	"slices"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Host is what a Turn needs of the manager.
type Host struct {
	Store seam.Store
	Log   *slog.Logger
	// Background is a context for a store call that must outlive the
	// caller's (bounded by the manager's store timeout).
	Background func() (context.Context, context.CancelFunc)
	// Write runs a store write with the manager's bounded retry.
	Write func(ctx context.Context, write func(ctx context.Context) error) error
	// Usage is what a turn's events used (listing.FoldUsage).
	Usage func(turn []agent.Event) seam.Usage
}

// Turn is the turn that handles a message admitted to the stored inbox
// of a child resident elsewhere: the first after the admission whose user
// input is the message's text.
type Turn struct {
	Host
	ChildID string
	MsgID   string
	Text    string
	From    int64 // the journal's length before the admission
	Wait    bool  // the caller waits for the outcome
	Awaited bool  // the message was admitted awaited: a wait given up marks it
}

// Committed: the admission was committed before the turn was handed out.
func (t *Turn) Committed() error { return nil }

// Outcome waits for the turn's outcome (its result as the journal holds
// it) if the caller waits; ok false when ctx ends first or nobody waits.
func (t *Turn) Outcome(ctx context.Context) (seam.Result, bool) {
	wk, ok := t.Store.(seam.Waker)
	if !t.Wait || !ok {
		return seam.Result{}, false
	}
	wake, stop, err := wk.Watch(ctx, t.ChildID)
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
func (t *Turn) giveUp() (seam.Result, bool) {
	bg, cancel := t.Background()
	defer cancel()
	res, done := t.outcome(bg)
	if done || !t.Awaited {
		return res, done
	}
	am := t.Store.(seam.AwaitMarks) // awaited only when it is one
	if err := t.Write(bg, func(ctx context.Context) error { return am.MarkAbandoned(ctx, t.ChildID, t.MsgID, true) }); err != nil {
		t.Log.Error("a caller waiting at another instance gave up and could not say so in the store: the turn's outcome may reach nobody but the child's journal",
			"agent_id", t.ChildID, "message_id", t.MsgID, "err", err)
	}
	if res, done = t.outcome(bg); done {
		// In band after all: the owner need not issue the notice.
		if err := am.MarkAbandoned(bg, t.ChildID, t.MsgID, false); err != nil {
			t.Log.Debug("clearing the mark of a wait given up failed; the settlement notice may repeat the outcome", "agent_id", t.ChildID, "err", err)
		}
	}
	return res, done
}

// Awaitable reports whether a caller can wait in band through st for a
// turn run at another instance without the owner also issuing its
// settlement notice: st wakes waiters and keeps abandonment marks.
func Awaitable(st seam.Store) bool {
	_, wakes := st.(seam.Waker)
	_, marks := st.(seam.AwaitMarks)
	return wakes && marks
}

// outcome reads the journal past t.From for the message's turn; done when
// it ended. It moves t.From past the turns that are not it.
func (t *Turn) outcome(ctx context.Context) (seam.Result, bool) {
	events, err := t.Store.EventsFrom(ctx, t.ChildID, t.From)
	if err != nil {
		if ctx.Err() == nil {
			t.Log.Debug("reading a child's journal for a waiting caller failed; retrying at the next wake-up", "agent_id", t.ChildID, "err", err)
		}
		return seam.Result{}, false
	}
	start, mine := -1, false // the open turn's index in events, and whether it is the message's
	for i, e := range events {
		switch {
		case e.Kind == agent.EventTurnStart:
			start, mine = i, false
		case start >= 0 && e.Kind == agent.EventMessage && e.Message != nil && e.Message.Role == seam.RoleUser &&
			e.Source == agent.SourceUser && e.Message.Content == t.Text:
			mine = true
		case start >= 0 && e.Kind == agent.EventTurnEnd:
			if mine {
				turn := events[start : i+1]
				out := agent.LastOutcome(turn)
				return seam.Result{Output: out.Output, StopReason: out.StopReason, Diagnostic: out.Diagnostic, Usage: t.Usage(turn)}, true
			}
			start = -1
		}
	}
	// Ended turns that are not the message's are never read again.
	if start >= 0 {
		t.From += int64(start)
	} else {
		t.From += int64(len(events))
	}
	return seam.Result{}, false
}

// InBand is the owner's side, at the settlement of a child whose epoch
// ran awaited messages (ran): once every turn's end is committed
// (committed returns), it takes their abandonment marks and reports
// whether the last turn's outcome (lastAwaited; "" when the last turn's
// message was not awaited) went to its caller in band: its mark was not
// set. The order is what the package doc's argument needs; a failure to
// read counts as given up (a notice), which at worst repeats the outcome.
func InBand(h Host, childID string, ran []string, lastAwaited string, committed func() error) bool {
	am, ok := h.Store.(seam.AwaitMarks)
	if !ok {
		return false
	}
	if err := committed(); err != nil {
		return false
	}
	ctx, cancel := h.Background()
	defer cancel()
	var marked []string
	err := h.Write(ctx, func(ctx context.Context) error {
		var err error
		marked, err = am.TakeAbandoned(ctx, childID, ran)
		return err
	})
	if err != nil {
		h.Log.Warn("reading whether the callers waiting at other instances gave up failed; the settlement notice goes out", "agent_id", childID, "err", err)
		return false
	}
	return lastAwaited != "" && !slices.Contains(marked, lastAwaited)
}

// Running reports whether a child resident at another instance runs as
// the store shows it: while its journal's last turn is open or a message
// waits in its stored inbox; not with a queue behind an interrupted turn
// (an interrupt parks the queue until the next send; the store does not
// tell a parked queue from one about to run, so a turn cut off by a
// takeover lists idle until the next starts). journal is the child's
// journal (or its tail) when the caller read it; empty: its last event is
// read here.
func Running(ctx context.Context, st seam.Store, id string, journal []agent.Event) bool {
	var last *agent.Event
	if len(journal) > 0 {
		last = &journal[len(journal)-1]
	} else if n, err := st.JournalLen(ctx, id); err == nil && n > 0 {
		if es, err := st.EventsFrom(ctx, id, n-1); err == nil && len(es) == 1 {
			last = &es[0]
		}
	}
	if last != nil && last.Kind != agent.EventTurnEnd {
		return true
	}
	queued, err := st.Queued(ctx, id)
	return err == nil && slices.ContainsFunc(queued, func(q seam.QueuedMessage) bool { return !q.Quiet }) &&
		(last == nil || last.StopReason != agent.StopAborted)
}

// Listings are the listings of parent's children resident at other
// instances, of claims (by child id): a claim of another parent's child
// is skipped without reading its header.
func Listings(ctx context.Context, st seam.Store, parent string, claims map[string]seam.Claim) []seam.Listing {
	var ls []seam.Listing
	for id, c := range claims {
		if c.Parent != "" && c.Parent != parent {
			continue // another parent's, maybe another principal's: its header is not read
		}
		h, err := st.Header(ctx, id)
		if err == nil && h.Parent == parent {
			ls = append(ls, seam.Listing{Header: h})
		}
	}
	return ls
}
