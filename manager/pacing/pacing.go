// Package pacing paces the tries of one follow-up to one child that meets
// a race between instances sharing a store: its child settling here,
// claimed or run elsewhere between a read and a claim, its row written by
// another instance right then. Such a send is not refused: it waits for
// the race to resolve and tries again, as long as the caller's ctx
// allows. Each race ends with somebody's commit (a settlement, a claim, a
// turn's end, an admission), which the store's wake-up on the child
// (seam.Waker) signals, or with the release of the child's activation at
// this instance; a backoff stands in for a commit the store does not
// signal (a bare claim does not). The manager's sends and its running of
// a queue left by an owner that let the child go (runQueued) pace their
// claims with it.
package pacing

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

const (
	// Tries caps the tries of one send. A race between instances
	// resolves within a few store round trips (one side's commit lands),
	// and every try after the first follows such a commit or a backoff of
	// up to Max: 32 tries span some 6 to 12 seconds when nothing wakes
	// the sender, far more than any handoff takes. (A race with an owner
	// that died or stopped does not come here: its claim stands until its
	// lease ends, and the send is forwarded to it meanwhile.) Reaching the
	// cap means the instances undo each other's work (a livelock) or the
	// store keeps refusing the claim: the send then says so rather than
	// spin for as long as a caller without a deadline would let it.
	Tries = 32
	// First and Max bound the backoff between tries that no wake-up cuts
	// short (it doubles, with jitter, so senders at several instances do
	// not retry in step).
	First = 5 * time.Millisecond
	Max   = 500 * time.Millisecond
)

// Watch starts watching the child in the store: a channel signalled by
// each commit that concerns it (nil: none), and its stop.
type Watch func(ctx context.Context) (<-chan struct{}, func())

// Retry paces the tries of one send to one child. Close it when done.
type Retry struct {
	id    string
	watch Watch
	log   *slog.Logger
	began time.Time
	tries int
	delay time.Duration
	wake  <-chan struct{} // the store's wake-ups of the child; nil: none
	stop  func()          // ends the watch; nil until it started
}

// New paces the tries of a send to child id; watch is started at the
// first retry.
func New(id string, watch Watch, log *slog.Logger) *Retry {
	return &Retry{id: id, watch: watch, log: log, began: time.Now(), delay: First}
}

// Close ends the watch, if one started.
func (r *Retry) Close() {
	if r.stop != nil {
		r.stop()
	}
}

// Again waits before the next try of a send whose last try met the
// transient cause why: on released when the child's activation here was
// settling, else on the next wake-up of the child in the store or the
// backoff, whichever is first. The first retry starts the watch and goes
// at once: a commit before the watch started is not signalled, but the
// try reads it. It returns the error to answer the send with instead when
// ctx ends or the tries are spent.
func (r *Retry) Again(ctx context.Context, released <-chan struct{}, why error) error {
	r.tries++
	if r.tries >= Tries {
		r.log.Warn("a follow-up gave up on a child that kept changing hands", "agent_id", r.id, "tries", r.tries, "last", why)
		return &seam.Error{Code: seam.CodeNotResumable, AgentID: r.id, Err: why,
			Message: fmt.Sprintf("subagent %s kept changing hands between instances sharing the session store (%d tries over %s; last: %v); nothing was sent, send again",
				r.id, r.tries, time.Since(r.began).Round(time.Millisecond), why)}
	}
	if r.stop == nil {
		r.wake, r.stop = r.watch(ctx)
		if released == nil {
			return nil
		}
	}
	wake, timer := r.wake, (<-chan time.Time)(nil)
	if released != nil {
		wake = nil // the release is what the try waits for
	} else {
		t := time.NewTimer(r.delay/2 + rand.N(r.delay/2+1))
		defer t.Stop()
		timer = t.C
		r.delay = min(2*r.delay, Max)
	}
	select {
	case <-released:
	case <-wake:
	case <-timer:
	case <-ctx.Done():
		return &seam.Error{Code: seam.CodeCancelled, AgentID: r.id, Message: "the send was cancelled", Err: ctx.Err()}
	}
	return nil
}
