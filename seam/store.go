package seam

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Mode is how a child runs.
type Mode string

const (
	ModeOneShot     Mode = "one-shot"
	ModeContinuable Mode = "continuable"
)

// Header is a child's persisted identity: who its parent is, how deep it
// sits, where it works. Written once when the child is created; never
// lowered or rewritten by a resume.
type Header struct {
	ID string `json:"id"`
	// Parent is the direct parent's address: an agent id, or "principal:<name>"
	// for a root principal (see PrincipalAddress).
	Parent    string    `json:"parent"`
	Principal string    `json:"principal"` // the root principal of the lineage
	Depth     int       `json:"depth"`
	DepthCap  int       `json:"depth_cap"`
	Mode      Mode      `json:"mode"`
	Provider  string    `json:"provider"`
	Label     string    `json:"label"`
	Cwd       string    `json:"cwd"`
	CreatedAt time.Time `json:"created_at"`
	SeedLen   int64     `json:"seed_len"` // journal events copied from a fork parent
	// Model is the descriptor's model (a configured model name, or an
	// external CLI's model id), kept here too so a listing row shows it
	// without reading the descriptor; empty in records from before it.
	Model string `json:"model,omitempty"`
	// Session is the root caller's session that started a root child (see
	// ParentRef.Session); empty otherwise.
	Session string `json:"session,omitempty"`
	// Worktree is the child's own git worktree (isolation "worktree");
	// nil for a child working in its cwd, and in records from before it.
	// Cwd lies inside it.
	Worktree *Worktree `json:"worktree,omitempty"`
}

// PrincipalAddress is the parent address of a root principal's children.
func PrincipalAddress(principal string) string { return "principal:" + principal }

// DescriptorVersion is the version of Descriptor this build writes and reads.
const DescriptorVersion = 1

// Descriptor records how a child was created; it is the only input for a
// cold resume. Unknown versions or fields make it corrupt.
type Descriptor struct {
	Version  int    `json:"version"`
	Mode     Mode   `json:"mode"`
	Provider string `json:"provider"`
	Label    string `json:"label"`
	// Model is what the child runs on: a configured model name for
	// in-process children, the CLI's model id for external ones; empty:
	// the provider's default. Effort is the reasoning effort asked of it
	// (empty: the model's default). Follow-ups and cold resumes keep both.
	Model        string          `json:"model,omitempty"`
	Effort       Effort          `json:"effort,omitempty"`
	Persona      string          `json:"persona,omitempty"`
	ToolFilter   *ToolFilter     `json:"tool_filter,omitempty"`
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	// Session is an external agent's session handle (a Codex thread id, a
	// Claude Code session id, an ACP session id); empty for in-process
	// children.
	Session string `json:"session,omitempty"`
	// Settings are the root session's settings the child runs with (see
	// Settings); nil: the deployment's own.
	Settings *Settings `json:"settings,omitempty"`
}

// Settings are the settings of the root session a lineage was started
// from — the model API variables, PATH, the config file it names — which
// its children run with instead of the deployment's own (one daemon hosts
// the sessions of clients started with different environments). A child
// records them in its descriptor and passes them to its own children, so
// a follow-up from another session, or a cold resume after a restart,
// runs with them too. The manager only carries them; providers read them.
//
// Secret variables are recorded by name only: their values are never in
// Settings, hence never in the store. Where a secret's value is looked up
// is the deployment's choice (the daemon's: the session that started the
// child while it is connected, else the most recent connected session of
// the same principal that sets it, else the daemon's own environment).
type Settings struct {
	// Env are the session's non-secret variables, by name; a name of
	// Names absent from Env was unset in the session.
	Env map[string]string `json:"env,omitempty"`
	// Names are every variable the session's settings cover, set or not.
	Names []string `json:"names,omitempty"`
	// Secrets name the variables whose values are looked up when needed.
	Secrets []string `json:"secrets,omitempty"`
	// Config is the config file the session named (absolute); empty: none.
	Config string `json:"config,omitempty"`
	// Session is the session the settings came from.
	Session string `json:"session,omitempty"`
}

// Checkpoint is a cached projection of a child for listing: valid while
// Seq is at least the journal length it was computed at.
type Checkpoint struct {
	Seq   int64      `json:"seq"` // journal length when computed
	Mode  Mode       `json:"mode"`
	Label string     `json:"label"`
	Usage Usage      `json:"usage"`
	Stop  StopReason `json:"stop,omitempty"` // how the last epoch ended
	// Closing is the last epoch's closing message, clipped to
	// MaxClosingBytes.
	Closing string `json:"closing,omitempty"`
}

