package manager

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
	"github.com/mcp-subagent/mcp-subagent/worktree"
)

// IsolationWorktree is StartRequest.Isolation asking for the child's own
// git worktree (see the package doc, "Worktree isolation").
const IsolationWorktree = "worktree"

// reposFile lists, one a line, the work trees worktrees were made from, so
// a start can reconcile a repository even when every worktree directory
// of it is gone.
const reposFile = ".repos"

// checkIsolation refuses an isolation the deployment or the cwd cannot
// give, naming the field.
func (m *Manager) checkIsolation(ctx context.Context, name string, req *seam.StartRequest) error {
	bad := func(format string, args ...any) error {
		return &seam.Error{Code: seam.CodeInvalidRequest, Provider: name, Message: `field "isolation": ` + fmt.Sprintf(format, args...)}
	}
	switch req.Isolation {
	case "":
		return nil
	case IsolationWorktree:
	default:
		return bad("unknown isolation %q; the only one is \"worktree\"", req.Isolation)
	}
	if m.opts.Worktrees == "" {
		return bad("this server keeps no worktrees (it runs without a data directory); omit isolation")
	}
	if _, _, err := worktree.Locate(ctx, req.Cwd); err != nil {
		return bad("the cwd %s is not inside a git work tree; give a cwd inside a repository, or omit isolation", req.Cwd)
	}
	return nil
}

// makeWorktree creates the new child's worktree (when asked for) on
// branch subagent/<id> from the HEAD of the work tree holding req.Cwd,
// and moves req.Cwd to the same subdirectory of it: the provider prepares
// the child there. Nil when no isolation was asked for.
func (m *Manager) makeWorktree(ctx context.Context, name string, req *seam.StartRequest) (*worktree.Info, error) {
	if req.Isolation != IsolationWorktree {
		return nil, nil
	}
	top, rel, err := worktree.Locate(ctx, req.Cwd)
	if err != nil {
		return nil, &seam.Error{Code: seam.CodeInvalidRequest, Provider: name, Message: `field "isolation": ` + err.Error()}
	}
	if err := m.noteRepo(top); err != nil {
		return nil, &seam.Error{Code: seam.CodeInvalidRequest, Provider: name, Message: "recording the worktree's repository failed", Err: err}
	}
	w, err := worktree.Create(ctx, top, filepath.Join(m.opts.Worktrees, req.ID), worktree.BranchPrefix+req.ID)
	if err != nil {
		return nil, startErr(ctx, name, fmt.Errorf("creating the child's worktree failed: %w", err))
	}
	req.Cwd = filepath.Join(w.Path, rel)
	m.log.Info("created a worktree", "agent_id", req.ID, "path", w.Path, "branch", w.Branch, "base", w.Base)
	return &w, nil
}

