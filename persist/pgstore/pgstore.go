// Package pgstore is a seam.Store on PostgreSQL (DESIGN §10): the store
// several servers share. It holds what the bbolt store holds (headers,
// descriptors, journals, inboxes, notices, checkpoints, claims, tasks) and
// passes the same conformance suite (persist/storetest).
//
// Every WriteChild is one transaction that first locks the child's row,
// so writes to one child are serialized and checked against what is
// committed. A claim is live while its owner's lease row (owners) expires
// after the database's clock, now(): instances' clocks never judge each
// other. A takeover locks the child with FOR UPDATE SKIP LOCKED: a child
// another instance is writing or taking right now is refused (ErrOwned)
// at once, never waited for. Claims carry an epoch and a fenced write
// (ChildWrite.Fence) checks it under the row lock, so a former owner's
// write after a takeover stores nothing. Root sessions connected at an
// instance (seam.Sessions, sessions.go) live by that owner's lease too.
//
// The schema is versioned (schema.go): Open applies the missing
// migrations and refuses a database whose schema is newer than the build.
// A password in the URL never appears in an error or a log (Redact).
//
// Caveats: a lease's expiry is the time the owner gave, from its own
// clock; the database's clock judges it, so instances whose clocks
// disagree by more than a lease's margin take over early or late. Expiry
// is per owner (its lease row): a claim with an earlier expiry shortens
// the owner's other claims too, as Renew does.
package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

var _ seam.Store = (*Store)(nil)

// ErrExists is returned (wrapped) by WriteChild for a Create of an id
// already stored.
var ErrExists = errors.New("child already exists")

// ErrClosed is returned by every method after Close.
var ErrClosed = errors.New("pgstore: store is closed")

// Store is a seam.Store on a PostgreSQL database, safe for concurrent
// use.
type Store struct {
	pool     *pgxpool.Pool
	log      *slog.Logger
	password string // scrubbed from every error
	closed   atomic.Bool
	listen   listener // the wake-up connection (wake.go)
}

// IsURL reports whether a store setting names a PostgreSQL database.
func IsURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// Open connects to the database dsn names (a postgres:// URL or a
// key=value connection string), applies the schema's migrations and
// returns the store. log may be nil.
func Open(ctx context.Context, dsn string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.Default()
	}
	pw := password(dsn)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, scrub(fmt.Errorf("pgstore: the store URL %s does not parse: %w", Redact(dsn), err), pw)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, scrub(fmt.Errorf("pgstore: connecting to %s: %w", Redact(dsn), err), pw)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, scrub(fmt.Errorf("pgstore: opening %s: %w", Redact(dsn), err), pw)
	}
	log.Info("store opened", "store", Redact(dsn), "schema", SchemaVersion)
	s := &Store{pool: pool, log: log, password: pw}
	s.listen.cfg = cfg.ConnConfig
	return s, nil
}

// Close releases the pool; every later call fails with ErrClosed. Calling
// it again is a no-op.
func (s *Store) Close() error {
	if s.closed.CompareAndSwap(false, true) {
		s.stopListening()
		s.pool.Close()
	}
	return nil
}

// Redact returns dsn with its password, if any, replaced by "xxxxx": what
// errors, logs and status show.
func Redact(dsn string) string {
	if strings.Contains(dsn, "://") { // any URL, also a mistyped scheme
		u, err := url.Parse(dsn)
		if err != nil {
			if pw := password(dsn); pw != "" {
				return strings.ReplaceAll(dsn, pw, "xxxxx")
			}
			return dsn
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.Redacted()
	}
	return kvPassword.ReplaceAllString(dsn, "${1}xxxxx")
}

var kvPassword = regexp.MustCompile(`(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S*)`)

// password is dsn's password, "" when it has none.
func password(dsn string) string {
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		if err != nil {
			// Scrub what could be the userinfo's password by hand.
			rest := dsn[strings.Index(dsn, "://")+3:]
			if at := strings.LastIndex(rest, "@"); at >= 0 {
				if c := strings.Index(rest[:at], ":"); c >= 0 {
					return rest[c+1 : at]
				}
			}
			return ""
		}
		if p, ok := u.User.Password(); ok {
			return p
		}
		return u.Query().Get("password")
	}
	if m := kvPassword.FindStringSubmatch(dsn); m != nil {
		return strings.Trim(m[2], "'")
	}
	return ""
}