// MaxClosingBytes bounds the closing message a listing row carries.
const MaxClosingBytes = 2048

// Notice is a message waiting for a root principal: a report or a
// settlement notice, delivered once.
type Notice struct {
	Seq     int64  `json:"seq"` // assigned by the store, per principal
	ChildID string `json:"child_id"`
	Source  string `json:"source"` // SourceReport or SourceSettled
	// StopReason is how the epoch ended, for a settlement notice.
	StopReason StopReason `json:"stop_reason,omitempty"`
	Text       string     `json:"text"`
	Time       time.Time  `json:"time"`
	// Session is the originating session of the child (Header.Session):
	// the notice is that session's while it is connected, then any
	// session's of the principal.
	Session string `json:"session,omitempty"`
}

// Store persists children. Every method is safe for concurrent use and
// takes the context of whoever the call serves; a store returns an error
// wrapping ctx.Err() for a ctx already done when the call begins, and may
// (a network store should) abandon a call whose ctx ends while it runs. A
// local store that cannot abort a commit midway (bbolt) finishes a write it
// began whatever ctx does.
//
// Every per-child method returns an error wrapping ErrNotFound for an id
// the store does not hold. Methods that hand an id to a caller return only
// after the write is committed. Nothing returned aliases the store's state.
//
// The interface is the whole of what the manager and the doctor need, and
// narrow on purpose: a shared store for several servers (DESIGN §10, etcd
// with leases) must be able to implement it. persist/storetest holds every
// backend to it.
//
// # Residency
//
// A resident child is claimed by one Owner (a manager): a claim is granted
// by WriteChild (ChildWrite.Claim; a new child is claimed in its creating
// write), extended by Renew for all of an owner's claims at once, and
// revoked by the settlement (ChildWrite.Settle), in the commit that stores
// the settlement and its notice. A claim is live while its owner's Expires
// is after the store's clock; a claim held by another owner while live is
// refused with an error wrapping ErrOwned, and an expired one is taken
// over. Claims outlive a crash (and a manager's Close): Residents lists
// them, which is how the next start finds the epochs it must close and
// announce.
//
// A claim carries an epoch (Claim.Epoch) that goes up on every takeover:
// a claim granted to an owner that does not hold the child's claim (the
// child is unclaimed, settled, or held, expired, by another owner) gets
// the child's last epoch plus one, so a new child's first claim is epoch
// 1; the holder claiming again keeps its epoch; a settlement revokes the
// claim and keeps the number (a store may leave unnumbered a tenure that
// a create began and a settlement ended in one write: no other write can
// carry its fence). A write carrying a Fence is its claim
// holder's: it is refused whole with an error wrapping ErrOwned unless
// the child's claim is held by Fence.Owner at Fence.Epoch when the write
// begins, so after a takeover a paused or partitioned former owner stores
// nothing. The fence does not judge expiry: an owner whose lease ran out
// and was not taken over still writes.
//
// A store that only one process can open at a time (bbolt holds an
// exclusive lock; an in-memory store lives in one process) knows that an
// owner who has not claimed or renewed through the current opening is
// gone: it treats that owner's claims as expired, so a restart after a
// crash recovers the dead server's children at once, not after a lease.
// Residents reports such a claim with a zero Expires. A shared store has no
// such knowledge and lets leases run out.
type Store interface {
	// WriteChild applies w to the child in one commit, all of it or
	// nothing (see ChildWrite for the order and the checks).
	WriteChild(ctx context.Context, childID string, w ChildWrite) error
	// Header, Descriptor and Events read one child. A child whose bytes do
	// not decode yields an error wrapping ErrCorrupt.
	Header(ctx context.Context, childID string) (Header, error)
	Descriptor(ctx context.Context, childID string) (Descriptor, error)
	Events(ctx context.Context, childID string) ([]Event, error)
	// EventsFrom returns the journal's events from sequence number from
	// on (Events is EventsFrom(ctx, id, 0)); none for from at or past the
	// journal's length; an error for a negative from. A store reads only
	// those events.
	EventsFrom(ctx context.Context, childID string, from int64) ([]Event, error)
	// JournalLen returns the number of stored events without reading them.
	JournalLen(ctx context.Context, childID string) (int64, error)
	// Queued returns the child's stored inbox (what WriteChild's Enqueue
	// admitted and Dequeue did not remove), in admission order.
	Queued(ctx context.Context, childID string) ([]QueuedMessage, error)
	// Listings returns a parent address's direct children in creation
	// order (ties by id), each with its checkpoint, in one read that opens
	// no journal; page bounds which (those after page.After, at most
	// page.Limit), and a store reads only those from its index. A child
	// the store can tell is mangled has Corrupt set; it never hides its
	// siblings.
	Listings(ctx context.Context, parent string, page Page) ([]Listing, error)
	// Descendants returns a root address's whole subtree (children,
	// their children, and so on) in one order across all levels:
	// creation order, ties by id; each entry as Listings reads it (its
	// Header.Parent names its own parent). page bounds which as Listings'
	// does, and a store reads only those from an index of every
	// ancestor's descendants: a page costs its rows, not the subtree.
	Descendants(ctx context.Context, root string, page Page) ([]Listing, error)
	// Checkpoint and SetCheckpoint read and write a child's projection
	// cache. A store keeps only a current checkpoint: SetCheckpoint with a
	// Seq other than the journal's length stores nothing, and an append
	// drops the stored one; so a checkpoint read back always passes the
	// sequence gate.
	Checkpoint(ctx context.Context, childID string) (Checkpoint, bool, error)
	SetCheckpoint(ctx context.Context, childID string, c Checkpoint) error
	// AddNotice queues a notice under an address (a principal's, or a
	// stored agent's); the store numbers it (Notice.Seq, per address, from
	// 1, never reused) and sets its Time when zero. TakeNotices removes and
	// returns, in one commit and in order, the queued notices take accepts
	// (all of them when take is nil); the others stay queued. A notice is
	// taken once, however many callers take at the same time.
	AddNotice(ctx context.Context, to string, n Notice) error
	TakeNotices(ctx context.Context, to string, take func(Notice) bool) ([]Notice, error)
	// Renew sets the expiry of all of owner.ID's claims to owner.Expires
	// in one write (an earlier time shortens them). It is not an error for
	// the owner to hold no claim.
	Renew(ctx context.Context, owner Owner) error
	// Residents lists every claim, by child id.
	Residents(ctx context.Context) ([]Claim, error)
	// ClaimOf returns the child's claim (its owner, expiry as Residents
	// reports it, and epoch); false when the child is not claimed. It is
	// how a claimer learns the epoch to fence its writes with.
	ClaimOf(ctx context.Context, childID string) (Claim, bool, error)
	// Delete removes a child and all its descendants in one commit: their
	// headers, descriptors, journals, inboxes, checkpoints, index entries
	// and the notices queued under their addresses. It refuses, removing
	// nothing, with an error wrapping ErrClaimed when any of them holds a
	// claim, live or stale (a stale one is an epoch the next Recover must
	// still close and announce); their questions go too. It returns the ids removed, the child
	// first. Notices a removed child queued for a principal stay queued.
	Delete(ctx context.Context, childID string) ([]string, error)
	// Questioner keeps the children's questions to the person.
	Questioner
	// Close releases the store; every later call fails.
	Close() error
}

