package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// encoded is a ChildWrite's bytes, made before the transaction.
type encoded struct {
	hb, db, cb []byte
	events     [][]byte
	seqs       []int64
	queued     [][]byte
	queuedIDs  []string
	notify     []byte // the settlement notice for a parent's inbox
	notice     seam.Notice
}

func encode(childID string, w seam.ChildWrite) (*encoded, error) {
	e := &encoded{}
	var err error
	if c := w.Create; c != nil {
		h, d := c.Header, c.Descriptor
		switch {
		case h.ID != childID:
			return nil, fmt.Errorf("pgstore: child %q: create names %q", childID, h.ID)
		case h.ID == "":
			return nil, errors.New("pgstore: header id must not be empty")
		case h.Parent == "":
			return nil, fmt.Errorf("pgstore: child %q: header parent must not be empty", h.ID)
		case h.CreatedAt.IsZero():
			return nil, fmt.Errorf("pgstore: child %q: header created_at must be set", h.ID)
		case h.CreatedAt.Before(minCreatedAt) || h.CreatedAt.After(maxCreatedAt):
			return nil, fmt.Errorf("pgstore: child %q: header created_at %s is outside the years 1678-2262", h.ID, h.CreatedAt)
		case d.Version != seam.DescriptorVersion:
			return nil, fmt.Errorf("pgstore: child %q: descriptor version %d is not %d", h.ID, d.Version, seam.DescriptorVersion)
		}
		if e.hb, err = json.Marshal(h); err != nil {
			return nil, fmt.Errorf("pgstore: child %q: encode header: %w", h.ID, err)
		}
		if e.db, err = json.Marshal(d); err != nil {
			return nil, fmt.Errorf("pgstore: child %q: encode descriptor: %w", h.ID, err)
		}
	}
	if c := w.Claim; c != nil && c.ID == "" {
		return nil, fmt.Errorf("pgstore: child %q: a claim needs an owner id", childID)
	}
	for _, ev := range w.Events {
		if ev.Kind == "" {
			return nil, fmt.Errorf("pgstore: child %q: event %d has no kind", childID, ev.Seq)
		}
		b, err := json.Marshal(ev)
		if err != nil {
			return nil, fmt.Errorf("pgstore: child %q: encode event %d: %w", childID, ev.Seq, err)
		}
		e.events, e.seqs = append(e.events, b), append(e.seqs, ev.Seq)
	}
	for _, q := range w.Enqueue {
		b, err := json.Marshal(q)
		if err != nil {
			return nil, err
		}
		e.queued, e.queuedIDs = append(e.queued, b), append(e.queuedIDs, q.ID)
	}
	if w.Settle != nil {
		if e.cb, err = json.Marshal(*w.Settle); err != nil {
			return nil, err
		}
	}
	if n := w.Notify; n != nil {
		switch {
		case w.Settle == nil:
			return nil, fmt.Errorf("pgstore: child %q: a notice is written only with its settlement", childID)
		case n.To == "":
			return nil, fmt.Errorf("pgstore: child %q: the settlement notice has no recipient", childID)
		case n.Inbox:
			if e.notify, err = json.Marshal(n.Message); err != nil {
				return nil, err
			}
		default:
			e.notice = n.Notice
			if e.notice.Time.IsZero() {
				e.notice.Time = time.Now().UTC()
			}
		}
	}
	return e, nil
}

// refusal is a write's check failing: returned as it is, not as a
// database fault.
type refusal struct{ error }

func (r refusal) Unwrap() error { return r.error }

func refuse(format string, args ...any) error { return refusal{fmt.Errorf(format, args...)} }

// row is a child's row as a write locked it.
type row struct {
	journalLen int64
	holder     *string
	epoch      int64
	live       bool // the holder's lease runs by the database's clock
}

const lockCols = `c.journal_len, c.claim_owner, c.claim_epoch, coalesce(o.expires_ns > ` + nowNS + `, false)`

// WriteChild applies w in one transaction: it locks the child's row (a
// takeover skips a row locked by another writer, refused at once), checks
// every part against what is committed, then applies them all.
func (s *Store) WriteChild(ctx context.Context, childID string, w seam.ChildWrite) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	e, err := encode(childID, w)
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := s.write(ctx, tx, childID, w, e); err != nil {
			return err
		}
		return notify(ctx, tx, seam.WakeKeys(childID, w)...) // wake.go
	})
	var r refusal
	if errors.As(err, &r) {
		return r.error
	}
	return s.fail("writing child "+childID, err)
}

