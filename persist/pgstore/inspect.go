package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Report is a database as `mcp-subagent doctor` shows it: its schema, the
// owners' leases and the claims nobody live holds, all read in one
// snapshot and judged by the database's clock.
type Report struct {
	// Schema is the database's schema version; 0 before the first server
	// created it. Compare with SchemaVersion.
	Schema int
	// Now is the database's clock when read: the clock leases are judged
	// by.
	Now    time.Time
	Owners []OwnerReport // by id
	// Stale are the claims of owners whose lease has expired (or who have
	// no lease row), by child id: the children a live instance's takeover
	// sweep will resume (Owner.Expires zero for a missing lease).
	Stale []seam.Claim
	// Sessions are the root sessions recorded as connected, by principal
	// then id; one whose owner's lease expired is not Live (the next
	// live instance's renewal reaps it). Empty below schema version 5.
	Sessions []SessionReport
}

// SessionReport is one root session's record.
type SessionReport struct {
	ID, Principal, Owner string
	Live                 bool // its owner's lease is after the database's clock
}

// OwnerReport is one owner's lease.
type OwnerReport struct {
	ID      string
	Expires time.Time
	Live    bool // Expires is after the database's clock
	Claims  int  // children it holds claimed
}

// Inspect reads dsn's database as Report says, changing nothing: it
// applies no migration, so it also reports a database newer or older than
// this build. Errors show the URL's password redacted.
func Inspect(ctx context.Context, dsn string) (Report, error) {
	pw := password(dsn)
	var rep Report
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return rep, scrub(fmt.Errorf("pgstore: connecting to %s: %w", Redact(dsn), err), pw)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `select now()`).Scan(&rep.Now); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `select to_regclass('mcp_subagent_schema') is not null`).Scan(&exists); err != nil || !exists {
			return err // no schema yet, unless err
		}
		if err := tx.QueryRow(ctx, `select coalesce(max(version), 0) from mcp_subagent_schema`).Scan(&rep.Schema); err != nil || rep.Schema == 0 {
			return err
		}
		if err := inspectClaims(ctx, tx, &rep); err != nil {
			return err
		}
		return inspectSessions(ctx, tx, &rep)
	})
	if err != nil {
		return Report{}, scrub(fmt.Errorf("pgstore: inspecting %s: %w", Redact(dsn), err), pw)
	}
	return rep, nil
}

func inspectClaims(ctx context.Context, tx pgx.Tx, rep *Report) error {
	rows, err := tx.Query(ctx, `select o.id, o.expires_ns, o.expires_ns > `+nowNS+`,
		(select count(*) from children c where c.claim_owner = o.id) from owners o order by o.id`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var o OwnerReport
		var ns int64
		if err := rows.Scan(&o.ID, &ns, &o.Live, &o.Claims); err != nil {
			rows.Close()
			return err
		}
		o.Expires = time.Unix(0, ns)
		rep.Owners = append(rep.Owners, o)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	rows, err = tx.Query(ctx, `select c.id, c.claim_owner, coalesce(o.expires_ns, 0), c.claim_epoch, c.parent from children c
		left join owners o on o.id = c.claim_owner
		where c.claim_owner is not null and coalesce(o.expires_ns > `+nowNS+`, false) = false order by c.id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		c, err := scanClaim(rows)
		if err != nil {
			return err
		}
		rep.Stale = append(rep.Stale, c)
	}
	return rows.Err()
}

// sessionsSchema is the schema version that added the sessions table.
const sessionsSchema = 5

func inspectSessions(ctx context.Context, tx pgx.Tx, rep *Report) error {
	if rep.Schema < sessionsSchema {
		return nil
	}
	rows, err := tx.Query(ctx, `select s.principal, s.id, s.owner, coalesce(o.expires_ns > `+nowNS+`, false)
		from sessions s left join owners o on o.id = s.owner order by s.principal, s.id, s.owner`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var r SessionReport
		if err := rows.Scan(&r.Principal, &r.ID, &r.Owner, &r.Live); err != nil {
			return err
		}
		rep.Sessions = append(rep.Sessions, r)
	}
	return rows.Err()
}
