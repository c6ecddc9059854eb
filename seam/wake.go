package seam

import (
	"context"
	"slices"
	"time"
)

// Waker is a Store's optional wake-up ability, found by type assertion
// (every backend in persist implements it): a commit that changes what a
// waiter on a child or an address is waiting for signals the waiters on
// it, whichever instance made the commit and whichever handle of the
// store they watch through.
//
// A commit signals, after it is committed:
//   - the child's id, when it admits a message to the child's inbox
//     (ChildWrite.Enqueue), appends the end of a turn (an event of kind
//     EventTurnEnd: a caller at another instance waits for it),
//     settles the child (ChildWrite.Settle), or records an interrupt
//     request for it (Interrupts.RequestInterrupt);
//   - the settlement notice's recipient (ChildWrite.Notify.To: a parent
//     agent's id, whose inbox it joins, or a principal's address);
//   - the address a notice is queued under (AddNotice);
//   - a principal's address, when a record of one of its sessions is
//     removed (Sessions);
//   - the child's journal key (JournalKey), when it appends events to the
//     child's journal, once per commit however many it appends (on a
//     shared store, in the commit's one notification): what a transcript
//     watcher at another instance waits for, a turn's steps included. It
//     is a key of its own so that a step, which commits every few
//     milliseconds of a busy turn, wakes no waiter on the child's id (its
//     owner's inbox and interrupt waiters would re-read the store each
//     time); a turn's end signals both.
//
// WakeKeys says which keys a ChildWrite signals.
//
// A wake-up is a hint, never the message: signals to one watch coalesce
// (its channel holds one), and a watch may be woken spuriously — by a
// write that changed nothing it cares for, or, on a shared store, after the
// store's wake-up connection was lost and restored (signals sent while it
// was down are lost, so every watch is woken once it is back). A waiter
// therefore reads the state it waits on after Watch returns and again
// after every wake-up, never trusting the wake-up itself.
type Waker interface {
	// Watch starts watching key (a child id, a notice address or a
	// child's JournalKey): from its return on, every commit that signals
	// key sends on the channel (buffered one; it is never closed). stop
	// ends the watch; call it once, when done. A store that must first
	// connect to be told of other instances' commits waits for that,
	// bounded by ctx.
	Watch(ctx context.Context, key string) (<-chan struct{}, func(), error)
}

// JournalKey is the key a commit appending to childID's journal signals
// (see Waker). Its prefix is neither an agent id's nor an address's, so
// it names no child and no address.
func JournalKey(childID string) string { return "journal:" + childID }

// WakeKeys are the keys a commit of w to childID signals (see Waker): the
// child's id, its JournalKey, the notice's recipient; in no particular
// order, possibly repeated; none for a write that signals nothing.
func WakeKeys(childID string, w ChildWrite) []string {
	var keys []string
	if len(w.Enqueue) > 0 || w.Settle != nil || slices.ContainsFunc(w.Events, func(e Event) bool { return e.Kind == EventTurnEnd }) {
		keys = append(keys, childID)
	}
	if len(w.Events) > 0 {
		keys = append(keys, JournalKey(childID))
	}
	if w.Notify != nil && w.Notify.To != "" {
		keys = append(keys, w.Notify.To)
	}
	return keys
}

// Shared is a Store's optional statement of whether another instance can
// write it, found by type assertion: a store that does not say is taken
// as shared. On a store that is not, only its one instance admits
// messages to a child's inbox, so a resident child never looks in its
// stored inbox for messages admitted elsewhere (manager, adoptStored).
type Shared interface {
	Shared() bool
}

// Interrupts is a Store's optional ability to keep interrupt requests
// durably, found by type assertion (every backend in persist implements
// it): any instance records a request to interrupt a child, and the
// child's owner consumes it. Recording one signals the child's id (see
// Waker), so an owner watching the child learns of it at once; an owner
// also takes pending requests when it claims the child and on each
// rescan, since a wake-up may be lost.
//
// A child holds at most one pending request: requests coalesce, the first
// one kept until it is taken. A request outlives the child's settlement
// and a takeover (the next owner takes it); the owner that takes it
// judges, by InterruptRequest.At, whether it still applies to the turn
// running then, or by InterruptRequest.Epoch. Delete removes a child's pending request with the child.
type Interrupts interface {
	// RequestInterrupt records r for the child, unless one is already
	// pending; the store sets r.At when zero. An unknown id is refused
	// with an error wrapping ErrNotFound.
	RequestInterrupt(ctx context.Context, childID string, r InterruptRequest) error
	// TakeInterrupt removes and returns the child's pending request, in
	// one commit: a request is taken once, however many take it at the
	// same time. false when none is pending. With fence set it is refused
	// (ErrOwned), taking nothing, unless the child's claim is held by
	// fence.Owner at fence.Epoch: a former owner cannot consume a request
	// meant for the new one.
	TakeInterrupt(ctx context.Context, childID string, fence *Fence) (InterruptRequest, bool, error)
}

