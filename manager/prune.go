package manager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
	"github.com/mcp-subagent/mcp-subagent/worktree"
)

// PruneRequest selects the settled root children Prune removes.
type PruneRequest struct {
	// Principals whose root children are considered; at least one.
	Principals []string
	// Before: a child whose last activity (its last journal event, or its
	// creation when it has none) is before it is removed; zero is refused.
	Before time.Time
	// DryRun names the children without removing any.
	DryRun bool
}

// Pruned is one root child Prune removed, or would remove on a dry run.
type Pruned struct {
	ID         string           `json:"id"`
	Principal  string           `json:"principal"`
	Label      string           `json:"label"`
	Provider   string           `json:"provider"`
	CreatedAt  time.Time        `json:"created_at"`
	LastActive time.Time        `json:"last_active"`
	StopReason agent.StopReason `json:"stop_reason,omitempty"`
	// Descendants is how many children under it went with it.
	Descendants int `json:"descendants"`
}

// PruneResult is what a Prune did.
type PruneResult struct {
	DryRun bool     `json:"dry_run"`
	Pruned []Pruned `json:"pruned"`
	// Resident counts old enough children kept because they, or one of
	// their descendants, are resident (running, idle, or claimed awaiting
	// recovery).
	Resident int `json:"resident"`
	// Unreadable counts children kept because their records could not be
	// read (corrupt: `mcp-subagent doctor`; or the store failed).
	Unreadable int `json:"unreadable"`
}

// prunePage is how many root children Prune reads from the store at once.
const prunePage = 256

// Prune removes the principals' settled root children whose last activity
// is before req.Before, each with its whole subtree (a descendant lives
// and dies with its root: only a root child's parent is a principal who
// can no longer reach it). A child is never removed while it or any
// descendant is resident: live in this manager or claimed in the store
// (the store refuses those in the same commit, so a child resumed while
// Prune runs is kept). A dry run reads the same and removes nothing.
// Notices a removed child queued for its principal stay queued. Without a
// store it is CONTROL_UNAVAILABLE.
func (m *Manager) Prune(ctx context.Context, req PruneRequest) (PruneResult, error) {
	res := PruneResult{DryRun: req.DryRun, Pruned: []Pruned{}}
	switch {
	case m.store == nil:
		return res, newErr(seam.CodeControlUnavailable, "pruning needs the session store; this server runs without one")
	case len(req.Principals) == 0:
		return res, newErr(seam.CodeInvalidRequest, "prune: name at least one principal")
	case req.Before.IsZero():
		return res, newErr(seam.CodeInvalidRequest, "prune: the cutoff time must be set")
	}
	claims, err := m.store.Residents(ctx)
	if err != nil {
		return res, fmt.Errorf("prune: reading the claims: %w", err)
	}
	claimed := map[string]bool{}
	for _, c := range claims {
		claimed[c.ChildID] = true
	}
	for _, p := range req.Principals {
		var after seam.ListingKey
		for {
			page, err := m.store.Listings(ctx, seam.PrincipalAddress(p), seam.Page{After: after, Limit: prunePage})
			if err != nil {
				return res, fmt.Errorf("prune: listing the children of %s: %w", p, err)
			}
			for _, l := range page {
				if err := m.pruneOne(ctx, p, l, req, claimed, &res); err != nil {
					return res, err
				}
			}
			if len(page) < prunePage {
				break
			}
			after = page[len(page)-1].Key()
		}
	}
	return res, nil
}

// pruneOne removes (or, on a dry run, names) one root child if it is
// settled and old enough. Only a ctx that ended is an error; a child that
// cannot be read is counted and kept.
func (m *Manager) pruneOne(ctx context.Context, principal string, l seam.Listing, req PruneRequest, claimed map[string]bool, res *PruneResult) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	h := l.Header
	if l.Corrupt {
		res.Unreadable++
		return nil
	}
	// Created after the cutoff: active after it too, with no read.
	if !h.CreatedAt.Before(req.Before) {
		return nil
	}
	subtree, err := m.subtree(ctx, h.ID)
	if err != nil {
		res.Unreadable++
		return nil
	}
	m.mu.Lock()
	resident := false
	for _, id := range subtree {
		_, live := m.live[id]
		resident = resident || live || claimed[id]
	}
	m.mu.Unlock()
	if resident {
		res.Resident++
		return nil
	}
	events, err := m.store.Events(ctx, h.ID)
	if err != nil {
		res.Unreadable++
		return nil
	}
	last := h.CreatedAt
	if n := len(events); n > 0 && events[n-1].Time.After(last) {
		last = events[n-1].Time
	}
	if !last.Before(req.Before) {
		return nil
	}
	row := Pruned{ID: h.ID, Principal: principal, Label: h.Label, Provider: h.Provider, CreatedAt: h.CreatedAt,
		LastActive: last, StopReason: lastStop(events), Descendants: len(subtree) - 1}
	if req.DryRun {
		res.Pruned = append(res.Pruned, row)
		return nil
	}
	// Serialised with cold resumes: a resume either claims the child first
	// (the store then refuses the delete) or finds it gone.
	m.resumeMu.Lock()
	m.mu.Lock()
	_, live := m.live[h.ID]
	m.mu.Unlock()
	var removed []string
	var trees []worktree.Info
	if !live {
		trees = m.worktreesOf(ctx, subtree)
		removed, err = m.store.Delete(ctx, h.ID)
	}
	m.resumeMu.Unlock()
	switch {
	case live || errors.Is(err, seam.ErrClaimed):
		res.Resident++
		return nil
	case errors.Is(err, seam.ErrNotFound):
		return nil // removed meanwhile
	case err != nil:
		if ctx.Err() != nil {
			return ctx.Err()
		}
		m.log.Error("pruning a child failed", "agent_id", h.ID, "err", err)
		res.Unreadable++
		return nil
	}
	m.mu.Lock()
	for _, id := range removed {
		delete(m.corrupt, id)
	}
	m.mu.Unlock()
	m.dropPrunedWorktrees(ctx, trees)
	if m.opts.Removed != nil {
		m.opts.Removed(removed)
	}
	row.Descendants = len(removed) - 1
	res.Pruned = append(res.Pruned, row)
	m.log.Info("pruned a settled child", "agent_id", h.ID, "principal", principal, "last_active", last, "descendants", row.Descendants)
	return nil
}

