package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrations are the schema's versions, in order: migrations[i] takes a
// database from version i to i+1. A shipped migration is never edited;
// a change is a new one.
//
// Text keys are collated "C" (bytes), so orders by id are Go's string
// order, as the other stores give them. Times a caller gave (creation,
// expiry) are Unix nanoseconds: timestamptz keeps microseconds, and a
// listing key or a lease must read back exactly as written.
var migrations = []string{
	// 1: the first schema.
	`
create table owners (
	id text collate "C" primary key,
	-- the lease as the owner set it; judged against the database's clock
	expires_ns bigint not null
);

create table children (
	id text collate "C" primary key,
	parent text collate "C" not null,
	created_ns bigint not null,
	header bytea not null,
	descriptor bytea not null,
	-- the projection cache: only ever a current one (see SetCheckpoint)
	checkpoint bytea,
	journal_len bigint not null default 0,
	claim_owner text collate "C",
	-- the last claim's epoch; it outlives the claim
	claim_epoch bigint not null default 0
);
-- A parent's listing, in creation order, ties by id.
create index children_listing on children (parent, created_ns, id);
create index children_claimed on children (claim_owner) where claim_owner is not null;

-- Every ancestor address of every child (its parent, the parent's parent,
-- up to the root address), for a page of a whole subtree.
create table ancestors (
	ancestor text collate "C" not null,
	created_ns bigint not null,
	child_id text collate "C" not null references children (id) on delete cascade,
	primary key (ancestor, created_ns, child_id)
);
create index ancestors_child on ancestors (child_id);

create table events (
	child_id text collate "C" not null references children (id) on delete cascade,
	seq bigint not null,
	body bytea not null,
	primary key (child_id, seq)
);

create table inbox (
	child_id text collate "C" not null references children (id) on delete cascade,
	-- admission order: writes to one child are serialized by its row lock
	pos bigint generated always as identity,
	msg_id text collate "C" not null,
	body bytea not null,
	primary key (child_id, pos)
);

-- Notices are numbered per address, from 1, never reused.
create table notice_seqs (
	addr text collate "C" primary key,
	last bigint not null
);
create table notices (
	addr text collate "C" not null,
	seq bigint not null,
	body bytea not null,
	primary key (addr, seq)
);

create table tasks (
	id text collate "C" primary key,
	body bytea not null
);
`,
	// 2: durable interrupt requests (wake.go), at most one pending per child.
	`
create table interrupts (
	child_id text collate "C" primary key references children (id) on delete cascade,
	body bytea not null
);
`,
	// 3: children's questions to the person (seam.Question; the body is
	// seam.EncodeQuestion's versioned JSON).
	`
create table questions (
	child_id text collate "C" not null references children (id) on delete cascade,
	id text collate "C" not null,
	created_ns bigint not null,
	body bytea not null,
	primary key (child_id, id)
);
`,
	// 4: whether a child has children of its own, stored (write.go keeps
	// it), for listings: an exists over the children per listed row was
	// planned, with many children under one parent, as a scan of all of
	// them per row (the statistics say any parent has them all). The
	// backfill is one hashed pass, not a probe per row, for the same
	// reason.
	`
alter table children add column has_children boolean not null default false;
update children set has_children = true where id in (select parent from children);
`,
	// 5: root sessions connected at an owner (sessions.go), live while the
	// owner's lease runs.
	`
create table sessions (
	id text collate "C" not null,
	owner text collate "C" not null references owners (id) on delete cascade,
	principal text collate "C" not null,
	primary key (id, owner)
);
create index sessions_principal on sessions (principal);
create index sessions_owner on sessions (owner);
`,
	// 6 (abandoned waits): the marks of in-band waits given up
	// (seam.AwaitMarks), one row per message, gone with the child.
	`
create table abandoned_waits (
	child_id text collate "C" not null references children (id) on delete cascade,
	msg_id text collate "C" not null,
	primary key (child_id, msg_id)
);
`,
}

// SchemaVersion is the schema version this build writes and reads.
var SchemaVersion = len(migrations)

// migrate brings the database's schema up to SchemaVersion, in one
// transaction, serialized against other instances starting at the same
// time by an advisory lock. It refuses a database whose schema is newer
// than this build's: an older binary must not write to a schema it does
// not know.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// The lock's key is an arbitrary constant of this program's.
		if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(7160443129)`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `create table if not exists mcp_subagent_schema (version int not null)`); err != nil {
			return err
		}
		var have int
		if err := tx.QueryRow(ctx, `select coalesce(max(version), 0) from mcp_subagent_schema`).Scan(&have); err != nil {
			return err
		}
		if have > SchemaVersion {
			return fmt.Errorf("pgstore: the database's schema is version %d, newer than this build's %d: run a newer mcp-subagent (every instance on one database must be of a version that knows its schema)", have, SchemaVersion)
		}
		for v := have; v < SchemaVersion; v++ {
			if _, err := tx.Exec(ctx, migrations[v]); err != nil {
				return fmt.Errorf("pgstore: migrating the schema to version %d: %w", v+1, err)
			}
		}
		if have == SchemaVersion {
			return nil
		}
		if _, err := tx.Exec(ctx, `delete from mcp_subagent_schema`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `insert into mcp_subagent_schema (version) values ($1)`, SchemaVersion)
		return err
	})
}