// Owner is a manager's lease on the children it holds resident: an id
// (Options.OwnerID) and the time its claims expire unless renewed.
type Owner struct {
	ID      string
	Expires time.Time
}

// Claim is one child's residency as Residents reports it. Owner.Expires is
// zero for a claim the store knows is stale (its owner is from an earlier
// opening of an exclusive store, or it is an active mark an older build
// wrote, whose Owner.ID is empty).
type Claim struct {
	ChildID string
	Owner   Owner
	// Epoch numbers the claim's tenure: it goes up on every takeover
	// (see Store's Residency); 0 in claims an older build wrote.
	Epoch int64
	// Parent is the child's parent address, when the store reads it with
	// the claim (Residents of a shared store does, so an instance can
	// pick the claims of one parent without reading every header); empty
	// when it does not.
	Parent string
}

// Fence makes a ChildWrite conditional on its writer still holding the
// child: the child's claim must be Owner's at Epoch.
type Fence struct {
	Owner string
	Epoch int64
}

// ErrOwned marks a claim refused because another owner holds the child
// under a lease that has not expired: it is resident in another server.
var ErrOwned = errors.New("child is resident under another owner")

// ErrStale marks a write refused because the journal is not the length
// its JournalIs said: the writer's read of it is out of date.
var ErrStale = errors.New("the journal changed since it was read")

// ErrClaimed marks a Delete refused because the child, or one of its
// descendants, is claimed: resident, or left claimed by a crash.
var ErrClaimed = errors.New("child is claimed (resident)")

// ErrCorrupt marks persisted bytes that do not decode.
var ErrCorrupt = errors.New("persisted child data is corrupt")

// ErrNotFound marks a child id the store does not hold. Every per-child
// Store method returns an error wrapping it for an unknown id, so a caller
// can tell "no such child" from a store that failed.
var ErrNotFound = errors.New("no such child")

// Page bounds a listing: the children that come after After in listing
// order, at most Limit of them (zero: all).
type Page struct {
	After ListingKey // zero: from the first child
	Limit int
}

