package manager

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/seam"
	"github.com/mcp-subagent/mcp-subagent/worktree"
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
	Model     string     `json:"model,omitempty"`
	Parent    string     `json:"parent,omitempty"`
	Depth     int        `json:"depth,omitempty"`
	CreatedAt time.Time  `json:"created_at,omitzero"`
	Usage     *llm.Usage `json:"usage,omitempty"`      // the child's own
	TreeUsage *llm.Usage `json:"tree_usage,omitempty"` // the child's and all its descendants'
	// LastStopReason and LastMessage are how the child's last epoch (its
	// last turn) ended and its closing message, clipped to
	// MaxClosingBytes: a model that missed a notice still learns how a
	// child ended, and a ready child that finished from one that stopped.
	LastStopReason agent.StopReason `json:"last_stop_reason,omitempty"`
	LastMessage    string           `json:"last_message,omitempty"`
	Cwd            string           `json:"cwd,omitempty"`
	// Worktree is the child's own git worktree (isolation "worktree").
	Worktree *worktree.Info `json:"worktree,omitempty"`
	Reason   string         `json:"reason,omitempty"` // corrupt, unavailable
	// Questions are what the child asks and waits on (status
	// input_required), oldest first; answer with send_message answer_to.
	Questions []PendingQuestion `json:"questions,omitempty"`
}

// StatusInputRequired is a child whose turn waits on a question to the
// person (Row.Questions).
const StatusInputRequired = "input_required"

// withQuestions marks r input_required with the questions its child
// waits on, if any.
func (m *Manager) withQuestions(r Row) Row {
	for _, p := range m.pendingOf(r.ID) {
		r.Status = StatusInputRequired
		r.Questions = append(r.Questions, PendingQuestion{ID: p.q.ID, Text: p.q.Message, Kind: string(p.q.Kind), Choices: p.q.Choices})
	}
	return r
}

// ListDescendants lists the caller's whole subtree, live state merged over
// the store, in creation order. It never loads, resumes or queries a
// child: a live child reads no journal; a stored child reads its
// checkpoint when it is current, else folds its journal once.
func (m *Manager) ListDescendants(caller seam.ParentRef) ([]Row, error) {
	return m.list(caller.Address())
}

func (m *Manager) list(root string) ([]Row, error) {
	if m.store == nil {
		return nil, newErr(seam.CodeControlUnavailable, "listing needs a session store; none is configured")
	}
	// Listing has no caller context: its reads (and the checkpoints it
	// caches) are the manager's own, bounded.
	ctx, cancel := m.bg()
	defer cancel()
	return m.subtreeRows(ctx, root, m.elsewhere(ctx))
}

