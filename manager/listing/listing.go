// Package listing owns what a reader sees of children: a listing's rows
// (Row), their statuses, the tree usage summed bottom-up, the pages and
// their cursors (Query, Page), what a listing shows when the store cannot
// be read, and a transcript's entries (Entry, each text bounded by
// MaxTranscriptText). Who may read what is the manager's authority.
//
// Listing never loads, resumes or queries a child: a resident child is
// read from the manager's memory (Source), a stored one from its
// checkpoint (current by construction) or, failing that, one fold of its
// journal, whose checkpoint is then cached. A child that cannot be read is
// a diagnostic row; its siblings are unaffected. A listing whose store
// cannot be read at all does not fail: it lists the live children and one
// diagnostic row, StoreRowID.
//
// What it reads of the manager it reads through Source; of the store,
// through Store. It holds no lock.
package listing

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Row is one entry of a listing: a child, or a diagnostic for a child that
// cannot be read.
type Row struct {
	Kind     string `json:"kind"` // "child" or "diagnostic"
	ID       string `json:"id"`
	Label    string `json:"label,omitempty"`
	Status   string `json:"status,omitempty"` // running, queued, idle, ready, input_required
	Provider string `json:"provider,omitempty"`
	// Model is what the child runs on: a configured model name, or an
	// external CLI's model id; empty: its provider's default (or a child
	// stored before models were recorded for listing).
	Model     string      `json:"model,omitempty"`
	Parent    string      `json:"parent,omitempty"`
	Depth     int         `json:"depth,omitempty"`
	CreatedAt time.Time   `json:"created_at,omitzero"`
	Usage     *seam.Usage `json:"usage,omitempty"`      // the child's own
	TreeUsage *seam.Usage `json:"tree_usage,omitempty"` // the child's and all its descendants'
	// LastStopReason and LastMessage are how the child's last epoch (its
	// last turn) ended and its closing message, clipped to
	// MaxClosingBytes: a model that missed a notice still learns how a
	// child ended, and a ready child that finished from one that stopped.
	LastStopReason agent.StopReason `json:"last_stop_reason,omitempty"`
	LastMessage    string           `json:"last_message,omitempty"`
	Cwd            string           `json:"cwd,omitempty"`
	// Worktree is the child's own git worktree (isolation "worktree").
	Worktree *seam.Worktree `json:"worktree,omitempty"`
	Reason   string         `json:"reason,omitempty"` // corrupt, unavailable
	// Questions are what the child asks and waits on (status
	// input_required), oldest first; answer with send_message answer_to.
	Questions []PendingQuestion `json:"questions,omitempty"`
}

// PendingQuestion is a question waiting for its answer, as a listing row
// shows it.
type PendingQuestion struct {
	ID      string   `json:"id"`
	Text    string   `json:"text"`
	Kind    string   `json:"kind"`
	Choices []string `json:"choices,omitempty"`
}

// StatusInputRequired is a child whose turn waits on a question to the
// person (Row.Questions).
const StatusInputRequired = "input_required"

// Live is a resident child as the manager sees it.
type Live struct {
	Header seam.Header
	Model  string // the descriptor's
	Status string // running, queued or idle
	Usage  seam.Usage
	Last   seam.Result // how its last turn ended
	// Questions are what it asks and waits on, oldest first.
	Questions []PendingQuestion
}

// Source is what listing reads of the manager.
type Source interface {
	// Resident returns child id's live state, if it is resident here.
	Resident(id string) (Live, bool)
	// ResidentChildren returns parent's resident children whose records
	// are stored (an id is listed once stored), in any order.
	ResidentChildren(parent string) []Live
	// Corrupt returns why child id cannot be read, or "".
	Corrupt(id string) string
	// NoteCorrupt records that reading child id failed with err.
	NoteCorrupt(id string, err error)
	// Elsewhere returns the children resident at other instances sharing
	// the store, by id (nil when the store cannot say).
	Elsewhere(ctx context.Context) map[string]seam.Claim
	// StatusElsewhere is the status of child id, resident at another
	// instance, as the store shows it; journal is the child's journal when
	// the caller has read it (nil: StatusElsewhere reads its last event).
	StatusElsewhere(ctx context.Context, id string, journal []agent.Event) string
	// ResidentElsewhere are the listings of parent's children among claims.
	ResidentElsewhere(ctx context.Context, parent string, claims map[string]seam.Claim) []seam.Listing
}

