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
// It imports nothing of this module (internal/archtest checks it), so a
// backend or a provider written against it links only it. That decides
// where three families of types live:
//
//   - The journal's record types (Event and its kinds and sources,
//     StopReason, Grant, Input, TurnResult, the Journal itself and its
//     invariants, Validate) are what a driver appends and a store keeps:
//     the contract itself, so they are defined here. Package agent, whose
//     turn loop writes them, keeps its names for them as aliases
//     (agent.Event = seam.Event), so its callers did not change; the folds
//     over a journal (usage, last outcome, budget spent, closing a crashed
//     turn) and the stored encoding (agent.EncodeEvent) stay in agent.
//   - A recorded message (Message, ToolCall, Role) and Usage have the
//     model client's types' fields and JSON field for field (llm.Message,
//     llm.ToolCall, llm.Usage), but are seam's own: llm is the chat model
//     contract every model client links and must not depend on the
//     manager's seams, and seam must not depend on llm. They convert with
//     a plain conversion (Usage, ToolCall) or a field copy (Message), which
//     package agent does where the model is called. Effort is seam's own
//     named string for the same reason.
//   - A child's worktree (Worktree, Changes) likewise has worktree.Info's
//     and worktree.Changes' fields and JSON and converts where the
//     worktree policy (manager/worktrees) calls package worktree.
//
// Moving these types here from manager, agent, llm and worktree changed no
// encoding: stores write them as JSON with the same field tags, never keyed
// on a Go type name, and the journal's stored format is agent's own wire
// type. The golden stores (persist) pin it.
package seam
