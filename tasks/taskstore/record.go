// Package taskstore is the storage contract of the tasks layer: the durable
// task record, its status, the Store that keeps records, and the record's
// stored bytes (Encode, Decode), which every backend shares. It imports
// only seam (for ErrCorrupt) so that a store (persist, pgstore, any other
// backend) implements it without linking the tasks layer, the MCP tools or
// the MCP library above it, or another backend; the tasks package uses it.
package taskstore

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Status is a task's state on the wire.
type Status string

const (
	StatusWorking   Status = "working"
	StatusCompleted Status = "completed"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
)

// Terminal reports whether a task in status s is done: it never changes
// again.
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// Record is a task as it is stored: written before its handle is replied,
// rewritten when it settles.
type Record struct {
	ID        string // unguessable, never an agent id
	Principal string // the only principal that may read or cancel it
	Tool      string // the tool call it stands for: subagent or send_message
	AgentID   string // the child whose turn it waits on
	MessageID string // the message whose turn it waits on
	Status    Status
	// StatusMessage is the child's latest step while working; for a
	// failed task, the diagnostic.
	StatusMessage string
	CreatedAt     time.Time
	UpdatedAt     time.Time
	// SettledAt is when it reached a terminal status; zero while working.
	// It expires TTL after that.
	SettledAt time.Time
	TTL       time.Duration
	// Result is the CallToolResult the call answered (completed and
	// cancelled tasks), exactly as a foreground call gives it.
	Result json.RawMessage
	// Error is the JSON-RPC error of a failed task.
	Error *RPCError
	// Runner is the instance whose call waits on the task's turn, in a
	// store several instances share; empty when the store is one
	// instance's. Beat is when that call last said it still runs: a
	// working task run elsewhere is resolved only once its beat is stale.
	Runner string
	Beat   time.Time
	// CancelRequested is a tasks/cancel received at an instance other
	// than the Runner, stored while the task worked: the runner reads it
	// at its next beat and cancels the task as a tasks/cancel of its own
	// would; a call that answers first settles the task cancelled.
	CancelRequested bool
}

// RPCError is a JSON-RPC error object.
type RPCError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// Expired reports whether r settled more than its TTL before now.
func (r Record) Expired(now time.Time) bool {
	return r.Status.Terminal() && !r.SettledAt.IsZero() && !now.Before(r.SettledAt.Add(r.TTL))
}

// ErrNotFound marks a task id the store does not hold.
var ErrNotFound = errors.New("no such task")

// Store keeps task records: persist.Store implements it in the session
// store, beside the children the tasks wait on. Each write is committed
// when the method returns.
type Store interface {
	// PutTask creates or replaces the record of r.ID.
	PutTask(ctx context.Context, r Record) error
	// UpdateTask is a compare-and-set of the record of id: fn gets the
	// stored record and returns the one to store, inside one store
	// transaction (bbolt's write transaction, memstore's mutex,
	// PostgreSQL's row lock taken by SELECT ... FOR UPDATE), so no other
	// write of that record lands between fn's read and its write. An
	// error from fn stores nothing and is returned as it is: how a caller
	// declines (a record no longer working, say). fn runs once, and must
	// neither call the store nor wait on anything. The record fn returns
	// keeps id (another ID is an error). An unknown id is an error
	// wrapping ErrNotFound, and fn is not called. UpdateTask returns the
	// record stored.
	//
	// A function rather than a compare of versions: each store already
	// has a transaction that does it, so no version field is added to the
	// stored record (the bytes stay as they were: older stores open
	// unchanged, PostgreSQL's schema is unchanged) and no caller needs a
	// retry loop.
	UpdateTask(ctx context.Context, id string, fn func(Record) (Record, error)) (Record, error)
	// Task reads one record; an unknown id is an error wrapping ErrNotFound.
	Task(ctx context.Context, id string) (Record, error)
	// DeleteTask removes a record; an unknown id is not an error.
	DeleteTask(ctx context.Context, id string) error
	// Tasks lists every record (a record whose bytes do not decode is
	// skipped by the store, and logged).
	Tasks(ctx context.Context) ([]Record, error)
}
