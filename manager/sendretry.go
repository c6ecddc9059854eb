package manager

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// A follow-up that meets a race between instances (its child settling
// here, claimed or run elsewhere between a read and a claim, its row
// written by another instance right then) is not refused: it waits for
// the race to resolve and tries again, as long as the caller's ctx
// allows. Each race ends with somebody's commit (a settlement, a claim, a
// turn's end, an admission), which the store's wake-up on the child
// (seam.Waker) signals, or with the release of the activation here; a
// backoff stands in for a commit the store does not signal (a bare claim
// does not). runQueued paces its claims the same way, so a message
// admitted for an owner that let the child go is not left queued.

const (
	// sendTries caps the tries of one send. A race between instances
	// resolves within a few store round trips (one side's commit lands),
	// and every try after the first follows such a commit or a backoff of
	// up to sendRetryMax: 32 tries span some 6 to 12 seconds when nothing
	// wakes the sender, far more than any handoff takes. (A race with an
	// owner that died or stopped does not come here: its claim stands
	// until its lease ends, and the send is forwarded to it meanwhile.)
	// Reaching the cap means the instances undo each other's work (a
	// livelock) or the store keeps refusing the claim: the send then says
	// so rather than spin for as long as a caller without a deadline
	// would let it.
	sendTries = 32
	// sendRetryFirst and sendRetryMax bound the backoff between tries
	// that no wake-up cuts short (it doubles, with jitter, so senders at
	// several instances do not retry in step).
	sendRetryFirst = 5 * time.Millisecond
	sendRetryMax   = 500 * time.Millisecond
)

// errClaimStore marks a resume whose claim failed for a store error (not
// refused, not cancelled): the store may well answer the next try.
var errClaimStore = errors.New("the claim could not be written or read back")

// transientSend reports whether a resume failed for a race another try
// can win: errResident (a send here resumed it meanwhile), ErrOwned
// (another instance claimed it, or was writing its row, meanwhile),
// ErrStale (another instance ran a turn of it meanwhile), errClaimStore.
func transientSend(err error) bool {
	return errors.Is(err, errResident) || errors.Is(err, seam.ErrOwned) || errors.Is(err, seam.ErrStale) || errors.Is(err, errClaimStore)
}

// sendRetry paces the tries of one send to one child.
type sendRetry struct {
	m     *Manager
	id    string
	began time.Time
	tries int
	delay time.Duration
	wake  <-chan struct{} // the store's wake-ups of the child; nil: none
	stop  func()          // ends the watch; nil until it started
}

func newSendRetry(m *Manager, id string) *sendRetry {
	return &sendRetry{m: m, id: id, began: time.Now(), delay: sendRetryFirst}
}

// close ends the watch, if one started.
func (r *sendRetry) close() {
	if r.stop != nil {
		r.stop()
	}
}

// again waits before the next try of a send whose last try met the
// transient cause why: on released when the child's activation here was
// settling, else on the next wake-up of the child in the store or the
// backoff, whichever is first. The first retry starts the watch and goes
// at once: a commit before the watch started is not signalled, but the
// try reads it. It returns the error to answer the send with instead when
// ctx ends or the tries are spent.
func (r *sendRetry) again(ctx context.Context, released <-chan struct{}, why error) error {
	r.tries++
	if r.tries >= sendTries {
		r.m.log.Warn("a follow-up gave up on a child that kept changing hands", "agent_id", r.id, "tries", r.tries, "last", why)
		return &seam.Error{Code: seam.CodeNotResumable, AgentID: r.id, Err: why,
			Message: fmt.Sprintf("subagent %s kept changing hands between instances sharing the session store (%d tries over %s; last: %v); nothing was sent, send again",
				r.id, r.tries, time.Since(r.began).Round(time.Millisecond), why)}
	}
	if r.stop == nil {
		r.wake, r.stop = r.m.watchAddr(ctx, r.id)
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
		r.delay = min(2*r.delay, sendRetryMax)
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