// InterruptRequest is an interrupt of a child recorded in the store.
type InterruptRequest struct {
	// Reason is what the interrupter said, for the child's journal.
	Reason string `json:"reason,omitempty"`
	// From names who asked: the recording instance's owner id, or a
	// principal.
	From string `json:"from,omitempty"`
	// At is when it was recorded.
	At time.Time `json:"at"`
	// Epoch is the claim epoch the requester saw (Claim.Epoch): the
	// tenure whose turn it meant to stop. An owner drops a request of an
	// earlier tenure (its turn is gone with its former owner); 0: any.
	Epoch int64 `json:"epoch,omitempty"`
}

// Sessions is a Store's optional ability to share root sessions' liveness
// among the instances sharing it, found by type assertion (memstore and
// pgstore implement it; bbolt, which one process opens at a time, has no
// other instance to tell, so the manager's local liveness suffices there).
// A root notice waits for the session that started its child while that
// session is connected anywhere (Notice.Session); then it goes to any
// session of the principal, at any instance.
//
// A record says a session is connected at an owner (an instance: its
// Owner.ID, as in claims). It is live while kept and while its owner's
// lease — the one owner record its claims share, extended by Store.Renew
// — has not expired by the store's clock. OpenSession keeps a record;
// CloseSession removes it; ReapSessions removes those whose owner's lease
// expired. Removing a record signals its principal's address (see Waker),
// so the principal's callers waiting at any instance look again.
type Sessions interface {
	// OpenSession records s.ID (of s.Principal) as connected at
	// s.Owner.ID and sets that owner's lease to s.Owner.Expires, as a
	// claim does. Opening a recorded session again updates it.
	OpenSession(ctx context.Context, s Session) error
	// CloseSession removes the record of session at owner, signalling its
	// principal's address; not an error when there is none.
	CloseSession(ctx context.Context, session, owner string) error
	// SessionsOf returns principal's live records (a session connected at
	// several owners has one each), Owner.Expires as the lease reads.
	SessionsOf(ctx context.Context, principal string) ([]Session, error)
	// ReapSessions removes every record whose owner's lease has expired
	// by the store's clock (or that has no lease), signalling each one's
	// principal's address, and returns them.
	ReapSessions(ctx context.Context) ([]Session, error)
}

// Session is a root session's record in a store (see Sessions).
type Session struct {
	ID        string
	Principal string
	Owner     Owner
}

// AwaitMarks is a Store's optional ability to keep, across instances, the
// marks of in-band waits given up, found by type assertion (every backend
// in persist implements it). A caller at one instance that waits for the
// outcome of a turn its child's owner runs at another admits the message
// with QueuedMessage.Awaited set and reads the outcome from the journal;
// the owner then issues no settlement notice for that turn, as for a
// caller waiting at the owner itself, unless the caller gave up: a caller
// that stops waiting marks the message abandoned before it looks at the
// journal a last time, and the owner takes the mark after the turn's end
// is committed (the manager's storedWait holds the argument).
//
// Delete removes a child's marks with the child.
type AwaitMarks interface {
	// MarkAbandoned sets (abandoned true) or removes the mark of the
	// child's message msgID. An unknown child is refused with an error
	// wrapping ErrNotFound.
	MarkAbandoned(ctx context.Context, childID, msgID string, abandoned bool) error
	// TakeAbandoned removes the child's marks of msgIDs in one commit and
	// returns the ids among them that were marked. An unknown child yields
	// an error wrapping ErrNotFound.
	TakeAbandoned(ctx context.Context, childID string, msgIDs []string) ([]string, error)
}