// scrubbed is an error whose text has the password replaced; it still
// wraps the cause for errors.Is.
type scrubbed struct {
	msg   string
	cause error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.cause }

func scrub(err error, pw string) error {
	if err == nil || pw == "" || !strings.Contains(err.Error(), pw) {
		return err
	}
	return &scrubbed{msg: strings.ReplaceAll(err.Error(), pw, "xxxxx"), cause: err}
}

// begin checks the store is open and ctx not done, before any work.
func (s *Store) begin(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	return nil
}

// fail wraps a database error (scrubbed), naming the operation.
func (s *Store) fail(op string, err error) error {
	if err == nil {
		return nil
	}
	if s.closed.Load() {
		return ErrClosed
	}
	return scrub(fmt.Errorf("pgstore: %s: %w", op, err), s.password)
}

func notFound(id string) error { return fmt.Errorf("pgstore: child %q: %w", id, seam.ErrNotFound) }

func corrupt(id, part string, cause error) error {
	return fmt.Errorf("pgstore: child %q %s: %w: %w", id, part, seam.ErrCorrupt, cause)
}

// nowNS is the database's clock in Unix nanoseconds (now() is the
// transaction's start).
const nowNS = `(extract(epoch from now()) * 1000000000)::bigint`

// Header returns the child's header.
func (s *Store) Header(ctx context.Context, childID string) (seam.Header, error) {
	var h seam.Header
	b, err := s.column(ctx, childID, "header")
	if err != nil {
		return h, err
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return seam.Header{}, corrupt(childID, "header", err)
	}
	return h, nil
}

// Descriptor returns the child's descriptor.
func (s *Store) Descriptor(ctx context.Context, childID string) (seam.Descriptor, error) {
	var d seam.Descriptor
	b, err := s.column(ctx, childID, "descriptor")
	if err != nil {
		return d, err
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return seam.Descriptor{}, corrupt(childID, "descriptor", err)
	}
	if d.Version != seam.DescriptorVersion {
		return seam.Descriptor{}, corrupt(childID, "descriptor", fmt.Errorf("version %d is not %d", d.Version, seam.DescriptorVersion))
	}
	return d, nil
}

// column reads one bytea column of a child's row.
func (s *Store) column(ctx context.Context, childID, col string) ([]byte, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	var b []byte
	err := s.pool.QueryRow(ctx, `select `+col+` from children where id = $1`, childID).Scan(&b)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound(childID)
	}
	return b, s.fail("reading child "+childID, err)
}

// Events returns the child's whole journal.
func (s *Store) Events(ctx context.Context, childID string) ([]agent.Event, error) {
	return s.EventsFrom(ctx, childID, 0)
}

// EventsFrom returns the journal from sequence number from on, in one
// query that reads only those events.
func (s *Store) EventsFrom(ctx context.Context, childID string, from int64) ([]agent.Event, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	if from < 0 {
		return nil, fmt.Errorf("pgstore: child %q: events from %d: the sequence must not be negative", childID, from)
	}
	rows, err := s.pool.Query(ctx, `select e.seq, e.body from children c left join events e on e.child_id = c.id and e.seq >= $2
		where c.id = $1 order by e.seq`, childID, from)
	if err != nil {
		return nil, s.fail("reading the journal of "+childID, err)
	}
	defer rows.Close()
	found := false
	events := []agent.Event{}
	for rows.Next() {
		found = true
		var seq *int64
		var b []byte
		if err := rows.Scan(&seq, &b); err != nil {
			return nil, s.fail("reading the journal of "+childID, err)
		}
		if seq == nil {
			continue // the child, with no events from there
		}
		var e agent.Event
		if err := json.Unmarshal(b, &e); err != nil {
			return nil, corrupt(childID, fmt.Sprintf("journal event %d", *seq), err)
		}
		if want := from + int64(len(events)); *seq != want || e.Seq != want {
			return nil, corrupt(childID, "journal", fmt.Errorf("expected sequence %d, found row %d holding %d", want, *seq, e.Seq))
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("reading the journal of "+childID, err)
	}
	if !found {
		return nil, notFound(childID)
	}
	return events, nil
}

// JournalLen returns the number of stored events.
func (s *Store) JournalLen(ctx context.Context, childID string) (int64, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	var n int64
	err := s.pool.QueryRow(ctx, `select journal_len from children where id = $1`, childID).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, notFound(childID)
	}
	return n, s.fail("reading child "+childID, err)
}

