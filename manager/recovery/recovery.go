// Package recovery owns closing the epochs a crash (or a shutdown) left
// open: which claims are closed — at start (Recoverer.Recover) those whose
// owner is gone, at each lease renewal (Recoverer.Sweep) those of other
// owners whose lease ran out by this instance's clock and this instance's
// own that are not resident — and how. The claim is taken over first,
// fenced by the claim as read (so a claim the store still holds live, or
// that another server took first, is left alone), which bumps the epoch,
// so the former owner's lingering writes are refused from then on; only
// then is the journal final, and the closing events, the checkpoint, the
// revoked claim and the notice go in one write fenced by the new claim. A
// child whose journal cannot be read keeps its claim, and its parent is
// told, once per start.
//
// What it needs of the manager (its residency, its writes and its
// notices) is passed in as a Host, and what it reads of the store as a
// Store. It holds no lock; the takeover runs inside Host.Exclusive.
package recovery

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Store is what recovery reads of the session store.
type Store interface {
	Residents(ctx context.Context) ([]seam.Claim, error)
	Header(ctx context.Context, id string) (seam.Header, error)
	Events(ctx context.Context, id string) ([]agent.Event, error)
	EventsFrom(ctx context.Context, id string, from int64) ([]agent.Event, error)
}

// Host is what recovery needs of the manager.
type Host interface {
	// Resident reports whether the child is resident here.
	Resident(id string) bool
	// Exclusive runs fn serialised with cold resumes: no resume here
	// claims a child while fn runs.
	Exclusive(fn func())
	// TakeOver claims c's child for this instance, fenced by c as read
	// (unfenced for a claim without an owner id, which an older build
	// left), and returns the fence of the new claim.
	TakeOver(ctx context.Context, c seam.Claim) (*seam.Fence, error)
	// Write commits w for the child, retried as the manager's writes are.
	Write(ctx context.Context, id string, w seam.ChildWrite) error
	// Unreadable reports whether the child is known unreadable already.
	Unreadable(id string) bool
	// TellUnreadable remembers that h's child's journal cannot be read
	// (err) and tells its parent so.
	TellUnreadable(h seam.Header, err error)
	// Settled is the settlement notice of h's child whose last turn's
	// result is last, as it is stored and announced.
	Settled(h seam.Header, last seam.Result) seam.Notice
	// Usage sums the usage events record.
	Usage(events []agent.Event) seam.Usage
	// Announce announces a committed notice to the parent's waiters.
	Announce(h seam.Header, n seam.Notice)
	// Closed is told a child's epoch was closed (its stored questions
	// are cancelled).
	Closed(ctx context.Context, id string)
	// RunQueued resumes h's child if its stored inbox holds messages.
	RunQueued(ctx context.Context, h seam.Header)
}

// Recoverer closes this instance's owner's share of the open epochs.
type Recoverer struct {
	Store Store
	Host  Host
	Owner string // this instance's owner id
	// Shared: other instances write the store (seam.Shared), so Recover
	// runs what they queued for a child it takes over.
	Shared bool
	Now    func() time.Time // this instance's clock: the sweep's first filter
	// Timeout bounds a sweep.
	Timeout time.Duration
	Log     *slog.Logger
}

// Recover closes the epochs of the claims a crash (or a shutdown) left to
// an owner that is gone — an expired claim, one the store knows is stale,
// or one of this owner's that is not resident here — and announces each
// to its parent, then, on a shared store, runs the messages queued for
// it. Claims of other owners whose lease runs are left alone:
// those children are resident in another server. A failure to list the
// claims is returned; one child's failure is logged, and the next start
// tries it again.
func (r Recoverer) Recover(ctx context.Context) error {
	claims, err := r.Store.Residents(ctx)
	if err != nil {
		return err
	}
	now := r.Now()
	for _, c := range claims {
		if r.Host.Resident(c.ChildID) || (c.Owner.ID != r.Owner && c.Owner.Expires.After(now)) {
			continue
		}
		// On a store other instances share, the claim may be a dead
		// instance's whose children had follow-ups forwarded to them: run
		// those now, as a sweep's takeover does. On one no other instance
		// writes, they wait for the child's next resume.
		if h, ok := r.closeEpoch(ctx, c, false); ok && r.Shared {
			r.Host.RunQueued(ctx, h)
		}
	}
	return nil
}

