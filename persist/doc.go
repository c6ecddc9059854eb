// Package persist is the durable seam.Store: every child's header,
// descriptor and journal, its stored inbox, the index of children by
// parent, projection checkpoints, the residency claims that let a restart
// find interrupted epochs, and undelivered notices — all in one bbolt file,
// FileName, inside the data directory.
//
// # Opening
//
// Open creates the data directory (mode 0700) and opens the file with a
// bounded lock wait (Options.LockTimeout, default 2s; bbolt's own zero would
// wait forever). One process owns a directory at a time: a second process,
// or a second Open in the same process, fails with a *LockedError
// (errors.Is(err, ErrLocked)) whose message names the directory and suggests
// --data-dir. A file written by another layout version is refused, not
// migrated.
//
// # Layout
//
// Top-level buckets, all created by Open (big-endian integers throughout):
//
//	meta         "format" → "1" (FormatVersion)
//	children     child id → header JSON (seam.Header)
//	descriptors  child id → descriptor JSON (seam.Descriptor, strict)
//	journals     child id → nested bucket: seq (8 bytes) → event record (agent.EncodeEvent; versioned, tolerant)
//	by_parent    parent address → nested bucket:
//	             created_at Unix nanos (8 bytes, sign bit flipped) ‖ child id →
//	             index record (binary.go): version 1, depth (varint), CRC-32C of
//	             the descriptor bytes (4), created_at (8), mode, provider,
//	             label and, when set, cwd (each uvarint length ‖ bytes)
//	by_ancestor  ancestor address (a principal's, or a child's id) → nested
//	             bucket: the by_parent key of every descendant, all levels
//	             (created_at ‖ id) → the address of that descendant's parent
//	             (ancestors.go); built from by_parent when a file without it
//	             is opened
//	checkpoints  child id → checkpoint (binary.go): version 1, seq, input and
//	             output tokens (varints), cost (float64 bits, 8), mode, label,
//	             stop and, when set, closing (uvarint length ‖ bytes)
//	inboxes      child id → nested bucket: seq (8 bytes, from the bucket's
//	             NextSequence) → queued message JSON (seam.QueuedMessage)
//	notices      address → nested bucket: seq (8 bytes, from the bucket's
//	             NextSequence, starting at 1) → notice JSON (seam.Notice)
//	active       child id → claim (claims.go): version 1, expires Unix nanos
//	             (8), owner id; or empty: an active mark of an older build, a
//	             claim of an unknown earlier owner, expired
//	questions    child id → nested bucket: question id → the question
//	             (seam.EncodeQuestion: versioned JSON): made by the first
//	             question stored, so older files open unchanged
//	tasks        task id → durable MCP task record JSON (tasks.go; version 1,
//	             strict): made by the first task written, so older files open
//	             unchanged and are not laid out again for it
//
// Listings reads one by_parent bucket, one descriptor (its checksum only)
// and one checkpoint per child; it decodes no JSON and never opens a
// journal. Its order is created_at, ties broken by child id; a page
// (seam.Page) seeks the key after its cursor and reads only its own
// children. Descendants seeks the same key in the root's by_ancestor
// bucket and reads each entry's record from its parent's by_parent bucket:
// a page of a whole subtree reads its own rows, not the subtree. JournalLen
// reads the journal's last key only. The inboxes bucket was added after
// format 1 shipped: a file without it is laid out at open. An empty active
// value needs no migration: it reads as a stale claim.
//
// # Residency
//
// A claim is the owner and expiry WriteChild's Claim wrote; Renew rewrites
// every claim of one owner in one transaction; a settlement deletes it.
// The file is locked, so only owners that claimed or renewed through this
// opening can be alive: the store remembers them (in memory) and treats a
// claim of any other owner as expired, whatever its expiry says, and
// Residents reports it with a zero Expires. So a server started after
// kill -9 recovers the dead server's children at once. Each child's last
// claim epoch is kept in the epochs bucket (made by the first claim, so an
// older file opens unchanged; a child it lacks is at epoch 0); a fenced
// write is checked against it and the claim in the write's transaction.
// A child's pending interrupt request (seam.Interrupts) is kept in the
// interrupts bucket (child id → request JSON; made by the first request,
// likewise), the marks of in-band waits given up (seam.AwaitMarks) in the
// abandoned bucket (child id, a zero byte, message id; likewise). Wake-ups
// (seam.Waker) are signalled in process after each
// commit: only this process opens the file. For the same reason it does
// not keep root sessions' liveness (seam.Sessions): every session is this
// one server's, whose own knowledge of them suffices.
//
// # Guarantees
//
//   - Every method that writes returns only after its transaction has
//     committed, and bbolt fsyncs the file on every commit: an id returned
//     after a WriteChild that created it survives a crash. WriteChild
//     applies all of a write (header, descriptor, an empty journal and the
//     index entry; the claim; the inbox; the events; the checkpoint, the
//     revoked claim and the notice) or none of it; TakeNotices returns and
//     deletes an address's notices in one transaction, so each notice is
//     handed out once.
//   - WriteChild refuses events whose Seq does not continue the stored
//     journal. Events re-checks on the way out that keys run from 0 without
//     gaps and that each event's Seq is its key.
//   - Bytes that do not decode — a header, a journal event, a descriptor
//     with an unknown version or an unknown field — yield an error wrapping
//     seam.ErrCorrupt that names the child and the part. An unknown child
//     yields ErrNotFound, never ErrCorrupt. Listings never fails for one bad
//     child: a mangled index record or descriptor sets its Corrupt. One bad
//     part does not hide a child's healthy parts.
//   - Nothing returned aliases bbolt's memory: values are decoded (copied)
//     inside the transaction, so callers may keep and modify them freely.
//   - All methods are safe for concurrent use. Reads run on snapshots and
//     do not wait for writers; writers are serialized by bbolt.
//
// # Caveats
//
//   - A ctx is checked before a call starts, never during it: bbolt cannot
//     abort a transaction midway, so a write once begun (or queued for a
//     group commit) is committed whatever its ctx does.
//   - Each write transaction costs one fsync (milliseconds on most disks),
//     and writes are serialized: append a turn's events in one call, not
//     one call per event. Every page a commit dirties is written and
//     synced, so a write that claims and settles a child, or admits and
//     takes a message, writes neither the claim nor the message (a short
//     turn's whole life: 12 pages, not 16).
//   - Checkpoints are a cache: a stored checkpoint that does not decode is
//     logged and reported as absent, so the caller recomputes it. A queued
//     notice that does not decode is logged at error level and dropped
//     during TakeNotices; the others are delivered.
//   - JournalLen trusts the last key; a gap inside a journal is found by
//     Events, not by JournalLen. The store checks sequence numbers only;
//     turn structure is agent.Validate's business.
//   - Decoding is checked; bbolt's own page structure is not, and bbolt
//     answers a damaged page with a panic. Every read, write and open runs
//     behind a guard that turns such a panic (and a fault reading past the
//     file, via debug.SetPanicOnFault) into a *DamagedError naming the file
//     and `mcp-subagent doctor` (errors.Is ErrDamaged and
//     seam.ErrCorrupt); no panic leaves the store. After a write
//     panicked, every later write is refused (bbolt may hold its writer
//     lock, and writing into a damaged tree could spread it) and Close
//     waits at most 2s. A listing marks a child on a damaged page corrupt
//     and lists the rest. A stack overflow or an endless loop on a page
//     cycle is not recoverable; random damage seldom makes one.
//   - Repair (mcp-subagent doctor) copies every readable child — header,
//     descriptor, journal up to its first unreadable event, inbox, claim
//     (as an expired claim of "mcp-subagent doctor") — and every readable
//     notice into a fresh file that takes the
//     original's place; the original is kept as FileName.corrupt-<time>.
//     It reads a copy through bbolt read-only, one child per transaction,
//     so a damaged page costs only the children on it. Checkpoints are not
//     copied (listings rebuild them). It refuses to run beside a server.
//   - A file with its meta and format but missing a bucket it was created
//     with is damaged (opening it fails); only an empty file, or one
//     missing the inboxes bucket a later build added, is laid out.
//   - WriteChild commits a settlement's notice (ChildWrite.Notify) with it:
//     into a live parent's stored inbox, or a notice queue (as AddNotice).
//   - Claims are compared with this machine's clock. A Renew costs one
//     commit (a read when the owner holds none); the manager renews every
//     third of its lease while it has resident children.
//   - Delete removes a child's subtree in one transaction (every bucket
//     keyed by their ids, their index entries, an emptied parent index), and
//     refuses the lot while any of them has an entry in active, live or
//     stale. bbolt reuses the pages it frees but never shrinks the file:
//     Compact does, in place, while the store stays open. It copies the file
//     with bbolt's Compact into FileName.compact (opened, so locked, first),
//     checks a SHA-256 over every bucket path, key, value and sequence of
//     both, renames the copy over the original and switches to it; every
//     transaction waits meanwhile. A failure leaves the original in use; a
//     crash leaves the original or the whole copy under FileName, and at
//     worst a stale FileName.compact, which the next Compact removes.
//   - The lock is flock(2) on the file; on network file systems that do not
//     honour it, two processes could open the same directory.
//   - Header times must lie within the years 1678–2262 (Unix nanoseconds)
//     and be set; a header with a zero CreatedAt is refused.
//   - The file belongs to one machine. Sharing children between servers is
//     a different seam.Store (DESIGN §10: etcd), which persist/storetest
//     is there to hold to the same contract.
package persist
