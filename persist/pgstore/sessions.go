package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

var _ seam.Sessions = (*Store)(nil)

// OpenSession records a root session as connected at its owner and sets
// the owner's lease, in one transaction (see seam.Sessions).
func (s *Store) OpenSession(ctx context.Context, se seam.Session) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	if se.ID == "" || se.Owner.ID == "" {
		return errors.New("pgstore: open session: the session and its owner need ids")
	}
	return s.fail("recording session "+se.ID, pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `insert into owners (id, expires_ns) values ($1, $2)
			on conflict (id) do update set expires_ns = excluded.expires_ns`, se.Owner.ID, se.Owner.Expires.UnixNano()); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `insert into sessions (id, owner, principal) values ($1, $2, $3)
			on conflict (id, owner) do update set principal = excluded.principal`, se.ID, se.Owner.ID, se.Principal)
		return err
	}))
}

// CloseSession removes a session's record at owner, waking its
// principal's watchers.
func (s *Store) CloseSession(ctx context.Context, session, owner string) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	return s.fail("removing session "+session, pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var principal string
		err := tx.QueryRow(ctx, `delete from sessions where id = $1 and owner = $2 returning principal`, session, owner).Scan(&principal)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		return notify(ctx, tx, seam.PrincipalAddress(principal))
	}))
}

// SessionsOf returns principal's records whose owner's lease runs by the
// database's clock.
func (s *Store) SessionsOf(ctx context.Context, principal string) ([]seam.Session, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `select s.id, s.owner, s.principal, o.expires_ns from sessions s join owners o on o.id = s.owner
		where s.principal = $1 and o.expires_ns > `+nowNS+` order by s.id, s.owner`, principal)
	if err != nil {
		return nil, s.fail("listing the sessions of "+principal, err)
	}
	out, err := scanSessions(rows)
	return out, s.fail("listing the sessions of "+principal, err)
}

// ReapSessions removes, in one transaction, the records whose owner's
// lease expired by the database's clock, and wakes their principals'
// watchers.
func (s *Store) ReapSessions(ctx context.Context) ([]seam.Session, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	var out []seam.Session
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `delete from sessions s using owners o where o.id = s.owner and o.expires_ns <= `+nowNS+`
			returning s.id, s.owner, s.principal, o.expires_ns`)
		if err != nil {
			return err
		}
		if out, err = scanSessions(rows); err != nil || len(out) == 0 {
			return err
		}
		keys := make([]string, len(out))
		for i, se := range out {
			keys[i] = seam.PrincipalAddress(se.Principal)
		}
		return notify(ctx, tx, keys...)
	})
	if err != nil {
		return nil, s.fail("removing the sessions of expired owners", err)
	}
	return out, nil
}

func scanSessions(rows pgx.Rows) ([]seam.Session, error) {
	defer rows.Close()
	var out []seam.Session
	for rows.Next() {
		var se seam.Session
		var expires int64
		if err := rows.Scan(&se.ID, &se.Owner.ID, &se.Principal, &expires); err != nil {
			return nil, err
		}
		se.Owner.Expires = time.Unix(0, expires)
		out = append(out, se)
	}
	return out, rows.Err()
}