// Queued returns the child's inbox in admission order.
func (s *Store) Queued(ctx context.Context, childID string) ([]seam.QueuedMessage, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `select i.body from children c left join inbox i on i.child_id = c.id where c.id = $1 order by i.pos`, childID)
	if err != nil {
		return nil, s.fail("reading the inbox of "+childID, err)
	}
	defer rows.Close()
	found := false
	out := []seam.QueuedMessage{}
	for rows.Next() {
		found = true
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, s.fail("reading the inbox of "+childID, err)
		}
		if b == nil {
			continue
		}
		var q seam.QueuedMessage
		if err := json.Unmarshal(b, &q); err != nil {
			return nil, corrupt(childID, "inbox", err)
		}
		out = append(out, q)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("reading the inbox of "+childID, err)
	}
	if !found {
		return nil, notFound(childID)
	}
	return out, nil
}

// Checkpoint returns the child's projection checkpoint, if one is stored.
func (s *Store) Checkpoint(ctx context.Context, childID string) (seam.Checkpoint, bool, error) {
	var cp seam.Checkpoint
	b, err := s.column(ctx, childID, "checkpoint")
	if err != nil || b == nil {
		return cp, false, err
	}
	if err := json.Unmarshal(b, &cp); err != nil {
		return seam.Checkpoint{}, false, corrupt(childID, "checkpoint", err)
	}
	return cp, true, nil
}

// SetCheckpoint stores cp if it is current (its Seq is the journal's
// length); a stale one is dropped.
func (s *Store) SetCheckpoint(ctx context.Context, childID string, cp seam.Checkpoint) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	b, err := json.Marshal(cp)
	if err != nil {
		return fmt.Errorf("pgstore: child %q: encode checkpoint: %w", childID, err)
	}
	var found bool
	err = s.pool.QueryRow(ctx, `with u as (update children set checkpoint = $3 where id = $1 and journal_len = $2 returning 1)
		select exists (select 1 from children where id = $1)`, childID, cp.Seq, b).Scan(&found)
	if err != nil {
		return s.fail("storing the checkpoint of "+childID, err)
	}
	if !found {
		return notFound(childID)
	}
	return nil
}

// listingCols are what a listing row reads of a child c.
const listingCols = `c.id, c.header, c.checkpoint, c.journal_len, c.has_children`

// The listing queries, a first page and a page after a key apart: with
// the key's bound behind an "or", a generic plan (the one a prepared
// statement settles on) filters the index instead of starting at the
// key, reading every row before it.
var (
	listingsFirst = `select ` + listingCols + ` from children c where c.parent = $1
		order by c.created_ns, c.id limit $2`
	listingsAfter = `select ` + listingCols + ` from children c where c.parent = $1
		and (c.created_ns, c.id) > ($3, $4) order by c.created_ns, c.id limit $2`
	descendantsFirst = `select ` + listingCols + ` from ancestors a join children c on c.id = a.child_id where a.ancestor = $1
		order by a.created_ns, a.child_id limit $2`
	descendantsAfter = `select ` + listingCols + ` from ancestors a join children c on c.id = a.child_id where a.ancestor = $1
		and (a.created_ns, a.child_id) > ($3, $4) order by a.created_ns, a.child_id limit $2`
)

// Listings returns parent's direct children in creation order, ties by
// id, from the listing index.
func (s *Store) Listings(ctx context.Context, parent string, page seam.Page) ([]seam.Listing, error) {
	return s.listing(ctx, listingsFirst, listingsAfter, parent, page)
}

// Descendants returns root's whole subtree in creation order, ties by id,
// from the ancestors index.
func (s *Store) Descendants(ctx context.Context, root string, page seam.Page) ([]seam.Listing, error) {
	return s.listing(ctx, descendantsFirst, descendantsAfter, root, page)
}

