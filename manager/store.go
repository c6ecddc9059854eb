package manager

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
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
	// Session is the root caller's session that started a root child (see
	// ParentRef.Session); empty otherwise.
	Session string `json:"session,omitempty"`
}

// PrincipalAddress is the parent address of a root principal's children.
func PrincipalAddress(principal string) string { return "principal:" + principal }

// DescriptorVersion is the version of Descriptor this build writes and reads.
const DescriptorVersion = 1

// Descriptor records how a child was created; it is the only input for a
// cold resume. Unknown versions or fields make it corrupt.
type Descriptor struct {
	Version      int             `json:"version"`
	Mode         Mode            `json:"mode"`
	Provider     string          `json:"provider"`
	Label        string          `json:"label"`
	Model        string          `json:"model,omitempty"`
	Persona      string          `json:"persona,omitempty"`
	ToolFilter   *ToolFilter     `json:"tool_filter,omitempty"`
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	// Session is an external agent's session handle (a Codex thread id, a
	// Claude Code session id, an ACP session id); empty for in-process
	// children.
	Session string `json:"session,omitempty"`
}

// Checkpoint is a cached projection of a child for listing: valid while
// Seq is at least the journal length it was computed at.
type Checkpoint struct {
	Seq   int64            `json:"seq"` // journal length when computed
	Mode  Mode             `json:"mode"`
	Label string           `json:"label"`
	Usage Usage            `json:"usage"`
	Stop  agent.StopReason `json:"stop,omitempty"` // how the last epoch ended
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
	Source  string `json:"source"` // agent.SourceReport or agent.SourceSettled
	// StopReason is how the epoch ended, for a settlement notice.
	StopReason agent.StopReason `json:"stop_reason,omitempty"`
	Text       string           `json:"text"`
	Time       time.Time        `json:"time"`
	// Session is the originating session of the child (Header.Session):
	// the notice is that session's while it is connected, then any
	// session's of the principal.
	Session string `json:"session,omitempty"`
}

// Store persists children. Every method is safe for concurrent use. Methods
// that hand an id to a caller return only after the write is committed.
//
// The interface is narrow on purpose: a shared store for several servers
// (etcd) must be able to implement it.
type Store interface {
	// CreateChild commits a new child's header, descriptor and index entry,
	// and marks it active (a new child is resident).
	CreateChild(h Header, d Descriptor) error
	// AppendEvents appends events to a child's journal; their Seq must
	// continue the stored journal without gaps.
	AppendEvents(childID string, events []agent.Event) error
	// Header, Descriptor and Events read one child. A child whose bytes do
	// not decode yields an error wrapping ErrCorrupt; an unknown one, an
	// error wrapping ErrNotFound.
	Header(childID string) (Header, error)
	Descriptor(childID string) (Descriptor, error)
	Events(childID string) ([]agent.Event, error)
	// JournalLen returns the number of stored events without reading them.
	JournalLen(childID string) (int64, error)
	// Children lists the headers of a parent address's direct children in
	// creation order, reading no journal. A header that does not decode is
	// returned as a Header with only ID set, and its id in corrupt.
	Children(parent string) (headers []Header, corrupt []string, err error)
	// Checkpoint and SetCheckpoint read and write a child's projection
	// cache. A store keeps only a current checkpoint: SetCheckpoint with a
	// Seq other than the journal's length stores nothing, and an append
	// drops the stored one; so a checkpoint read back always passes the
	// sequence gate.
	Checkpoint(childID string) (Checkpoint, bool, error)
	SetCheckpoint(childID string, c Checkpoint) error
	// AddNotice queues a notice for a principal; TakeNotices removes and
	// returns, in one commit and in order, the queued notices take accepts
	// (all of them when take is nil); the others stay queued.
	AddNotice(principal string, n Notice) error
	TakeNotices(principal string, take func(Notice) bool) ([]Notice, error)
	// SetActive marks a child as having a live activation (true) or not;
	// Active lists the marked ones. A crash leaves the mark set, which is
	// how the next start finds the epochs it must close and announce.
	SetActive(childID string, active bool) error
	Active() ([]string, error)
	// Close releases the store.
	Close() error
}

// ErrCorrupt marks persisted bytes that do not decode.
var ErrCorrupt = errors.New("persisted child data is corrupt")

// ErrNotFound marks a child id the store does not hold. Every per-child
// Store method returns an error wrapping it for an unknown id, so a caller
// can tell "no such child" from a store that failed.
var ErrNotFound = errors.New("no such child")

// Listing is one child of a parent as a store reads it for a listing, in
// the same read: the header, the checkpoint if one is stored, and the
// journal's length (the checkpoint's sequence gate).
type Listing struct {
	Header Header // ID always set
	// Corrupt is true when the header or the descriptor bytes do not decode.
	Corrupt     bool
	Checkpoint  *Checkpoint // nil when none is stored (or it does not decode)
	JournalLen  int64
	HasChildren bool // the child has children of its own in the index
}

// Lister is an optional Store ability: a parent's children with their
// checkpoints in one read, so a listing of many children costs one
// transaction, not several per child.
type Lister interface {
	Listings(parent string) ([]Listing, error)
}

// ChildWrite is several writes for one child, applied in this order:
// create the child (marking it active), append events, settle (final
// checkpoint, active mark cleared) and the settlement's notice to the
// parent.
type ChildWrite struct {
	Create  *NewChild
	Enqueue []QueuedMessage // messages admitted to the inbox
	Dequeue []string        // ids of messages a turn has claimed
	Events  []agent.Event
	Settle  *Checkpoint
	// Notify is the settlement notice, committed with Settle: a crash
	// keeps both or neither, so a cleared active mark always has its
	// notice stored.
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
// claimed by a turn. A store that keeps them (Inboxer) makes a message id
// durable before it is handed out; a resume re-admits them in order.
type QueuedMessage struct {
	ID     string `json:"id"`
	Text   string `json:"text"`
	Source string `json:"source"`
	Quiet  bool   `json:"quiet,omitempty"` // rides along with the next turn
}

// Inboxer is an optional Store ability: it keeps inboxes (through
// WriteChild's Enqueue and Dequeue) and reads one back.
type Inboxer interface {
	Batcher
	Queued(childID string) ([]QueuedMessage, error)
}

// NewChild is a child's creation record.
type NewChild struct {
	Header     Header
	Descriptor Descriptor
}

// Batcher is an optional Store ability: apply a ChildWrite in one commit,
// so a child's writer pays one disk sync for whatever piled up.
type Batcher interface {
	WriteChild(childID string, w ChildWrite) error
}

// writeChild applies w with one commit where the store can, else with one
// call per part (inbox writes then need an Inboxer, and are dropped
// without one: that store keeps no inbox).
func writeChild(s Store, id string, w ChildWrite) error {
	if w.Notify != nil && w.Settle == nil {
		return fmt.Errorf("child %q: a notice is written only with its settlement", id)
	}
	if b, ok := s.(Batcher); ok {
		return b.WriteChild(id, w)
	}
	if w.Create != nil {
		if err := s.CreateChild(w.Create.Header, w.Create.Descriptor); err != nil {
			return err
		}
	}
	if len(w.Events) > 0 {
		if err := s.AppendEvents(id, w.Events); err != nil {
			return err
		}
	}
	if w.Settle != nil {
		if err := s.SetCheckpoint(id, *w.Settle); err != nil {
			return err
		}
		if err := s.SetActive(id, false); err != nil {
			return err
		}
		if n := w.Notify; n != nil && !n.Inbox {
			return s.AddNotice(n.To, n.Notice)
		}
	}
	return nil
}