// ListingKey is a child's place in its parent's listing: creation time,
// then id.
type ListingKey struct {
	CreatedAt time.Time
	ID        string
}

// IsZero reports whether k is the place before every child.
func (k ListingKey) IsZero() bool { return k.CreatedAt.IsZero() && k.ID == "" }

// Before reports whether k comes before o in listing order.
func (k ListingKey) Before(o ListingKey) bool {
	if !k.CreatedAt.Equal(o.CreatedAt) {
		return k.CreatedAt.Before(o.CreatedAt)
	}
	return k.ID < o.ID
}

// Key is the listing's place in its parent's listing order.
func (l Listing) Key() ListingKey { return ListingKey{CreatedAt: l.Header.CreatedAt, ID: l.Header.ID} }

// Listing is one child of a parent as Store.Listings reads it: what a
// listing row shows, and the checkpoint if one is stored.
type Listing struct {
	// Header carries the fields a row shows (ID, always set; Parent,
	// Depth, Mode, Provider, Label, Cwd, Model, Worktree, CreatedAt); a store may leave the
	// others zero, so read Store.Header for the whole header.
	Header Header
	// Corrupt is set when the store can tell the child's record or its
	// descriptor is mangled (a store holding no bytes never sets it).
	Corrupt    bool
	Checkpoint *Checkpoint // nil when none is stored (or it does not decode)
	// JournalLen is the journal's length when Checkpoint is set (its
	// sequence gate); a store may leave it zero otherwise.
	JournalLen  int64
	HasChildren bool // the child has children of its own
}

// ChildWrite is several writes for one child, checked first and then
// applied in this order in one commit: create the child, claim it, admit
// and remove inbox messages, append events, settle (final checkpoint,
// claim revoked) and the settlement's notice to the parent. A write that
// fails a check stores nothing: a Create of an id already stored, a write
// (other than Create) to an unknown id, a Claim an unexpired claim of
// another owner holds (ErrOwned), a Fence the child's claim does not
// match (ErrOwned; checked before the Claim), a JournalIs the journal's
// length does not match (ErrStale), events whose Seq does not
// continue the journal, a Notify without Settle or to an inbox of an
// unknown child.
type ChildWrite struct {
	Create *NewChild
	// Fence, when set, refuses the whole write (ErrOwned) unless the
	// child is claimed by Fence.Owner at Fence.Epoch.
	Fence *Fence
	// JournalIs, when set, refuses the whole write (ErrStale) unless the
	// child's journal holds exactly this many events: a resume's claim
	// made on a journal it read before, which another instance may have
	// grown in between (it held the child, ran a turn and let it go).
	JournalIs *int64
	Claim     *Owner          // claim (or keep claiming) the child for this owner
	Enqueue   []QueuedMessage // messages admitted to the inbox
	Dequeue   []string        // ids of messages a turn has claimed
	Events    []Event
	Settle    *Checkpoint
	// Notify is the settlement notice, committed with Settle: a crash
	// keeps both or neither, so a revoked claim always has its notice
	// stored.
	Notify *ParentNotice
}

// ParentNotice is a notice a child's write delivers to its parent. For a
// live parent agent (Inbox set) it joins that agent's stored inbox as
// Message, which the parent's turn later claims; otherwise it is queued
// under To as AddNotice queues it (Notice.Seq is assigned by the store).
type ParentNotice struct {
	To      string // the parent's address (an agent id or a principal's)
	Inbox   bool
	Message QueuedMessage // when Inbox
	Notice  Notice        // when not Inbox
}

// QueuedMessage is a message admitted to a child's inbox and not yet
// claimed by a turn. Its id is durable before it is handed out; a resume
// re-admits the queue in order.
type QueuedMessage struct {
	ID     string `json:"id"`
	Text   string `json:"text"`
	Source string `json:"source"`
	Quiet  bool   `json:"quiet,omitempty"` // rides along with the next turn
	// Budget is the new budget a follow-up granted with the message.
	Budget *Budget `json:"budget,omitempty"`
	// At is when it was queued (Unix nanoseconds): its turn's place in the
	// FIFO order of admission, kept across a restart. Zero in records
	// written before it existed: such a turn goes first.
	At int64 `json:"at,omitempty"`
	// Awaited: a caller at another instance waits in band for the turn's
	// outcome, through the store (see AwaitMarks), so its owner issues
	// no settlement notice for it unless that caller gave up.
	Awaited bool `json:"awaited,omitempty"`
}

// NewChild is a child's creation record.
type NewChild struct {
	Header     Header
	Descriptor Descriptor
}