// subtreeRows lists root's whole subtree; claims are the children resident
// at other instances (elsewhere), listed with their owner's status (nil:
// they list as stored).
func (m *Manager) subtreeRows(ctx context.Context, root string, claims map[string]seam.Claim) ([]Row, error) {
	// The whole subtree, breadth first; tree usage summed bottom-up.
	var rows []Row
	depthOf := map[string]int{root: 0}
	parentOf := map[string]string{}
	queue := []string{root}
	for len(queue) > 0 {
		addr := queue[0]
		queue = queue[1:]
		ls, err := m.store.Listings(ctx, addr, seam.Page{})
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
	tree := make(map[string]llm.Usage, len(rows))
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
// subtreeRows takes them.
func (m *Manager) childRows(ctx context.Context, ls []seam.Listing, claims map[string]seam.Claim) []Row {
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
			if below, err := m.treeUsage(ctx, r.ID); err == nil {
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
func (m *Manager) liveRows(parent string, err error) []Row {
	m.log.Error("listing children: the session store cannot be read", "parent", parent, "err", err)
	m.mu.Lock()
	var live []*activation
	for _, a := range m.live {
		if a.hdr.Parent == parent && a.persist.recorded() { // an id is listed once stored
			live = append(live, a)
		}
	}
	m.mu.Unlock()
	sort.Slice(live, func(i, j int) bool { return live[i].hdr.CreatedAt.Before(live[j].hdr.CreatedAt) })
	rows := make([]Row, 0, len(live)+1)
	for _, a := range live {
		h := a.hdr
		r := Row{Kind: "child", ID: h.ID, Label: h.Label, Provider: h.Provider, Model: a.desc.Model, Parent: h.Parent, Depth: h.Depth, CreatedAt: h.CreatedAt, Cwd: h.Cwd, Worktree: h.Worktree,
			Status: a.status()}
		a.mu.Lock()
		u, last := a.usage, a.last
		a.mu.Unlock()
		r.Usage, r.TreeUsage = &u, &u
		r.LastStopReason, r.LastMessage = last.StopReason, truncate.Bound(last.Output, seam.MaxClosingBytes)
		rows = append(rows, m.withQuestions(r))
	}
	return append(rows, Row{Kind: "diagnostic", ID: StoreRowID, Reason: "unavailable"})
}

// StoreRowID is the id of the diagnostic row a listing carries when the
// session store itself cannot be read.
const StoreRowID = "session-store"

// TreeUsage returns what the descendants of an agent (a child id) have
// used so far, all levels summed.
func (m *Manager) TreeUsage(agentID string) (llm.Usage, error) {
	if m.store == nil {
		return llm.Usage{}, newErr(seam.CodeControlUnavailable, "listing needs a session store; none is configured")
	}
	ctx, cancel := m.bg()
	defer cancel()
	return m.treeUsage(ctx, agentID)
}

func (m *Manager) treeUsage(ctx context.Context, agentID string) (llm.Usage, error) {
	rows, err := m.subtreeRows(ctx, agentID, nil) // usage only
	if err != nil {
		return llm.Usage{}, err
	}
	var u llm.Usage
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
// its owner's status as the store shows it (statusElsewhere).
func (m *Manager) row(ctx context.Context, l seam.Listing, claims map[string]seam.Claim) Row {
	h := l.Header
	r := Row{Kind: "child", ID: h.ID, Label: h.Label, Provider: h.Provider, Model: h.Model, Parent: h.Parent, Depth: h.Depth, CreatedAt: h.CreatedAt, Cwd: h.Cwd, Worktree: h.Worktree}
	m.mu.Lock()
	a := m.live[h.ID]
	m.mu.Unlock()
	if a != nil {
		r.Status = a.status()
		r.Model = a.desc.Model // the descriptor's, also for a child stored before Header.Model
		a.mu.Lock()
		u, last := a.usage, a.last
		a.mu.Unlock()
		r.Usage = &u
		r.LastStopReason, r.LastMessage = last.StopReason, truncate.Bound(last.Output, seam.MaxClosingBytes)
		return m.withQuestions(r)
	}
	r.Status = StatusReady
	if _, ok := claims[h.ID]; ok {
		r.Status = m.statusElsewhere(ctx, h.ID) // cluster.go
	}
	m.mu.Lock()
	bad := m.corrupt[h.ID]
	m.mu.Unlock()
	if bad != "" {
		return Row{Kind: "diagnostic", ID: h.ID, Reason: bad}
	}
	if cp := l.Checkpoint; cp != nil && l.JournalLen <= cp.Seq {
		u := cp.Usage
		r.Usage = &u
		r.LastStopReason, r.LastMessage = cp.Stop, cp.Closing
		return r
	}
	events, err := m.store.Events(ctx, h.ID)
	if err != nil {
		m.noteCorrupt(h.ID, err)
		return diagnostic(h.ID, err)
	}
	u := foldUsage(events)
	r.Usage = &u
	last := agent.LastOutcome(events)
	r.LastStopReason, r.LastMessage = last.StopReason, truncate.Bound(last.Output, seam.MaxClosingBytes)
	if err := m.store.SetCheckpoint(ctx, h.ID, seam.Checkpoint{Seq: int64(len(events)), Mode: h.Mode, Label: h.Label, Usage: u,
		Stop: last.StopReason, Closing: r.LastMessage}); err != nil {
		m.log.Debug("caching a checkpoint failed", "agent_id", h.ID, "err", err)
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

func foldUsage(events []agent.Event) llm.Usage {
	var u llm.Usage
	for _, e := range events {
		if e.Usage != nil {
			u = u.Add(*e.Usage)
		}
	}
	return u
}