func (s *Store) listing(ctx context.Context, first, after, addr string, page seam.Page) ([]seam.Listing, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	var limit *int
	if page.Limit > 0 {
		limit = &page.Limit
	}
	query, args := first, []any{addr, limit}
	if !page.After.IsZero() {
		query, args = after, append(args, page.After.CreatedAt.UnixNano(), page.After.ID)
	}
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, s.fail("listing "+addr, err)
	}
	defer rows.Close()
	var out []seam.Listing
	for rows.Next() {
		var id string
		var hb, cb []byte
		var l seam.Listing
		if err := rows.Scan(&id, &hb, &cb, &l.JournalLen, &l.HasChildren); err != nil {
			return nil, s.fail("listing "+addr, err)
		}
		if err := json.Unmarshal(hb, &l.Header); err != nil || l.Header.ID != id {
			s.log.Warn("a child's header does not decode; listing it as corrupt", "child", id, "err", err)
			l.Header, l.Corrupt = seam.Header{ID: id}, true
		}
		if cb != nil {
			var cp seam.Checkpoint
			if json.Unmarshal(cb, &cp) == nil {
				l.Checkpoint = &cp
			}
		}
		if l.Checkpoint == nil {
			l.JournalLen = 0
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("listing "+addr, err)
	}
	return out, nil
}

// AddNotice queues n under to, numbered per address.
func (s *Store) AddNotice(ctx context.Context, to string, n seam.Notice) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	if to == "" {
		return errors.New("pgstore: notice principal must not be empty")
	}
	if n.Time.IsZero() {
		n.Time = time.Now().UTC()
	}
	return s.fail("queueing a notice for "+to, pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := addNotice(ctx, tx, to, n); err != nil {
			return err
		}
		return notify(ctx, tx, to) // wake.go
	}))
}

// addNotice numbers n under to (the counter's row lock orders concurrent
// adders) and queues it.
func addNotice(ctx context.Context, tx pgx.Tx, to string, n seam.Notice) error {
	if err := tx.QueryRow(ctx, `insert into notice_seqs (addr, last) values ($1, 1)
		on conflict (addr) do update set last = notice_seqs.last + 1 returning last`, to).Scan(&n.Seq); err != nil {
		return err
	}
	b, err := json.Marshal(n)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `insert into notices (addr, seq, body) values ($1, $2, $3)`, to, n.Seq, b)
	return err
}

// TakeNotices removes and returns, in one transaction, the notices under
// to that take accepts. The rows are locked: a concurrent taker waits and
// then sees them gone.
func (s *Store) TakeNotices(ctx context.Context, to string, take func(seam.Notice) bool) ([]seam.Notice, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	var out []seam.Notice
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		out = nil
		rows, err := tx.Query(ctx, `select seq, body from notices where addr = $1 order by seq for update`, to)
		if err != nil {
			return err
		}
		var taken []int64
		for rows.Next() {
			var seq int64
			var b []byte
			if err := rows.Scan(&seq, &b); err != nil {
				rows.Close()
				return err
			}
			var n seam.Notice
			if err := json.Unmarshal(b, &n); err != nil {
				rows.Close()
				return fmt.Errorf("notice %d of %q: %w: %w", seq, to, seam.ErrCorrupt, err)
			}
			if take == nil || take(n) {
				out = append(out, n)
				taken = append(taken, seq)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(taken) == 0 {
			return err
		}
		_, err = tx.Exec(ctx, `delete from notices where addr = $1 and seq = any($2)`, to, taken)
		return err
	})
	if err != nil {
		return nil, s.fail("taking the notices of "+to, err)
	}
	return out, nil
}

// Renew sets the expiry of owner.ID's lease, which is every one of its
// claims'.
func (s *Store) Renew(ctx context.Context, owner seam.Owner) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	if owner.ID == "" {
		return errors.New("pgstore: renew: the owner has no id")
	}
	_, err := s.pool.Exec(ctx, `update owners set expires_ns = $2 where id = $1`, owner.ID, owner.Expires.UnixNano())
	return s.fail("renewing owner "+owner.ID, err)
}

