// Package worktrees owns worktree isolation, the policy over package
// worktree's git operations: which starts may have a worktree, where each
// lives, what happens to it at each turn's end, at settlement, at a
// resume, at a prune and at a start after a crash.
//
// A continuable child started with StartRequest.Isolation "worktree" works
// in its own git worktree: before its provider prepares it, Make creates
// <dir>/<id> on the new branch subagent/<id> from the HEAD of the work
// tree holding the requested cwd, and the child's cwd becomes the same
// subdirectory of it, so every provider — in-process or external — simply
// runs there. The worktree lives outside the repository's work tree, so
// the main checkout shows nothing new; the header records it (path,
// branch, base commit, repository), and listing rows show it. At each
// turn's end (Commit) everything the child changed is committed on its
// branch (fixed identity, no hooks, no signing), and the turn's result
// carries the worktree and its changes against the base, over all turns
// so far — what a parent merges. At settlement (Settle) a worktree whose
// branch holds nothing beyond its base is removed with its branch; a later
// message recreates it (Ensure) at the same path on the same branch from
// the recorded base (so an idle child costs no checkout); a changed one
// stays until the manager's RemoveWorktree (`mcp-subagent worktree rm`)
// or a prune (DropPruned: its branch is kept when it holds commits of its
// own). A start reconciles (Reconcile, after Recover): every worktree
// under the directory of a repository one was made from (a list kept
// beside them) is either recorded by a stored child or removed — an
// unrecorded one is a crash between its creation and its child's first
// commit, which precedes any turn, so it holds nothing (one that does is
// kept and logged); a recorded unchanged one of a child the crash settled
// is removed; a recorded one whose directory is gone is recreated; one of
// a child resident in another server sharing the store is left alone.
// Refused, naming the field "isolation" (Check): a cwd outside a git work
// tree, a manager without a worktrees directory (the server's
// --ephemeral); the manager refuses it for a one-shot child (it is stored
// nowhere, so nothing would list its worktree).
//
// The manager calls a Keeper with headers and results; what Reconcile
// needs of the store and of the manager is passed in. Keeper.mu, which
// serialises the repositories file, is a leaf.
package worktrees

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
	"github.com/mcp-subagent/mcp-subagent/worktree"
)

// Isolation is StartRequest.Isolation asking for the child's own git
// worktree.
const Isolation = "worktree"

// Keeper keeps the children's worktrees under one directory.
type Keeper struct {
	dir string // "": isolation is refused
	log *slog.Logger
	mu  sync.Mutex // serialises the repositories file
}

// New returns a Keeper of the worktrees under dir (empty: none; isolation
// is refused).
func New(dir string, log *slog.Logger) *Keeper {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Keeper{dir: dir, log: log}
}

// reposFile lists, one a line, the work trees worktrees were made from, so
// a start can reconcile a repository even when every worktree directory
// of it is gone.
const reposFile = ".repos"

// Check refuses an isolation the deployment or the cwd cannot give,
// naming the field.
func (k *Keeper) Check(ctx context.Context, name string, req *seam.StartRequest) error {
	bad := func(format string, args ...any) error {
		return &seam.Error{Code: seam.CodeInvalidRequest, Provider: name, Message: `field "isolation": ` + fmt.Sprintf(format, args...)}
	}
	switch req.Isolation {
	case "":
		return nil
	case Isolation:
	default:
		return bad("unknown isolation %q; the only one is \"worktree\"", req.Isolation)
	}
	if k.dir == "" {
		return bad("this server keeps no worktrees (it runs without a data directory); omit isolation")
	}
	if _, _, err := worktree.Locate(ctx, req.Cwd); err != nil {
		return bad("the cwd %s is not inside a git work tree; give a cwd inside a repository, or omit isolation", req.Cwd)
	}
	return nil
}

// Make creates the new child's worktree (when asked for) on branch
// subagent/<id> from the HEAD of the work tree holding req.Cwd, and moves
// req.Cwd to the same subdirectory of it: the provider prepares the child
// there. Nil when no isolation was asked for. A failure to create it is
// returned as git's error (the caller maps it to the start's).
func (k *Keeper) Make(ctx context.Context, name string, req *seam.StartRequest) (*seam.Worktree, error) {
	if req.Isolation != Isolation {
		return nil, nil
	}
	top, rel, err := worktree.Locate(ctx, req.Cwd)
	if err != nil {
		return nil, &seam.Error{Code: seam.CodeInvalidRequest, Provider: name, Message: `field "isolation": ` + err.Error()}
	}
	if err := k.noteRepo(top); err != nil {
		return nil, &seam.Error{Code: seam.CodeInvalidRequest, Provider: name, Message: "recording the worktree's repository failed", Err: err}
	}
	w, err := worktree.Create(ctx, top, filepath.Join(k.dir, req.ID), worktree.BranchPrefix+req.ID)
	if err != nil {
		return nil, fmt.Errorf("creating the child's worktree failed: %w", err)
	}
	req.Cwd = filepath.Join(w.Path, rel)
	k.log.Info("created a worktree", "agent_id", req.ID, "path", w.Path, "branch", w.Branch, "base", w.Base)
	return (*seam.Worktree)(&w), nil
}