// Store is what listing reads of the session store (and the checkpoints
// it caches there).
type Store interface {
	Listings(ctx context.Context, parent string, page seam.Page) ([]seam.Listing, error)
	Descendants(ctx context.Context, root string, page seam.Page) ([]seam.Listing, error)
	Events(ctx context.Context, childID string) ([]agent.Event, error)
	SetCheckpoint(ctx context.Context, childID string, cp seam.Checkpoint) error
}

// Lister lists a manager's children.
type Lister struct {
	Store  Store
	Source Source
	Log    *slog.Logger
}

// liveRow is the row of a resident child.
func liveRow(a Live) Row {
	h := a.Header
	r := Row{Kind: "child", ID: h.ID, Label: h.Label, Provider: h.Provider, Model: a.Model, Parent: h.Parent, Depth: h.Depth, CreatedAt: h.CreatedAt, Cwd: h.Cwd, Worktree: h.Worktree,
		Status: a.Status}
	u := a.Usage
	r.Usage = &u
	r.LastStopReason, r.LastMessage = a.Last.StopReason, truncate.Bound(a.Last.Output, seam.MaxClosingBytes)
	if len(a.Questions) > 0 {
		r.Status, r.Questions = StatusInputRequired, a.Questions
	}
	return r
}

// Subtree lists root's whole subtree, live state merged over the store,
// in creation order; a child resident at another instance lists with its
// owner's status.
func (m Lister) Subtree(ctx context.Context, root string) ([]Row, error) {
	return m.subtree(ctx, root, m.Source.Elsewhere(ctx))
}

// subtree lists root's whole subtree; claims are the children resident at
// other instances (Source.Elsewhere), listed with their owner's status
// (nil: they list as stored).
func (m Lister) subtree(ctx context.Context, root string, claims map[string]seam.Claim) ([]Row, error) {
	// The whole subtree, breadth first; tree usage summed bottom-up.
	var rows []Row
	depthOf := map[string]int{root: 0}
	parentOf := map[string]string{}
	queue := []string{root}
	for len(queue) > 0 {
		addr := queue[0]
		queue = queue[1:]
		ls, err := m.Store.Listings(ctx, addr, seam.Page{})
		if err != nil {
			// What is live still lists; the rest of this branch is one
			// diagnostic row.
			for _, r := range m.liveRows(addr, err) {
				if _, seen := depthOf[r.ID]; seen && r.Kind == "child" {
					continue
				}
				if r.Kind == "child" {
					depthOf[r.ID], parentOf[r.ID] = depthOf[addr]+1, addr
					queue = append(queue, r.ID)
				}
				rows = append(rows, r)
			}
			continue
		}
		for _, l := range ls {
			id := l.Header.ID
			if _, seen := depthOf[id]; seen {
				continue
			}
			depthOf[id], parentOf[id] = depthOf[addr]+1, addr
			if l.Corrupt {
				rows = append(rows, Row{Kind: "diagnostic", ID: id, Reason: "corrupt", CreatedAt: l.Header.CreatedAt})
				continue
			}
			r := m.row(ctx, l, claims)
			r.CreatedAt = l.Header.CreatedAt
			rows = append(rows, r)
			queue = append(queue, id)
		}
	}
	tree := make(map[string]seam.Usage, len(rows))
	for i := len(rows) - 1; i >= 0; i-- { // breadth-first order reversed: children before parents
		r := &rows[i]
		if r.Usage == nil {
			continue
		}
		t := tree[r.ID].Add(*r.Usage)
		tree[r.ID] = t
		r.TreeUsage = &t
		p := parentOf[r.ID]
		tree[p] = tree[p].Add(t)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].CreatedAt.Before(rows[j].CreatedAt) })
	return rows, nil
}

