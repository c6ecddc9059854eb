// Package seam is the vocabulary of the manager's two seams: what a
// provider implements (Provider, Driver, StartRequest, Result, the optional
// abilities) and what a store implements (Store, with Header, Descriptor,
// Checkpoint, Notice, the claims and listings it reads and writes), with
// the typed seam error (Error, Code, the Err sentinels) and the store's
// sentinels (ErrNotFound, ErrCorrupt, ErrOwned, ErrClaimed).
//
// It holds contracts only, so that a provider or a store backend depends on
// this package and not on the manager: persist and persist/memstore import
// seam, never manager, and a new backend (a shared store) can be written
// against it alone. The manager imports it and implements the lifecycle
// behind it.
//
// Its imports are the leaves below it: llm (the message vocabulary: Usage,
// Effort), agent (the journal vocabulary a driver appends to and a store
// keeps: Event, StopReason, Journal, Input, TurnResult) and worktree (a
// child's git worktree, recorded in its Header). None of them links a vendor
// SDK or an MCP library; internal/archtest checks it.
//
// Moving these types here from manager changed no encoding: stores write
// them as JSON with explicit field tags, never keyed on a Go type name.
package seam
