// Package retention owns which stored children are removed and when:
// Prune removes a principal's settled root children whose last activity
// (last journal event) is before a cutoff, each with its whole subtree;
// Run prunes on a schedule (a pass at once, then one every Policy.Every)
// until its ctx ends.
//
// A descendant lives and dies with its root: only a root child's parent
// is a principal who can no longer reach it. A child is never removed
// while it or any descendant is resident: live in the manager (Host) or
// claimed in the store; the removal itself is the Host's, which
// serialises it with cold resumes and whose store refuses a claimed child
// in the same commit. A dry run names the children and removes nothing.
// A follow-up to a pruned id is NOT_RESUMABLE; notices it left for its
// principal stay queued. Call Run after the manager's Recover, so claims a
// crash left are recovered (and their children announced) before they can
// be pruned.
//
// The package reads the store through Store and acts on the manager only
// through Host; it holds no lock.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Request selects the settled root children Prune removes.
type Request struct {
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

// Result is what a Prune did.
type Result struct {
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

// Store is what pruning reads of the session store.
type Store interface {
	Residents(ctx context.Context) ([]seam.Claim, error)
	Listings(ctx context.Context, parent string, page seam.Page) ([]seam.Listing, error)
	Events(ctx context.Context, childID string) ([]agent.Event, error)
}

// Host is what pruning asks of the manager.
type Host interface {
	// Resident reports whether child id is resident in the manager.
	Resident(id string) bool
	// Remove deletes root's stored subtree (subtree: root and its
	// descendants as read) unless root became resident, serialised with
	// cold resumes; resident says it was kept for that (the store's
	// seam.ErrClaimed included). removed lists the ids the store removed.
	Remove(ctx context.Context, root string, subtree []string) (removed []string, resident bool, err error)
}

// Pruner prunes a store on behalf of a manager.
type Pruner struct {
	Store Store
	Host  Host
	Log   *slog.Logger
}

// Prune removes the principals' settled root children whose last activity
// is before req.Before, each with its whole subtree (a descendant lives
// and dies with its root: only a root child's parent is a principal who
// can no longer reach it). A child is never removed while it or any
// descendant is resident: live in this manager or claimed in the store
// (the store refuses those in the same commit, so a child resumed while
// Prune runs is kept). A dry run reads the same and removes nothing.
// Notices a removed child queued for its principal stay queued.
func (p Pruner) Prune(ctx context.Context, req Request) (Result, error) {
	res := Result{DryRun: req.DryRun, Pruned: []Pruned{}}
	switch {
	case len(req.Principals) == 0:
		return res, &seam.Error{Code: seam.CodeInvalidRequest, Message: "prune: name at least one principal"}
	case req.Before.IsZero():
		return res, &seam.Error{Code: seam.CodeInvalidRequest, Message: "prune: the cutoff time must be set"}
	}
	claims, err := p.Store.Residents(ctx)
	if err != nil {
		return res, fmt.Errorf("prune: reading the claims: %w", err)
	}
	claimed := map[string]bool{}
	for _, c := range claims {
		claimed[c.ChildID] = true
	}
	for _, principal := range req.Principals {
		var after seam.ListingKey
		for {
			page, err := p.Store.Listings(ctx, seam.PrincipalAddress(principal), seam.Page{After: after, Limit: prunePage})
			if err != nil {
				return res, fmt.Errorf("prune: listing the children of %s: %w", principal, err)
			}
			for _, l := range page {
				if err := p.pruneOne(ctx, principal, l, req, claimed, &res); err != nil {
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
func (p Pruner) pruneOne(ctx context.Context, principal string, l seam.Listing, req Request, claimed map[string]bool, res *Result) error {
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
	subtree, err := p.subtree(ctx, h.ID)
	if err != nil {
		res.Unreadable++
		return nil
	}
	resident := false
	for _, id := range subtree {
		resident = resident || claimed[id] || p.Host.Resident(id)
	}
	if resident {
		res.Resident++
		return nil
	}
	events, err := p.Store.Events(ctx, h.ID)
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
	removed, live, err := p.Host.Remove(ctx, h.ID, subtree)
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
		p.Log.Error("pruning a child failed", "agent_id", h.ID, "err", err)
		res.Unreadable++
		return nil
	}
	row.Descendants = len(removed) - 1
	res.Pruned = append(res.Pruned, row)
	p.Log.Info("pruned a settled child", "agent_id", h.ID, "principal", principal, "last_active", last, "descendants", row.Descendants)
	return nil
}

// subtree returns id and every stored descendant, read from the index.
func (p Pruner) subtree(ctx context.Context, id string) ([]string, error) {
	ids := []string{id}
	for i := 0; i < len(ids); i++ {
		ls, err := p.Store.Listings(ctx, ids[i], seam.Page{})
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

// Policy prunes settled root children automatically (Run).
type Policy struct {
	// OlderThan: a settled root child whose last activity is older than
	// this is removed; zero or negative: retention is off.
	OlderThan time.Duration
	// Every is the time between passes; zero: DefaultEvery.
	Every time.Duration
	// Principals whose children are pruned; nil: "local".
	Principals []string
}

// DefaultEvery is Policy.Every's default.
const DefaultEvery = time.Hour

// Run prunes by r: a pass at once, then one every r.Every, until ctx
// ends. A pass that fails is logged and the next one tries again. With
// r.OlderThan unset it returns at once.
func Run(ctx context.Context, r Policy, prune func(context.Context, Request) (Result, error), log *slog.Logger) {
	if r.OlderThan <= 0 {
		return
	}
	if r.Every <= 0 {
		r.Every = DefaultEvery
	}
	if len(r.Principals) == 0 {
		r.Principals = []string{"local"}
	}
	t := time.NewTicker(r.Every)
	defer t.Stop()
	for {
		res, err := prune(ctx, Request{Principals: r.Principals, Before: time.Now().Add(-r.OlderThan)})
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.Error("retention: pruning failed", "err", err)
		case len(res.Pruned) > 0:
			log.Info("retention: pruned settled children", "children", len(res.Pruned), "older_than", r.OlderThan)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