// childRows are the rows of a parent's direct children as the store
// listed them, each with the usage of its whole subtree; claims as
// subtree takes them.
func (m Lister) childRows(ctx context.Context, ls []seam.Listing, claims map[string]seam.Claim) []Row {
	rows := make([]Row, 0, len(ls))
	for _, l := range ls {
		if l.Corrupt {
			rows = append(rows, Row{Kind: "diagnostic", ID: l.Header.ID, Reason: "corrupt", CreatedAt: l.Header.CreatedAt})
			continue
		}
		r := m.row(ctx, l, claims)
		r.CreatedAt = l.Header.CreatedAt // a diagnostic row too: it has a place in the order
		r.TreeUsage = r.Usage
		if l.HasChildren && r.Usage != nil {
			if below, err := m.TreeUsage(ctx, r.ID); err == nil {
				t := r.Usage.Add(below)
				r.TreeUsage = &t
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// liveRows is a listing of parent's children when the store cannot be
// read: the live ones from memory, and one diagnostic row that says the
// store failed (so a listing never fails outright, and never passes an
// unreadable store off as an empty one).
func (m Lister) liveRows(parent string, err error) []Row {
	m.Log.Error("listing children: the session store cannot be read", "parent", parent, "err", err)
	live := m.Source.ResidentChildren(parent)
	sort.Slice(live, func(i, j int) bool { return live[i].Header.CreatedAt.Before(live[j].Header.CreatedAt) })
	rows := make([]Row, 0, len(live)+1)
	for _, a := range live {
		r := liveRow(a)
		r.TreeUsage = r.Usage
		rows = append(rows, r)
	}
	return append(rows, Row{Kind: "diagnostic", ID: StoreRowID, Reason: "unavailable"})
}

// StoreRowID is the id of the diagnostic row a listing carries when the
// session store itself cannot be read.
const StoreRowID = "session-store"

// TreeUsage returns what the descendants of an agent (a child id) have
// used so far, all levels summed.
func (m Lister) TreeUsage(ctx context.Context, agentID string) (seam.Usage, error) {
	rows, err := m.subtree(ctx, agentID, nil) // usage only
	if err != nil {
		return seam.Usage{}, err
	}
	var u seam.Usage
	for _, r := range rows {
		if r.Usage != nil {
			u = u.Add(*r.Usage)
		}
	}
	return u, nil
}

// row projects one child on the three-step ladder: a live child reads its
// activation (no journal read); a stored child its checkpoint when the
// sequence gate passes; otherwise its journal is folded once and the
// checkpoint cached. A child resident at another instance (in claims) has
// its owner's status as the store shows it (Source.StatusElsewhere).
func (m Lister) row(ctx context.Context, l seam.Listing, claims map[string]seam.Claim) Row {
	h := l.Header
	if a, ok := m.Source.Resident(h.ID); ok {
		a.Header = h // the listed header (the model is the descriptor's, also for a child stored before Header.Model)
		return liveRow(a)
	}
	r := Row{Kind: "child", ID: h.ID, Label: h.Label, Provider: h.Provider, Model: h.Model, Parent: h.Parent, Depth: h.Depth, CreatedAt: h.CreatedAt, Cwd: h.Cwd, Worktree: h.Worktree}
	r.Status = StatusReady
	_, elsewhere := claims[h.ID]
	if bad := m.Source.Corrupt(h.ID); bad != "" {
		return Row{Kind: "diagnostic", ID: h.ID, Reason: bad}
	}
	if cp := l.Checkpoint; cp != nil && l.JournalLen <= cp.Seq {
		if elsewhere {
			r.Status = m.Source.StatusElsewhere(ctx, h.ID, nil)
		}
		u := cp.Usage
		r.Usage = &u
		r.LastStopReason, r.LastMessage = cp.Stop, cp.Closing
		return r
	}
	events, err := m.Store.Events(ctx, h.ID)
	if err != nil {
		m.Source.NoteCorrupt(h.ID, err)
		return diagnostic(h.ID, err)
	}
	if elsewhere {
		r.Status = m.Source.StatusElsewhere(ctx, h.ID, events) // its journal is read: only the inbox is left to read
	}
	u := FoldUsage(events)
	r.Usage = &u
	last := agent.LastOutcome(events)
	r.LastStopReason, r.LastMessage = last.StopReason, truncate.Bound(last.Output, seam.MaxClosingBytes)
	if err := m.Store.SetCheckpoint(ctx, h.ID, seam.Checkpoint{Seq: int64(len(events)), Mode: h.Mode, Label: h.Label, Usage: u,
		Stop: last.StopReason, Closing: r.LastMessage}); err != nil {
		m.Log.Debug("caching a checkpoint failed", "agent_id", h.ID, "err", err)
	}
	return r
}

func diagnostic(id string, err error) Row {
	reason := "unavailable"
	if errors.Is(err, seam.ErrCorrupt) {
		reason = "corrupt"
	}
	return Row{Kind: "diagnostic", ID: id, Reason: reason}
}

// FoldUsage sums the usage events record.
func FoldUsage(events []agent.Event) seam.Usage {
	var u seam.Usage
	for _, e := range events {
		if e.Usage != nil {
			u = u.Add(*e.Usage)
		}
	}
	return u
}