func (s *Store) write(ctx context.Context, tx pgx.Tx, id string, w seam.ChildWrite, e *encoded) error {
	var r row
	if c := w.Create; c != nil {
		if f := w.Fence; f != nil {
			return refuse("pgstore: child %q: the write is fenced to owner %q at epoch %d, and nobody holds a child not yet created: %w", id, f.Owner, f.Epoch, seam.ErrOwned)
		}
		tag, err := tx.Exec(ctx, `insert into children (id, parent, created_ns, header, descriptor) values ($1, $2, $3, $4, $5)
			on conflict (id) do nothing`, id, c.Header.Parent, c.Header.CreatedAt.UnixNano(), e.hb, e.db)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return refuse("pgstore: child %q: %w", id, ErrExists)
		}
		// Its ancestors: the parent, and the parent's own ancestors.
		if _, err := tx.Exec(ctx, `insert into ancestors (ancestor, created_ns, child_id)
			select $1::text, $2::bigint, $3::text union select ancestor, $2, $3 from ancestors where child_id = $1`, c.Header.Parent, c.Header.CreatedAt.UnixNano(), id); err != nil {
			return err
		}
		if err := markParent(ctx, tx, c.Header.Parent); err != nil {
			return err
		}
	} else {
		var err error
		if r, err = s.lock(ctx, tx, id, w); err != nil {
			return err
		}
	}
	if f := w.Fence; f != nil && w.Create == nil {
		if err := checkFence(id, *f, r.holder, r.epoch); err != nil {
			return err
		}
	}
	if c := w.Claim; c != nil {
		if r.holder != nil && *r.holder != c.ID && r.live {
			return refuse("pgstore: child %q is claimed by owner %q, whose lease has not expired: %w", id, *r.holder, seam.ErrOwned)
		}
		if _, err := tx.Exec(ctx, `insert into owners (id, expires_ns) values ($1, $2)
			on conflict (id) do update set expires_ns = excluded.expires_ns`, c.ID, c.Expires.UnixNano()); err != nil {
			return err
		}
		epoch := r.epoch
		if r.holder == nil || *r.holder != c.ID {
			epoch++ // a takeover, or a claim of an unclaimed child
		}
		if _, err := tx.Exec(ctx, `update children set claim_owner = $2, claim_epoch = $3 where id = $1`, id, c.ID, epoch); err != nil {
			return err
		}
	}
	if n := w.JournalIs; n != nil && w.Create == nil && *n != r.journalLen {
		return refuse("pgstore: child %q: the journal holds %d events, not the %d the write was made on: %w", id, r.journalLen, *n, seam.ErrStale)
	}
	for i, seq := range e.seqs {
		if want := r.journalLen + int64(i); seq != want {
			return refuse("pgstore: child %q: event sequence %d does not continue the journal (next is %d)", id, seq, want)
		}
	}
	var parentFound bool
	if n := w.Notify; n != nil && n.Inbox {
		if err := tx.QueryRow(ctx, `select exists (select 1 from children where id = $1)`, n.To).Scan(&parentFound); err != nil {
			return err
		}
		if !parentFound {
			return refuse("pgstore: child %q: the settlement notice's recipient: %w", id, notFound(n.To))
		}
	}
	if len(e.queued) > 0 {
		if _, err := tx.Exec(ctx, `insert into inbox (child_id, msg_id, body) select $1, m, b from unnest($2::text[], $3::bytea[]) with ordinality as x(m, b, o) order by o`,
			id, e.queuedIDs, e.queued); err != nil {
			return err
		}
	}
	if len(w.Dequeue) > 0 {
		if _, err := tx.Exec(ctx, `delete from inbox where child_id = $1 and msg_id = any($2)`, id, w.Dequeue); err != nil {
			return err
		}
	}
	n := r.journalLen
	if len(e.events) > 0 {
		if _, err := tx.Exec(ctx, `insert into events (child_id, seq, body) select $1, q, b from unnest($2::bigint[], $3::bytea[]) as x(q, b)`,
			id, e.seqs, e.events); err != nil {
			return err
		}
		n += int64(len(e.events))
		// A checkpoint is stale once the journal grows.
		if _, err := tx.Exec(ctx, `update children set journal_len = $2, checkpoint = null where id = $1`, id, n); err != nil {
			return err
		}
	}
	if w.Settle == nil {
		return nil
	}
	var cb []byte
	if w.Settle.Seq == n {
		cb = e.cb
	}
	if _, err := tx.Exec(ctx, `update children set claim_owner = null, checkpoint = coalesce($2, checkpoint) where id = $1`, id, cb); err != nil {
		return err
	}
	switch nt := w.Notify; {
	case nt == nil:
		return nil
	case nt.Inbox:
		_, err := tx.Exec(ctx, `insert into inbox (child_id, msg_id, body) values ($1, $2, $3)`, nt.To, nt.Message.ID, e.notify)
		return err
	default:
		return addNotice(ctx, tx, nt.To, e.notice)
	}
}

// markParent records that parent (when it is a child: a principal's
// address has no row) has children. The key-share lock orders it against
// a Delete taking parent's last child, which locks parent's row before it
// recounts (Delete), so that one of the two sees the other: without it,
// the flag could be read as set here and cleared there by a count that
// missed this insert. Only the first child writes the row.
func markParent(ctx context.Context, tx pgx.Tx, parent string) error {
	var has bool
	err := tx.QueryRow(ctx, `select has_children from children where id = $1 for key share`, parent).Scan(&has)
	if has || errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `update children set has_children = true where id = $1`, parent)
	return err
}

// lock locks a stored child's row for the write. A claim by another than
// the holder (a takeover, or a claim of an unclaimed child) skips a row
// another transaction holds: someone is writing or taking it right now,
// so it is not this claimer's to take. Everyone else waits their turn.
func (s *Store) lock(ctx context.Context, tx pgx.Tx, id string, w seam.ChildWrite) (row, error) {
	var r row
	q := `select ` + lockCols + ` from children c left join owners o on o.id = c.claim_owner where c.id = $1 for update of c`
	if c := w.Claim; c != nil && w.Fence == nil {
		err := tx.QueryRow(ctx, q+` skip locked`, id).Scan(&r.journalLen, &r.holder, &r.epoch, &r.live)
		if err == nil {
			return r, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return r, err
		}
		// Missing, or locked: read the claim without the lock.
		var holder *string
		var exists bool
		if err := tx.QueryRow(ctx, `select true, claim_owner from children where id = $1`, id).Scan(&exists, &holder); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return r, refusal{notFound(id)}
			}
			return r, err
		}
		if holder == nil || *holder != c.ID {
			return r, refuse("pgstore: child %q is being written or taken over by another instance right now: %w", id, seam.ErrOwned)
		}
		// The holder's own claim again: wait for its other write.
	}
	err := tx.QueryRow(ctx, q, id).Scan(&r.journalLen, &r.holder, &r.epoch, &r.live)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, refusal{notFound(id)}
	}
	return r, err
}
