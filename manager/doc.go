// Package manager owns every child's lifecycle: the provider registry, the
// validation of a request against the chosen provider before anything
// starts, depth, one-shot runs, and continuable children — their
// activations, inboxes, follow-ups, interrupts, reports, settlement
// notices, listing and crash recovery. Providers contribute data (creation
// inputs) and a driver that runs one turn; everything else is here.
//
// Guarantees:
//
//   - A request that needs something its provider lacks is refused before
//     the provider is called (UNSUPPORTED_CAPABILITY naming the field and
//     the provider); so are non-object output schemas, unknown tool names
//     in a filter and depths over the cap (DEPTH_EXCEEDED: "subagent depth
//     N exceeds maxDepth M"; the deployment's default cap is 3).
//   - A child's id, and a message's, is committed to the store before it
//     is handed to anyone (Started.Committed; Followup and ReportFrom wait
//     for their message). A queued message leaves the stored inbox in the
//     same commit as its turn's first event, so a crash keeps one or the
//     other; a resume runs what was left queued first, in order. Journal
//     events are written behind the turn by the child's own writer, in
//     order, batched per commit.
//   - Each child has one inbox, its only turn queue; every message becomes
//     one FIFO turn (or, for a quiet report, rides along with the next).
//     A message never alters a turn in flight.
//   - Residency is derived, not stored: running (a turn in progress or
//     queued), idle (resident, waiting for its own children or holding a
//     parked queue), ready (stored only).
//   - When an activation settles, its direct parent gets exactly one
//     notice (source kind subagent-settled), unless the epoch's last turn
//     was already answered in band to a waiting caller. The notice is put
//     in a live parent's inbox in the same critical section that drops the
//     parent's ownership, so a parent never settles without it. A root
//     principal's notices are stored until its next call takes them.
//   - Progress notes may be dropped; notices and results are not.
//   - Listing never loads, resumes or queries a child: a live child is
//     read from memory, a stored one from its checkpoint (current by
//     construction) or, failing that, one fold of its journal. A child
//     that cannot be read is a diagnostic row; its siblings are unaffected.
//   - Close stops every resident child without a notice and leaves its
//     active mark, exactly as a crash would; Recover, on the next start,
//     closes the interrupted turns and announces each ended epoch.
//
// Caveats: a failed final flush is logged, not fatal; a later listing then
// folds the journal, and a mark left set makes the next start announce the
// epoch again. A crash can lose the journal events of the last few
// milliseconds of a turn — never a child or a message whose id was handed
// out. Stores without the Inboxer ability (the in-memory one) keep no
// inbox. A child interrupted with a parked queue stays resident until its
// parent sends again; if the server stops first, the queue waits in the
// store for the next resume.
package manager
