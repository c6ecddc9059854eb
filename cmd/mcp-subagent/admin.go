package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/mcp-subagent/mcp-subagent/daemon"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/manager/retention"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// RetentionConfig is the config's retention: settled root children idle
// longer than SettledOlderThan are pruned at start and then Every.
type RetentionConfig struct {
	SettledOlderThan string `json:"settled_older_than"`
	Every            string `json:"every,omitempty"`
}

// check parses both ages, naming the field that is wrong.
func (r *RetentionConfig) check() error {
	_, err := r.policy(nil)
	return err
}

// policy is the manager's Retention for r, over principals; the zero
// Retention (off) for a nil r.
func (r *RetentionConfig) policy(principals []string) (retention.Policy, error) {
	if r == nil {
		return retention.Policy{}, nil
	}
	older, err := parseAge(r.SettledOlderThan)
	if err != nil {
		return retention.Policy{}, fmt.Errorf("field \"retention.settled_older_than\": %w", err)
	}
	every := retention.DefaultEvery
	if r.Every != "" {
		if every, err = parseAge(r.Every); err != nil {
			return retention.Policy{}, fmt.Errorf("field \"retention.every\": %w", err)
		}
	}
	return retention.Policy{OlderThan: older, Every: every, Principals: principals}, nil
}

// principals are those whose children this process keeps: local, the
// stdio principal and every HTTP token's.
func principals(o serveOptions, cfg Config) []string {
	out := []string{"local"}
	if o.principal != "" {
		out = append(out, o.principal)
	}
	for _, t := range cfg.HTTP.Tokens {
		out = append(out, t.Principal)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// admin runs the daemon's admin operations (daemon.AdminRequest): a prune
// of the asking principal's own children, or a compaction of the store.
func (a *app) admin(ctx context.Context, req daemon.AdminRequest) (any, error) {
	switch req.Op {
	case daemon.OpPrune:
		var args pruneArgs
		if err := json.Unmarshal(req.Args, &args); err != nil {
			return nil, fmt.Errorf("INVALID_REQUEST: the prune arguments do not decode: %w", err)
		}
		if args.OlderThan <= 0 {
			return nil, fmt.Errorf("INVALID_REQUEST: field \"older_than\": must be a positive age")
		}
		return a.mgr.Prune(ctx, retention.Request{Principals: []string{req.Principal},
			Before: time.Now().Add(-args.OlderThan), DryRun: args.DryRun})
	case daemon.OpCompact:
		if a.store == nil && a.storeStatus != "" {
			return nil, fmt.Errorf("PERSISTENCE_UNAVAILABLE: the session store is %s, which compacts itself (VACUUM); compact applies to a bbolt store", a.storeStatus)
		}
		if a.store == nil {
			return nil, fmt.Errorf("PERSISTENCE_UNAVAILABLE: this daemon has no session store to compact")
		}
		return a.store.Compact(ctx)
	case daemon.OpUI:
		return a.web.url(req.Principal)
	case daemon.OpWorktreeRm:
		var args worktreeRmArgs
		if err := json.Unmarshal(req.Args, &args); err != nil {
			return nil, fmt.Errorf("INVALID_REQUEST: the worktree rm arguments do not decode: %w", err)
		}
		if args.ID == "" {
			return nil, fmt.Errorf("INVALID_REQUEST: field \"id\": name the subagent whose worktree to remove")
		}
		if err := checkID(args.ID); err != nil {
			return nil, err
		}
		return a.mgr.RemoveWorktree(ctx, seam.ParentRef{Principal: req.Principal}, args.ID)
	}
	return nil, fmt.Errorf("INVALID_REQUEST: unknown admin operation %q", truncate.Head(req.Op, echoBytes))
}