// noteRepo adds top to the repositories file unless it is there.
func (k *Keeper) noteRepo(top string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	repos, err := k.repos()
	if err != nil || slices.Contains(repos, top) {
		return err
	}
	if err := os.MkdirAll(k.dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(k.dir, reposFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(top + "\n")
	return errors.Join(err, f.Sync(), f.Close())
}

func (k *Keeper) repos() ([]string, error) {
	f, err := os.Open(filepath.Join(k.dir, reposFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out, sc.Err()
}

// Drop removes a worktree whose child never got its id out (a failed
// start): nothing of it can be wanted. Nil w: nothing.
func (k *Keeper) Drop(ctx context.Context, id string, w *seam.Worktree) {
	if w == nil {
		return
	}
	if err := worktree.Remove(ctx, worktree.Info(*w)); err != nil {
		k.log.Warn("removing a failed child's worktree failed; the next start reconciles it", "agent_id", id, "err", err)
	}
}

// Commit commits what the child changed in its worktree during the
// turn that just ended and adds the worktree and its changes (against the
// base, over all turns so far) to the turn's result. A failure is logged
// and said in the result's diagnostic; the turn's outcome stands.
func (k *Keeper) Commit(ctx context.Context, hdr seam.Header, res seam.Result) seam.Result {
	w := hdr.Worktree
	if w == nil {
		return res
	}
	res.Worktree = w
	msg := fmt.Sprintf("%s\n\nmcp-subagent child %s; the turn ended %s.", hdr.Label, hdr.ID, res.StopReason)
	if _, err := worktree.Commit(ctx, worktree.Info(*w), msg); err != nil {
		k.log.Error("committing a child's worktree failed; its changes stay uncommitted there", "agent_id", hdr.ID, "err", err)
		res.Diagnostic = joinDiag(res.Diagnostic, "committing the worktree failed: "+err.Error())
		return res
	}
	c, err := worktree.Diff(ctx, worktree.Info(*w))
	if err != nil {
		k.log.Error("reading a child's worktree changes failed", "agent_id", hdr.ID, "err", err)
		return res
	}
	res.Changes = (*seam.Changes)(&c)
	return res
}

func joinDiag(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// Settle removes the settled child's worktree and branch when they hold
// no change from the base; a later message recreates it (Ensure).
// A changed one stays until the child is pruned or `mcp-subagent worktree
// rm` removes it.
func (k *Keeper) Settle(ctx context.Context, hdr seam.Header) {
	w := hdr.Worktree
	if w == nil {
		return
	}
	same, err := worktree.Unchanged(ctx, worktree.Info(*w))
	if err != nil || !same {
		if err != nil {
			k.log.Warn("checking a settled child's worktree failed; keeping it", "agent_id", hdr.ID, "err", err)
		}
		return
	}
	if err := worktree.Remove(ctx, worktree.Info(*w)); err != nil {
		k.log.Warn("removing an unchanged worktree failed; the next start reconciles it", "agent_id", hdr.ID, "err", err)
		return
	}
	k.log.Info("removed an unchanged worktree", "agent_id", hdr.ID, "path", w.Path)
}

// Ensure recreates a resuming child's worktree if it is gone (an
// unchanged one removed at settlement, or one deleted by hand), at the
// same path on the same branch, or from the recorded base when the branch
// is gone too.
func (k *Keeper) Ensure(ctx context.Context, hdr seam.Header) error {
	if hdr.Worktree == nil {
		return nil
	}
	again, err := worktree.Ensure(ctx, worktree.Info(*hdr.Worktree))
	if again {
		k.log.Info("recreated a child's worktree", "agent_id", hdr.ID, "path", hdr.Worktree.Path)
	}
	return err
}

// Store is what reconciling and pruning read of the session store.
type Store interface {
	Header(ctx context.Context, childID string) (seam.Header, error)
	Residents(ctx context.Context) ([]seam.Claim, error)
}

// Reconcile runs at start, after Recover: every worktree under the
// Keeper's directory is either listed (its child's header records it) or
// removed. For each repository worktrees were made from it reads `git
// worktree list`:
//   - a worktree no stored child records is removed with its branch when
//     it holds nothing of its own (a crash between its creation and its
//     child's first commit, which comes before any turn), else kept and
//     logged;
//   - a recorded one of a child that is not resident is removed when
//     unchanged, as its settlement would have (the crash settled it);
//   - a recorded one whose directory is gone is recreated from its branch.
//
// owner is the manager's claim owner; resident reports whether a child is
// resident in the manager (its worktree is in use).
func (k *Keeper) Reconcile(ctx context.Context, store Store, owner string, resident func(id string) bool) {
	if k.dir == "" || store == nil {
		return
	}
	repos, err := k.repos()
	if err != nil {
		k.log.Error("reading the worktrees' repositories failed; not reconciling", "err", err)
		return
	}
	root := k.dir
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	// A child resident in another server sharing the store is working in
	// its worktree: leave it alone.
	elsewhere := map[string]bool{}
	if claims, err := store.Residents(ctx); err == nil {
		now := time.Now()
		for _, c := range claims {
			if c.Owner.ID != owner && c.Owner.Expires.After(now) {
				elsewhere[c.ChildID] = true
			}
		}
	}
	seen := map[string]bool{}
	for _, repo := range repos {
		es, err := worktree.List(ctx, repo)
		if err != nil {
			k.log.Warn("listing a repository's worktrees failed", "repo", repo, "err", err)
			continue
		}
		for _, e := range es {
			if filepath.Dir(e.Path) != root && filepath.Dir(e.Path) != k.dir {
				continue
			}
			id := filepath.Base(e.Path)
			seen[id] = true
			if !elsewhere[id] && !resident(id) {
				k.reconcileOne(ctx, store, repo, id, e)
			}
		}
	}
	// Directories no repository lists (a crash inside `git worktree add`).
	dirs, _ := os.ReadDir(k.dir)
	for _, d := range dirs {
		if !d.IsDir() || seen[d.Name()] {
			continue
		}
		id := d.Name()
		if _, err := store.Header(ctx, id); errors.Is(err, seam.ErrNotFound) {
			if err := os.RemoveAll(filepath.Join(k.dir, id)); err != nil {
				k.log.Warn("removing a stray worktree directory failed", "path", d.Name(), "err", err)
			}
		}
	}
}

func (k *Keeper) reconcileOne(ctx context.Context, store Store, repo, id string, e worktree.Entry) {
	hdr, err := store.Header(ctx, id)
	switch {
	case errors.Is(err, seam.ErrNotFound):
		w := worktree.Info{Path: e.Path, Branch: e.Branch, Repo: repo}
		own, err := worktree.OwnCommits(ctx, repo, e.Branch)
		clean := e.Prunable
		if !e.Prunable {
			w.Base = e.Head
			clean, _ = worktree.Unchanged(ctx, w)
		}
		if err != nil || own > 0 || !clean {
			k.log.Warn("a worktree no child records holds changes; keeping it (remove it with git worktree remove)", "path", e.Path, "branch", e.Branch)
			return
		}
		if err := worktree.Remove(ctx, w); err != nil {
			k.log.Warn("removing a worktree no child records failed", "path", e.Path, "err", err)
			return
		}
		k.log.Info("removed a worktree no child records", "path", e.Path)
	case err != nil:
		k.log.Warn("reading the child of a worktree failed; keeping it", "agent_id", id, "err", err)
	case hdr.Worktree == nil:
		k.log.Warn("a worktree's child records no worktree; keeping it", "agent_id", id, "path", e.Path)
	case e.Prunable:
		// Its directory is gone: recreate it, so the row's path is true.
		if _, err := worktree.Ensure(ctx, worktree.Info(*hdr.Worktree)); err != nil {
			k.log.Error("a child's worktree is gone and could not be recreated", "agent_id", id, "path", e.Path, "err", err)
		} else {
			k.log.Info("recreated a child's vanished worktree", "agent_id", id, "path", e.Path)
		}
	default:
		k.Settle(ctx, hdr)
	}
}

// Of reads the worktrees the children ids record (one that cannot be read
// records none, as far as pruning knows).
func Of(ctx context.Context, store Store, ids []string) []worktree.Info {
	var out []worktree.Info
	for _, id := range ids {
		if h, err := store.Header(ctx, id); err == nil && h.Worktree != nil {
			out = append(out, worktree.Info(*h.Worktree))
		}
	}
	return out
}

// DropPruned removes the worktrees of pruned children, so none is
// left that nothing lists. A branch that holds commits of the child's own
// is kept (the work stays reachable, for the parent to merge or delete);
// one that holds none goes with its worktree.
func (k *Keeper) DropPruned(ctx context.Context, trees []worktree.Info) {
	for _, w := range trees {
		if n, err := worktree.OwnCommits(ctx, w.Repo, w.Branch); err != nil || n > 0 {
			w.Branch = "" // kept
		}
		if err := worktree.Remove(ctx, w); err != nil {
			k.log.Warn("removing a pruned child's worktree failed", "path", w.Path, "err", err)
			continue
		}
		k.log.Info("removed a pruned child's worktree", "path", w.Path, "branch_kept", w.Branch == "")
	}
}
