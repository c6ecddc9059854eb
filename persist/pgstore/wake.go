package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mcp-subagent/mcp-subagent/internal/wake"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

var (
	_ seam.Waker      = (*Store)(nil)
	_ seam.Interrupts = (*Store)(nil)
	_ seam.AwaitMarks = (*Store)(nil)
)

// wakeChannel is the one NOTIFY channel of the store's wake-ups; the
// payload is the keys signalled (see seam.Waker), one a line, or wakeAll.
const wakeChannel = "mcp_subagent_wake"

// wakeAll is the payload that wakes every watch, which is allowed
// (spurious): sent for a key a payload cannot carry (one holding a line
// break, or too long for a NOTIFY payload, under 8000 bytes).
const wakeAll = "*"

// maxPayload bounds a payload, under PostgreSQL's 8000 bytes.
const maxPayload = 7000

// notify signals keys, in tx: PostgreSQL delivers a NOTIFY at COMMIT, to
// every connection listening then, and never for a rolled-back write.
// Keys share payloads (payloads), so a commit sends one NOTIFY, not one a
// key: a child's write signals at most its id, its journal key and a
// recipient, and each listener gets one notification of it.
func notify(ctx context.Context, tx pgx.Tx, keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `select pg_notify('`+wakeChannel+`', p) from unnest($1::text[]) as p`, payloads(keys))
	return err
}

// payloads packs keys, without repeats or empty ones, into as few payloads
// as hold them within maxPayload, one a line (none for no key);
// [wakeAll] when a key cannot be carried.
func payloads(keys []string) []string {
	var out []string
	var b strings.Builder
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if len(k) > maxPayload || k == wakeAll || strings.Contains(k, "\n") {
			return []string{wakeAll}
		}
		if seen[k] || k == "" { // no watch has the empty key
			continue
		}
		seen[k] = true
		if b.Len() > 0 && b.Len()+1+len(k) > maxPayload {
			out = append(out, b.String())
			b.Reset()
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(k)
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

// keysOf returns the keys of a payload (see payloads).
func keysOf(payload string) []string { return strings.Split(payload, "\n") }

// listener is a store's wake-up connection: one connection of its own
// (LISTEN needs a session; a pool would hand it back), started by the
// first Watch, which LISTENs and signals the store's watches from the
// notifications it receives. When the connection is lost it reconnects
// (backing off up to maxBackoff) and then wakes every watch, since
// notifications sent while it was down are lost for good.
//
// A connection that goes silent without breaking (a network partition)
// is noticed only by TCP keep-alive; the owner's rescan at each lease
// renewal bounds what such a loss costs.
type listener struct {
	cfg *pgx.ConnConfig // set by Open
	hub wake.Hub

	mu      sync.Mutex
	stopped bool
	cancel  context.CancelFunc // nil until started
	done    chan struct{}      // closed when the loop has ended
	ready   chan struct{}      // closed once listening for the first time
}

const maxBackoff = 5 * time.Second

// Watch watches key (see seam.Waker). The first Watch of a store opens its
// wake-up connection and waits, bounded by ctx, until it listens; later
// ones return at once, also while the connection is being restored (their
// watch is woken once it is back).
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := s.begin(ctx); err != nil {
		return nil, nil, err
	}
	l := &s.listen
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return nil, nil, ErrClosed
	}
	if l.cancel == nil {
		lctx, cancel := context.WithCancel(context.Background())
		l.cancel, l.done, l.ready = cancel, make(chan struct{}), make(chan struct{})
		go s.listenLoop(lctx)
	}
	ready, done := l.ready, l.done
	l.mu.Unlock()
	c, stop := l.hub.Watch(key)
	select {
	case <-ready:
		return c, stop, nil
	case <-done:
		stop()
		return nil, nil, ErrClosed
	case <-ctx.Done():
		stop()
		return nil, nil, fmt.Errorf("pgstore: watch %q: waiting for the wake-up connection to the store: %w", key, ctx.Err())
	}
}