// subtree returns id and every stored descendant, read from the index.
func (m *Manager) subtree(ctx context.Context, id string) ([]string, error) {
	ids := []string{id}
	for i := 0; i < len(ids); i++ {
		ls, err := m.store.Listings(ctx, ids[i], seam.Page{})
		if err != nil {
			return nil, err
		}
		for _, l := range ls {
			ids = append(ids, l.Header.ID)
		}
	}
	return ids, nil
}

// lastStop is how the journal's last turn ended, or "".
func lastStop(events []agent.Event) agent.StopReason {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Kind == agent.EventTurnEnd {
			return events[i].StopReason
		}
	}
	return ""
}

// Retention prunes settled root children automatically (Manager.Retain).
type Retention struct {
	// OlderThan: a settled root child whose last activity is older than
	// this is removed; zero or negative: retention is off.
	OlderThan time.Duration
	// Every is the time between passes; zero: DefaultRetentionEvery.
	Every time.Duration
	// Principals whose children are pruned; nil: "local".
	Principals []string
}

// DefaultRetentionEvery is Retention.Every's default.
const DefaultRetentionEvery = time.Hour

// Retain starts retention: a pass at once, then one every r.Every, until
// Close. A pass that fails is logged and the next one tries again. It
// returns at once; call it after Recover, so claims a crash left are
// recovered (and the children announced) before they can be pruned. A
// second call, or one with r.OlderThan unset, does nothing.
func (m *Manager) Retain(r Retention) {
	if r.OlderThan <= 0 || m.store == nil {
		return
	}
	if r.Every <= 0 {
		r.Every = DefaultRetentionEvery
	}
	if len(r.Principals) == 0 {
		r.Principals = []string{"local"}
	}
	m.mu.Lock()
	if m.closed || m.retaining {
		m.mu.Unlock()
		return
	}
	m.retaining = true
	m.wg.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(r.Every)
		defer t.Stop()
		for {
			res, err := m.Prune(m.ctx, PruneRequest{Principals: r.Principals, Before: time.Now().Add(-r.OlderThan)})
			switch {
			case m.ctx.Err() != nil:
				return
			case err != nil:
				m.log.Error("retention: pruning failed", "err", err)
			case len(res.Pruned) > 0:
				m.log.Info("retention: pruned settled children", "children", len(res.Pruned), "older_than", r.OlderThan)
			}
			select {
			case <-m.ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// worktreesOf reads the worktrees the children ids record (one that cannot
// be read records none, as far as pruning knows).
func (m *Manager) worktreesOf(ctx context.Context, ids []string) []worktree.Info {
	var out []worktree.Info
	for _, id := range ids {
		if h, err := m.store.Header(ctx, id); err == nil && h.Worktree != nil {
			out = append(out, *h.Worktree)
		}
	}
	return out
}

// dropPrunedWorktrees removes the worktrees of pruned children, so none is
// left that nothing lists. A branch that holds commits of the child's own
// is kept (the work stays reachable, for the parent to merge or delete);
// one that holds none goes with its worktree.
func (m *Manager) dropPrunedWorktrees(ctx context.Context, trees []worktree.Info) {
	for _, w := range trees {
		if n, err := worktree.OwnCommits(ctx, w.Repo, w.Branch); err != nil || n > 0 {
			w.Branch = "" // kept
		}
		if err := worktree.Remove(ctx, w); err != nil {
			m.log.Warn("removing a pruned child's worktree failed", "path", w.Path, "err", err)
			continue
		}
		m.log.Info("removed a pruned child's worktree", "path", w.Path, "branch_kept", w.Branch == "")
	}
}