// Residents lists every claim, by child id.
func (s *Store) Residents(ctx context.Context) ([]seam.Claim, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `select c.id, c.claim_owner, coalesce(o.expires_ns, 0), c.claim_epoch, c.parent from children c
		left join owners o on o.id = c.claim_owner where c.claim_owner is not null order by c.id`)
	if err != nil {
		return nil, s.fail("listing claims", err)
	}
	defer rows.Close()
	var out []seam.Claim
	for rows.Next() {
		c, err := scanClaim(rows)
		if err != nil {
			return nil, s.fail("listing claims", err)
		}
		out = append(out, c)
	}
	return out, s.fail("listing claims", rows.Err())
}

func scanClaim(row pgx.Row) (seam.Claim, error) {
	var c seam.Claim
	var expires int64
	if err := row.Scan(&c.ChildID, &c.Owner.ID, &expires, &c.Epoch, &c.Parent); err != nil {
		return c, err
	}
	if expires != 0 {
		c.Owner.Expires = time.Unix(0, expires)
	}
	return c, nil
}

// ClaimOf returns the child's claim, if it is claimed.
func (s *Store) ClaimOf(ctx context.Context, childID string) (seam.Claim, bool, error) {
	if err := s.begin(ctx); err != nil {
		return seam.Claim{}, false, err
	}
	var owner *string
	var expires, epoch int64
	err := s.pool.QueryRow(ctx, `select c.claim_owner, coalesce(o.expires_ns, 0), c.claim_epoch from children c
		left join owners o on o.id = c.claim_owner where c.id = $1`, childID).Scan(&owner, &expires, &epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return seam.Claim{}, false, notFound(childID)
	}
	if err != nil || owner == nil {
		return seam.Claim{}, false, s.fail("reading the claim of "+childID, err)
	}
	c := seam.Claim{ChildID: childID, Owner: seam.Owner{ID: *owner}, Epoch: epoch}
	if expires != 0 {
		c.Owner.Expires = time.Unix(0, expires)
	}
	return c, true, nil
}

// Delete removes childID and its subtree in one transaction, refusing
// (ErrClaimed) while any of them is claimed.
func (s *Store) Delete(ctx context.Context, childID string) ([]string, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	var ids []string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		ids = nil
		// The parent's row first (parents before children, as every
		// Delete locks, so two never wait on each other): its
		// has_children is recounted below, after this child goes, and a
		// concurrent creation of a sibling (markParent) must be seen by
		// that count or wait for it.
		var parent string
		if err := tx.QueryRow(ctx, `select parent from children where id = $1`, childID).Scan(&parent); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return notFound(childID)
			}
			return err
		}
		if _, err := tx.Exec(ctx, `select from children where id = $1 for update`, parent); err != nil {
			return err
		}
		// Lock the subtree's rows: a concurrent claim waits, then finds
		// the child gone.
		rows, err := tx.Query(ctx, `select c.id, c.claim_owner from children c where c.id = $1
			or c.id in (select child_id from ancestors where ancestor = $1) order by c.id = $1 desc, c.created_ns, c.id for update of c`, childID)
		if err != nil {
			return err
		}
		var claimed string
		for rows.Next() {
			var id string
			var owner *string
			if err := rows.Scan(&id, &owner); err != nil {
				rows.Close()
				return err
			}
			if owner != nil && claimed == "" {
				claimed = id
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		switch {
		case len(ids) == 0 || ids[0] != childID:
			return notFound(childID)
		case claimed != "":
			return fmt.Errorf("pgstore: child %q: %w", claimed, seam.ErrClaimed)
		}
		// Events, inboxes and index rows go with the children (on delete
		// cascade); the notices queued under their addresses go here.
		for _, q := range []string{`delete from notices where addr = any($1)`, `delete from notice_seqs where addr = any($1)`,
			`delete from children where id = any($1)`} {
			if _, err := tx.Exec(ctx, q, ids); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `update children set has_children = exists (select 1 from children where parent = $1) where id = $1`, parent)
		return err
	})
	if err != nil {
		if errors.Is(err, seam.ErrNotFound) || errors.Is(err, seam.ErrClaimed) {
			return nil, err
		}
		return nil, s.fail("deleting "+childID, err)
	}
	return ids, nil
}

var (
	minCreatedAt = time.Unix(0, math.MinInt64)
	maxCreatedAt = time.Unix(0, math.MaxInt64)
)