// Sweep takes over the children of other servers sharing the store whose
// lease ran out: run at each lease renewal once Recover ran. Each expired
// claim is closed as Recover closes it (the cut-off turn is not re-run;
// the epoch is closed and announced), fenced by the claim as read, so a
// claim the store judges live (its clock, not ours, decides) or that
// another server took first is left alone; then the messages queued for
// the child run here, in order. This owner's own claims that are not
// resident here (a child whose writes failed) are closed the same way
// (closeOwn).
func (r Recoverer) Sweep(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	claims, err := r.Store.Residents(ctx)
	if err != nil {
		r.Log.Warn("listing claims for the takeover sweep failed; retrying at the next renewal", "err", err)
		return
	}
	now := r.Now()
	for _, c := range claims {
		if ctx.Err() != nil {
			return
		}
		if c.Owner.ID == r.Owner {
			if h, ok := r.closeOwn(ctx, c); ok {
				r.Host.RunQueued(ctx, h)
			}
			continue
		}
		if c.Owner.ID == "" || c.Owner.Expires.After(now) {
			continue
		}
		if r.Host.Resident(c.ChildID) {
			continue
		}
		h, ok := r.closeEpoch(ctx, c, true)
		if !ok {
			continue
		}
		r.Log.Warn("took over a child whose owner's lease expired", "agent_id", c.ChildID, "owner", c.Owner.ID, "epoch", c.Epoch)
		r.Host.RunQueued(ctx, h)
	}
}

// closeOwn closes an epoch of this owner's own that is not resident here:
// a child whose writes failed (the store was down) keeps its claim so
// that its epoch is announced, and this owner's renewals keep that claim
// live, so no other instance would; messages other instances queued for
// it meanwhile run once it is closed (the caller runs them). A child
// resident here again is left alone: closeEpoch's takeover checks that
// inside Host.Exclusive, so a resume between its claim and its
// registration is not taken for one.
func (r Recoverer) closeOwn(ctx context.Context, c seam.Claim) (seam.Header, bool) {
	if r.Host.Resident(c.ChildID) {
		return seam.Header{}, false // the common case, read nothing (checked again inside Exclusive)
	}
	h, ok := r.closeEpoch(ctx, c, true)
	if ok {
		r.Log.Warn("closed an epoch of a child whose writes had failed here", "agent_id", c.ChildID, "epoch", c.Epoch)
	}
	return h, ok
}

// closeEpoch closes the epoch claim c left open and announces it. It
// takes the claim over first, fenced by c as read (another server's sweep
// or its owner's renewal wins it otherwise; a claim an older build left,
// with no owner id, is not fenced): that write bumps the epoch, so from
// its commit on every write of the former owner (a writer of its still
// lingering) is refused, and only then is the journal final. Read before
// it, the journal could still grow by a turn's start that the closing
// would not see, leaving that turn open for good. The closing events, the
// checkpoint, the revoked claim and the notice then go in one write fenced
// by the new claim. sweeping: a sweep's, which tells of an unreadable
// journal only the first time. It reports whether the epoch was closed,
// with the child's header.
func (r Recoverer) closeEpoch(ctx context.Context, c seam.Claim, sweeping bool) (seam.Header, bool) {
	id := c.ChildID
	h, err := r.Store.Header(ctx, id)
	if err != nil {
		r.Log.Error("a claimed child cannot be read; leaving it", "agent_id", id, "err", err)
		return h, false
	}
	// Read before the takeover too: a journal that cannot be read is not
	// taken over (its claim keeps the epoch to close once it is repaired).
	events, err := r.Store.Events(ctx, id)
	if err != nil {
		if sweeping && r.Host.Unreadable(id) {
			// A sweep retries it at each renewal; the parent was told
			// the first time.
			r.Log.Debug("a claimed child's journal is still unreadable", "agent_id", id, "err", err)
			return h, false
		}
		r.Log.Error("a claimed child's journal cannot be read; keeping its claim", "agent_id", id, "err", err)
		r.Host.TellUnreadable(h, err)
		return h, false
	}
	var n seam.Notice
	var closed, ok bool
	r.Host.Exclusive(func() { n, closed, ok = r.takeOverAndClose(ctx, h, c, events) })
	if !ok {
		return h, false
	}
	r.Host.Announce(h, n)
	r.Host.Closed(ctx, id)
	r.Log.Info("recovered a child left resident", "agent_id", id, "owner", c.Owner.ID, "epoch", c.Epoch, "closed_turn", closed)
	return h, true
}