// stopListening ends the wake-up connection, if one was started, and
// waits for its loop to end.
func (s *Store) stopListening() {
	l := &s.listen
	l.mu.Lock()
	l.stopped = true
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (s *Store) listenLoop(ctx context.Context) {
	l := &s.listen
	defer close(l.done)
	backoff := 100 * time.Millisecond
	first := true
	for {
		listened, err := s.listenOnce(ctx, first)
		if ctx.Err() != nil {
			return
		}
		if listened {
			first = false
			backoff = 100 * time.Millisecond
			s.log.Warn("the store's wake-up connection was lost; reconnecting", "err", scrub(err, s.password))
		} else {
			s.log.Debug("reconnecting the store's wake-up connection", "err", scrub(err, s.password), "retry_in", backoff)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// listenOnce connects, listens and dispatches notifications until the
// connection fails or ctx ends; listened says whether it got as far as
// listening.
func (s *Store) listenOnce(ctx context.Context, first bool) (listened bool, err error) {
	l := &s.listen
	conn, err := pgx.ConnectConfig(ctx, l.cfg.Copy())
	if err != nil {
		return false, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, `listen `+wakeChannel); err != nil {
		return false, err
	}
	if first {
		close(l.ready)
	} else {
		l.hub.SignalAll() // what was sent while we were away is lost: rescan
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		if n.Payload == wakeAll {
			l.hub.SignalAll()
		} else {
			l.hub.Signal(keysOf(n.Payload)...)
		}
	}
}

// RequestInterrupt records r as the child's pending interrupt request,
// unless one is pending, and signals the child's watches at its commit
// (see seam.Interrupts).
func (s *Store) RequestInterrupt(ctx context.Context, childID string, r seam.InterruptRequest) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	if r.At.IsZero() {
		r.At = time.Now().UTC()
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("pgstore: child %q: encode interrupt request: %w", childID, err)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `insert into interrupts (child_id, body) values ($1, $2) on conflict (child_id) do nothing`, childID, b); err != nil {
			return err
		}
		return notify(ctx, tx, childID)
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23503" { // foreign key: no such child
		return notFound(childID)
	}
	return s.fail("recording an interrupt request for "+childID, err)
}

// TakeInterrupt removes and returns the child's pending interrupt request
// under the child's row lock, refused (ErrOwned) when fence is set and no
// longer holds.
func (s *Store) TakeInterrupt(ctx context.Context, childID string, fence *seam.Fence) (seam.InterruptRequest, bool, error) {
	var r seam.InterruptRequest
	if err := s.begin(ctx); err != nil {
		return r, false, err
	}
	// An owner takes at every wake-up of its child (each admission): one
	// read without the child's row lock answers the common case, none
	// pending (or a fence that fails already); the take proper locks the
	// row and checks again.
	var holder *string
	var epoch int64
	var pending bool
	err := s.pool.QueryRow(ctx, `select c.claim_owner, c.claim_epoch, exists (select 1 from interrupts i where i.child_id = c.id)
		from children c where c.id = $1`, childID).Scan(&holder, &epoch, &pending)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, false, notFound(childID)
	}
	if err != nil {
		return r, false, s.fail("reading the interrupt request of "+childID, err)
	}
	if fence != nil {
		if err := checkFence(childID, *fence, holder, epoch); err != nil {
			return r, false, err.(refusal).error
		}
	}
	if !pending {
		return r, false, nil
	}
	found := false
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		found = false
		var holder *string
		var epoch int64
		err := tx.QueryRow(ctx, `select claim_owner, claim_epoch from children where id = $1 for update`, childID).Scan(&holder, &epoch)
		if errors.Is(err, pgx.ErrNoRows) {
			return refusal{notFound(childID)}
		}
		if err != nil {
			return err
		}
		if fence != nil {
			if err := checkFence(childID, *fence, holder, epoch); err != nil {
				return err
			}
		}
		var b []byte
		err = tx.QueryRow(ctx, `delete from interrupts where child_id = $1 returning body`, childID).Scan(&b)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		// A request that does not decode is still a request: taken, with
		// what could be read.
		if err := json.Unmarshal(b, &r); err != nil {
			s.log.Warn("an interrupt request does not decode; taking it without its details", "child", childID, "err", err)
			r = seam.InterruptRequest{}
		}
		return nil
	})
	var rf refusal
	if errors.As(err, &rf) {
		return seam.InterruptRequest{}, false, rf.error
	}
	if err != nil {
		return seam.InterruptRequest{}, false, s.fail("taking the interrupt request of "+childID, err)
	}
	return r, found, nil
}

// checkFence refuses a write whose writer no longer holds the child's
// claim (holder, epoch as the row reads) at its epoch.
func checkFence(id string, f seam.Fence, holder *string, epoch int64) error {
	if holder != nil && *holder == f.Owner && epoch == f.Epoch {
		return nil
	}
	h := ""
	if holder != nil {
		h = *holder
	}
	return refuse("pgstore: child %q: the write is fenced to owner %q at epoch %d, and the child's claim is no longer that (owner %q, epoch %d): %w",
		id, f.Owner, f.Epoch, h, epoch, seam.ErrOwned)
}

// MarkAbandoned sets or removes the mark of the child's message msgID
// (see seam.AwaitMarks).
func (s *Store) MarkAbandoned(ctx context.Context, childID, msgID string, abandoned bool) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	if abandoned {
		_, err := s.pool.Exec(ctx, `insert into abandoned_waits (child_id, msg_id) values ($1, $2) on conflict do nothing`, childID, msgID)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23503" { // foreign key: no such child
			return notFound(childID)
		}
		return s.fail("marking a wait for "+childID+" given up", err)
	}
	var found bool
	err := s.pool.QueryRow(ctx, `with d as (delete from abandoned_waits where child_id = $1 and msg_id = $2)
		select exists (select 1 from children where id = $1)`, childID, msgID).Scan(&found)
	if err != nil {
		return s.fail("clearing the mark of a wait for "+childID, err)
	}
	if !found {
		return notFound(childID)
	}
	return nil
}

// TakeAbandoned removes the child's marks of msgIDs and returns those that
// were set, in one statement (see seam.AwaitMarks).
func (s *Store) TakeAbandoned(ctx context.Context, childID string, msgIDs []string) ([]string, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	var found bool
	var out []string
	err := s.pool.QueryRow(ctx, `with d as (delete from abandoned_waits where child_id = $1 and msg_id = any($2) returning msg_id)
		select exists (select 1 from children where id = $1), array(select msg_id from d)`, childID, msgIDs).Scan(&found, &out)
	if err != nil {
		return nil, s.fail("taking the marks of waits for "+childID+" given up", err)
	}
	if !found {
		return nil, notFound(childID)
	}
	return out, nil
}