// noteRepo adds top to the repositories file unless it is there.
func (m *Manager) noteRepo(top string) error {
	m.wtMu.Lock()
	defer m.wtMu.Unlock()
	repos, err := m.repos()
	if err != nil || slices.Contains(repos, top) {
		return err
	}
	if err := os.MkdirAll(m.opts.Worktrees, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(m.opts.Worktrees, reposFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(top + "\n")
	return errors.Join(err, f.Sync(), f.Close())
}

func (m *Manager) repos() ([]string, error) {
	f, err := os.Open(filepath.Join(m.opts.Worktrees, reposFile))
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

// dropWorktree removes a worktree whose child never got its id out (a
// failed start): nothing of it can be wanted.
func (m *Manager) dropWorktree(id string, w *worktree.Info) {
	if w == nil {
		return
	}
	ctx, cancel := m.bg()
	defer cancel()
	if err := worktree.Remove(ctx, *w); err != nil {
		m.log.Warn("removing a failed child's worktree failed; the next start reconciles it", "agent_id", id, "err", err)
	}
}

// commitTurn commits what the child changed in its worktree during the
// turn that just ended and adds the worktree and its changes (against the
// base, over all turns so far) to the turn's result. A failure is logged
// and said in the result's diagnostic; the turn's outcome stands.
func (m *Manager) commitTurn(hdr seam.Header, res seam.Result) seam.Result {
	w := hdr.Worktree
	if w == nil {
		return res
	}
	res.Worktree = w
	ctx, cancel := m.bg()
	defer cancel()
	msg := fmt.Sprintf("%s\n\nmcp-subagent child %s; the turn ended %s.", hdr.Label, hdr.ID, res.StopReason)
	if _, err := worktree.Commit(ctx, *w, msg); err != nil {
		m.log.Error("committing a child's worktree failed; its changes stay uncommitted there", "agent_id", hdr.ID, "err", err)
		res.Diagnostic = joinDiag(res.Diagnostic, "committing the worktree failed: "+err.Error())
		return res
	}
	c, err := worktree.Diff(ctx, *w)
	if err != nil {
		m.log.Error("reading a child's worktree changes failed", "agent_id", hdr.ID, "err", err)
		return res
	}
	res.Changes = &c
	return res
}

func joinDiag(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// settleWorktree removes the settled child's worktree and branch when they
// hold no change from the base; a later message recreates it (ensureWorktree).
// A changed one stays until the child is pruned or `mcp-subagent worktree
// rm` removes it.
func (m *Manager) settleWorktree(hdr seam.Header) {
	w := hdr.Worktree
	if w == nil {
		return
	}
	ctx, cancel := m.bg()
	defer cancel()
	same, err := worktree.Unchanged(ctx, *w)
	if err != nil || !same {
		if err != nil {
			m.log.Warn("checking a settled child's worktree failed; keeping it", "agent_id", hdr.ID, "err", err)
		}
		return
	}
	if err := worktree.Remove(ctx, *w); err != nil {
		m.log.Warn("removing an unchanged worktree failed; the next start reconciles it", "agent_id", hdr.ID, "err", err)
		return
	}
	m.log.Info("removed an unchanged worktree", "agent_id", hdr.ID, "path", w.Path)
}

// ensureWorktree recreates a resuming child's worktree if it is gone (an
// unchanged one removed at settlement, or one deleted by hand), at the
// same path on the same branch, or from the recorded base when the branch
// is gone too.
func (m *Manager) ensureWorktree(ctx context.Context, hdr seam.Header) error {
	if hdr.Worktree == nil {
		return nil
	}
	again, err := worktree.Ensure(ctx, *hdr.Worktree)
	if again {
		m.log.Info("recreated a child's worktree", "agent_id", hdr.ID, "path", hdr.Worktree.Path)
	}
	return err
}

// worktreeText is what a settlement notice says of the child's worktree.
func worktreeText(last seam.Result) string {
	w, c := last.Worktree, last.Changes
	if w == nil {
		return ""
	}
	if c == nil {
		return fmt.Sprintf("\nIts worktree: %s on branch %s (base %s).", w.Path, w.Branch, w.Base)
	}
	if c.Empty() {
		return fmt.Sprintf("\nIt changed nothing in its worktree, which is removed (a message to it recreates it on branch %s).", w.Branch)
	}
	s := fmt.Sprintf("\nIts changes are committed on branch %s in worktree %s (base %s): %s.", w.Branch, w.Path, w.Base, c.Diffstat)
	for _, l := range []struct {
		name  string
		paths []string
	}{{"added", c.Added}, {"modified", c.Modified}, {"deleted", c.Deleted}} {
		if len(l.paths) > 0 {
			s += fmt.Sprintf(" %s: %s.", strings.ToUpper(l.name[:1])+l.name[1:], strings.Join(l.paths, ", "))
		}
	}
	return s
}

// reconcileWorktrees runs at start, after Recover: every worktree under
// Options.Worktrees is either listed (its child's header records it) or
// removed. For each repository worktrees were made from it reads `git
// worktree list`:
//   - a worktree no stored child records is removed with its branch when
//     it holds nothing of its own (a crash between its creation and its
//     child's first commit, which comes before any turn), else kept and
//     logged;
//   - a recorded one of a child that is not resident is removed when
//     unchanged, as its settlement would have (the crash settled it);
//   - a recorded one whose directory is gone is recreated from its branch.
func (m *Manager) reconcileWorktrees(ctx context.Context) {
	if m.opts.Worktrees == "" || m.store == nil {
		return
	}
	repos, err := m.repos()
	if err != nil {
		m.log.Error("reading the worktrees' repositories failed; not reconciling", "err", err)
		return
	}
	root := m.opts.Worktrees
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	// A child resident in another server sharing the store is working in
	// its worktree: leave it alone.
	elsewhere := map[string]bool{}
	if claims, err := m.store.Residents(ctx); err == nil {
		now := time.Now()
		for _, c := range claims {
			if c.Owner.ID != m.owner && c.Owner.Expires.After(now) {
				elsewhere[c.ChildID] = true
			}
		}
	}
	seen := map[string]bool{}
	for _, repo := range repos {
		es, err := worktree.List(ctx, repo)
		if err != nil {
			m.log.Warn("listing a repository's worktrees failed", "repo", repo, "err", err)
			continue
		}
		for _, e := range es {
			if filepath.Dir(e.Path) != root && filepath.Dir(e.Path) != m.opts.Worktrees {
				continue
			}
			id := filepath.Base(e.Path)
			seen[id] = true
			if !elsewhere[id] {
				m.reconcileOne(ctx, repo, id, e)
			}
		}
	}
	// Directories no repository lists (a crash inside `git worktree add`).
	dirs, _ := os.ReadDir(m.opts.Worktrees)
	for _, d := range dirs {
		if !d.IsDir() || seen[d.Name()] {
			continue
		}
		id := d.Name()
		if _, err := m.store.Header(ctx, id); errors.Is(err, seam.ErrNotFound) {
			if err := os.RemoveAll(filepath.Join(m.opts.Worktrees, id)); err != nil {
				m.log.Warn("removing a stray worktree directory failed", "path", d.Name(), "err", err)
			}
		}
	}
}

func (m *Manager) reconcileOne(ctx context.Context, repo, id string, e worktree.Entry) {
	m.mu.Lock()
	_, resident := m.live[id]
	m.mu.Unlock()
	if resident {
		return
	}
	hdr, err := m.store.Header(ctx, id)
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
			m.log.Warn("a worktree no child records holds changes; keeping it (remove it with git worktree remove)", "path", e.Path, "branch", e.Branch)
			return
		}
		if err := worktree.Remove(ctx, w); err != nil {
			m.log.Warn("removing a worktree no child records failed", "path", e.Path, "err", err)
			return
		}
		m.log.Info("removed a worktree no child records", "path", e.Path)
	case err != nil:
		m.log.Warn("reading the child of a worktree failed; keeping it", "agent_id", id, "err", err)
	case hdr.Worktree == nil:
		m.log.Warn("a worktree's child records no worktree; keeping it", "agent_id", id, "path", e.Path)
	case e.Prunable:
		// Its directory is gone: recreate it, so the row's path is true.
		if _, err := worktree.Ensure(ctx, *hdr.Worktree); err != nil {
			m.log.Error("a child's worktree is gone and could not be recreated", "agent_id", id, "path", e.Path, "err", err)
		} else {
			m.log.Info("recreated a child's vanished worktree", "agent_id", id, "path", e.Path)
		}
	default:
		m.settleWorktree(hdr)
	}
}

// RemoveWorktree removes a stopped child's worktree and its branch,
// changes and all (`mcp-subagent worktree rm`, asked of the daemon), for
// the child's root principal calling as a root caller. A resident child's is refused: it may be
// working there. The check and the removal are serialised with cold
// resumes, so no message wakes the child in a worktree being removed; a
// later one recreates it from the recorded base.
func (m *Manager) RemoveWorktree(ctx context.Context, caller seam.ParentRef, id string) (worktree.Info, error) {
	if m.store == nil {
		return worktree.Info{}, newErr(seam.CodePersistenceUnavailable, "removing a worktree needs the session store; none is configured")
	}
	hdr, err := m.header(ctx, id)
	if err != nil {
		return worktree.Info{}, err
	}
	if err := mayRemoveWorktree(caller, hdr); err != nil {
		return worktree.Info{}, err
	}
	if hdr.Worktree == nil {
		return worktree.Info{}, newErr(seam.CodeInvalidRequest, "subagent %s has no worktree", id)
	}
	m.resumeMu.Lock()
	defer m.resumeMu.Unlock()
	m.mu.Lock()
	_, resident := m.live[id]
	m.mu.Unlock()
	if resident {
		return worktree.Info{}, newErr(seam.CodeInvalidRequest, "subagent %s is resident; interrupt it and wait until it is ready before removing its worktree", id)
	}
	if err := worktree.Remove(ctx, *hdr.Worktree); err != nil {
		return worktree.Info{}, err
	}
	return *hdr.Worktree, nil
}