// takeOverAndClose is closeEpoch's takeover of the child of h, whose
// journal read events: it claims the child, reads what the former owner
// committed meanwhile, and closes and settles the epoch, returning the
// notice to announce and whether a turn was closed. It runs inside
// Host.Exclusive, so no resume here claims the child between the takeover
// and the settlement (which would then revoke the resumed activation's
// claim).
func (r Recoverer) takeOverAndClose(ctx context.Context, h seam.Header, c seam.Claim, events []agent.Event) (seam.Notice, bool, bool) {
	id := h.ID
	if r.Host.Resident(id) {
		return seam.Notice{}, false, false // a send resumed it meanwhile
	}
	fence, err := r.Host.TakeOver(ctx, c)
	if err != nil {
		if errors.Is(err, seam.ErrOwned) {
			// Renewed by its owner (the store's clock judged the lease
			// live), or taken over by another sweeper first.
			r.Log.Debug("a claim that looked expired is held; leaving it", "agent_id", id, "owner", c.Owner.ID, "err", err)
			return seam.Notice{}, false, false
		}
		r.Log.Error("taking over an interrupted epoch failed; the next start tries again", "agent_id", id, "err", err)
		return seam.Notice{}, false, false
	}
	// What the former owner committed before the takeover.
	more, err := r.Store.EventsFrom(ctx, id, int64(len(events)))
	if err != nil {
		r.Log.Error("reading a taken-over child's journal failed; its claim is kept here, and the next start closes it", "agent_id", id, "err", err)
		return seam.Notice{}, false, false
	}
	all, closing := agent.CloseOpenTurn(append(events, more...))
	out := agent.LastOutcome(all)
	last := seam.Result{Output: out.Output, StopReason: out.StopReason, Diagnostic: out.Diagnostic}
	if last.StopReason == "" {
		// No turn of the epoch reached the journal: the crash stopped
		// it before it began (its prompt is still queued, and a resume
		// runs it).
		last.StopReason = agent.StopAborted
	}
	cp := seam.Checkpoint{Seq: int64(len(all)), Mode: h.Mode, Label: h.Label, Usage: r.Host.Usage(all), Stop: last.StopReason,
		Closing: truncate.Bound(last.Output, seam.MaxClosingBytes)}
	n := r.Host.Settled(h, last)
	w := seam.ChildWrite{Fence: fence, Events: closing, Settle: &cp, Notify: &seam.ParentNotice{To: h.Parent, Notice: n}}
	if err := r.Host.Write(ctx, id, w); err != nil {
		if errors.Is(err, seam.ErrOwned) {
			// This owner's lease ran out in between, and another
			// server took the child over: it closes the epoch.
			r.Log.Debug("a child taken over was taken over again before its epoch was closed; leaving it", "agent_id", id, "err", err)
			return seam.Notice{}, false, false
		}
		r.Log.Error("closing an interrupted epoch failed; its claim is kept here, and the next start closes it", "agent_id", id, "err", err)
		return seam.Notice{}, false, false
	}
	return n, len(closing) > 0, true
}
