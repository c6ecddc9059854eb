package worktree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Identity is the author and committer of the commits made at turn ends.
const (
	IdentityName  = "mcp-subagent"
	IdentityEmail = "mcp-subagent@localhost"
)

// BranchPrefix starts every branch this package creates: a child's branch
// is BranchPrefix + its full agent id.
const BranchPrefix = "subagent/"

// Info is a worktree as a child records it.
type Info struct {
	Path   string `json:"path"`   // the worktree's top directory
	Branch string `json:"branch"` // e.g. subagent/agent-1a2b...
	Base   string `json:"base"`   // the commit it was created from
	// Repo is the top directory of the work tree the worktree was made
	// from (the one holding the requested cwd): git's worktree commands
	// run there.
	Repo string `json:"repo"`
}

// Changes is what a worktree's branch holds beyond its base: paths
// relative to the worktree's top, and git's --shortstat summary. Each list
// is clipped to MaxListed paths; Omitted counts the paths left out.
type Changes struct {
	Added    []string `json:"added,omitempty"`
	Modified []string `json:"modified,omitempty"`
	Deleted  []string `json:"deleted,omitempty"`
	Diffstat string   `json:"diffstat,omitempty"`
	Omitted  int      `json:"omitted,omitempty"`
}

// MaxListed bounds each of Changes' lists.
const MaxListed = 100

// Empty reports whether the branch holds nothing beyond its base.
func (c Changes) Empty() bool {
	return len(c.Added) == 0 && len(c.Modified) == 0 && len(c.Deleted) == 0 && c.Omitted == 0
}

// ErrNotRepo marks a directory outside any git work tree.
var ErrNotRepo = errors.New("not inside a git work tree")

// Locate returns the top directory of the git work tree holding dir and
// dir's path relative to it ("" at the top). A directory outside any work
// tree (or inside a .git directory) is ErrNotRepo.
func Locate(ctx context.Context, dir string) (top, rel string, err error) {
	out, err := git(ctx, dir, "rev-parse", "--show-toplevel", "--show-prefix")
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", ErrNotRepo, err)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	top = lines[0]
	if len(lines) > 1 {
		rel = strings.TrimSuffix(lines[1], "/")
	}
	if top == "" {
		return "", "", ErrNotRepo
	}
	return top, rel, nil
}

// Create makes a new worktree at path on a new branch from the current
// HEAD of the work tree at repo. path must not exist. It fails, leaving
// nothing behind, when the repository has no commit yet.
func Create(ctx context.Context, repo, path, branch string) (Info, error) {
	base, err := git(ctx, repo, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
	if err != nil {
		return Info{}, fmt.Errorf("the repository at %s has no commit to branch from: %w", repo, err)
	}
	base = strings.TrimSpace(base)
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		// The undo below removes path: it must be ours.
		return Info{}, fmt.Errorf("the worktree path %s already exists", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return Info{}, err
	}
	w := Info{Path: path, Branch: branch, Base: base, Repo: repo}
	err = retried(ctx, func() error {
		unlock, err := lockRepo(ctx, repo)
		if err != nil {
			return err
		}
		defer unlock()
		_, err = gitOnce(ctx, repo, "worktree", "add", "--quiet", "-b", branch, path, base)
		if err != nil {
			// A failed add may have left the branch (it is made first)
			// or the directory: undo both, so a retry starts clean.
			_ = remove(context.WithoutCancel(ctx), w)
		}
		return err
	})
	if err != nil {
		return Info{}, err
	}
	return w, nil
}

// repoLocks serialises, per repository, this process's commands that
// write .git/worktrees: git reads every worktree's entry while adding one
// (to refuse a branch checked out twice) and fails on an entry another
// add has half written, and a prune would remove such an entry. Other
// processes' commands are arbitrated by git's own locks and the retries.
var repoLocks sync.Map // the repository's common git directory -> *sync.Mutex

func lockRepo(ctx context.Context, repo string) (unlock func(), err error) {
	dir, err := git(ctx, repo, "rev-parse", "--path-format=absolute", "--git-common-dir")
	if err != nil {
		return nil, err
	}
	mu, _ := repoLocks.LoadOrStore(strings.TrimSpace(dir), new(sync.Mutex))
	mu.(*sync.Mutex).Lock()
	return mu.(*sync.Mutex).Unlock, nil
}

// Ensure makes sure w's directory is a worktree again: a removed one (an
// unchanged worktree at settlement, or one deleted by hand) is recreated
// on its branch, or from its base when the branch is gone too. It reports
// whether it recreated it.
func Ensure(ctx context.Context, w Info) (bool, error) {
	if _, err := os.Stat(filepath.Join(w.Path, ".git")); err == nil {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(w.Path), 0o700); err != nil {
		return false, err
	}
	unlock, err := lockRepo(ctx, w.Repo)
	if err != nil {
		return false, err
	}
	defer unlock()
	// git still lists a worktree whose directory vanished; prune it first.
	if _, err := git(ctx, w.Repo, "worktree", "prune"); err != nil {
		return false, err
	}
	if _, err := git(ctx, w.Repo, "rev-parse", "--verify", "--quiet", "refs/heads/"+w.Branch); err == nil {
		_, err = git(ctx, w.Repo, "worktree", "add", "--quiet", w.Path, w.Branch)
		return err == nil, err
	}
	_, err = git(ctx, w.Repo, "worktree", "add", "--quiet", "-b", w.Branch, w.Path, w.Base)
	return err == nil, err
}

// Commit commits everything changed in the worktree at path (added,
// modified, deleted; .gitignore is honoured) on its branch with the fixed
// identity, no hooks and no signature. It reports whether there was
// anything to commit.
func Commit(ctx context.Context, path, message string) (bool, error) {
	if _, err := git(ctx, path, "add", "--all"); err != nil {
		return false, err
	}
	if _, err := git(ctx, path, "diff", "--cached", "--quiet"); err == nil {
		return false, nil
	} else if !isExit(err, 1) {
		return false, err
	}
	_, err := git(ctx, path, "-c", "user.name="+IdentityName, "-c", "user.email="+IdentityEmail,
		"-c", "commit.gpgsign=false", "commit", "--quiet", "--no-verify", "--allow-empty-message", "-m", message)
	return err == nil, err
}

// Diff is what the branch checked out at path holds beyond base.
func Diff(ctx context.Context, path, base string) (Changes, error) {
	var c Changes
	out, err := git(ctx, path, "diff", "--no-renames", "--name-status", "-z", base, "HEAD")
	if err != nil {
		return c, err
	}
	fields := strings.Split(strings.TrimRight(out, "\x00"), "\x00")
	for i := 0; i+1 < len(fields); i += 2 {
		status, name := fields[i], fields[i+1]
		var list *[]string
		switch status {
		case "A":
			list = &c.Added
		case "D":
			list = &c.Deleted
		default: // M, T (type change)
			list = &c.Modified
		}
		if len(*list) >= MaxListed {
			c.Omitted++
			continue
		}
		*list = append(*list, name)
	}
	stat, err := git(ctx, path, "diff", "--shortstat", base, "HEAD")
	if err != nil {
		return c, err
	}
	c.Diffstat = strings.TrimSpace(stat)
	return c, nil
}

// Unchanged reports whether the worktree at w.Path is exactly its base:
// its branch has no commit beyond it and nothing is left uncommitted.
func Unchanged(ctx context.Context, w Info) (bool, error) {
	head, err := git(ctx, w.Path, "rev-parse", "HEAD")
	if err != nil {
		return false, err
	}
	if strings.TrimSpace(head) != w.Base {
		return false, nil
	}
	st, err := git(ctx, w.Path, "status", "--porcelain", "--untracked-files=all")
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(st) == "", nil
}

// Remove removes the worktree at w.Path (whatever it holds) and deletes
// its branch. Either being gone already is not an error.
func Remove(ctx context.Context, w Info) error {
	unlock, err := lockRepo(ctx, w.Repo)
	if err != nil {
		return err
	}
	defer unlock()
	return remove(ctx, w)
}

// remove is Remove with the repository locked.
func remove(ctx context.Context, w Info) error {
	var errs []error
	if _, err := os.Stat(w.Path); err == nil {
		if _, err := git(ctx, w.Repo, "worktree", "remove", "--force", "--force", w.Path); err != nil {
			// Not a registered worktree (a crash mid-add): the directory is ours.
			if rerr := os.RemoveAll(w.Path); rerr != nil {
				errs = append(errs, err, rerr)
			}
		}
	}
	if _, err := git(ctx, w.Repo, "worktree", "prune"); err != nil {
		errs = append(errs, err)
	}
	if w.Branch != "" {
		if _, err := git(ctx, w.Repo, "rev-parse", "--verify", "--quiet", "refs/heads/"+w.Branch); err == nil {
			if _, err := git(ctx, w.Repo, "branch", "--quiet", "-D", w.Branch); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// OwnCommits counts the commits on branch that no other branch, tag or
// remote-tracking ref reaches: the work a worktree's branch holds.
func OwnCommits(ctx context.Context, repo, branch string) (int, error) {
	if branch == "" {
		return 0, nil
	}
	out, err := git(ctx, repo, "rev-list", "--count", "refs/heads/"+branch, "--not", "--exclude="+branch, "--branches", "--tags", "--remotes")
	if err != nil {
		return 0, err
	}
	var n int
	_, err = fmt.Sscan(out, &n)
	return n, err
}

// Entry is one worktree of a repository as `git worktree list` reports it.
type Entry struct {
	Path     string
	Head     string
	Branch   string // without refs/heads/; empty when detached
	Prunable bool   // its directory is gone
}

// List lists the worktrees of the repository holding the work tree at
// repo, the main one first.
func List(ctx context.Context, repo string) ([]Entry, error) {
	out, err := git(ctx, repo, "worktree", "list", "--porcelain")
	if err != nil {
		return nil, err
	}
	var es []Entry
	for _, block := range strings.Split(strings.TrimSpace(out), "\n\n") {
		var e Entry
		for _, line := range strings.Split(block, "\n") {
			k, v, _ := strings.Cut(line, " ")
			switch k {
			case "worktree":
				e.Path = v
			case "HEAD":
				e.Head = v
			case "branch":
				e.Branch = strings.TrimPrefix(v, "refs/heads/")
			case "prunable":
				e.Prunable = true
			}
		}
		if e.Path != "" {
			es = append(es, e)
		}
	}
	return es, nil
}

// Retry is how a command that lost a race for one of git's locks is
// retried: up to Attempts tries, waiting First and then twice as long
// each time, at most Max.
var Retry = struct {
	Attempts   int
	First, Max time.Duration
}{Attempts: 12, First: 10 * time.Millisecond, Max: time.Second}

// contention reports whether git failed for something another git
// process holds or is half way through: a lock (index.lock, a ref's
// lock), or another worktree's entry it is still writing.
func contention(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	return strings.Contains(e.Stderr, ".lock") ||
		strings.Contains(e.Stderr, "cannot lock ref") ||
		strings.Contains(e.Stderr, "could not lock") ||
		strings.Contains(e.Stderr, "failed to read .git/worktrees/") ||
		strings.Contains(e.Stderr, "/worktrees/") && strings.Contains(e.Stderr, "failed to read")
}

// retried runs op until it succeeds, fails for another reason than
// contention, or Retry.Attempts are spent, with backoff.
func retried(ctx context.Context, op func() error) error {
	wait := Retry.First
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil || attempt >= Retry.Attempts || !contention(err) || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		wait = min(2*wait, Retry.Max)
	}
}

// git runs one git command in dir and returns its stdout, retrying on
// contention (see retried).
func git(ctx context.Context, dir string, args ...string) (out string, err error) {
	err = retried(ctx, func() error {
		out, err = gitOnce(ctx, dir, args...)
		return err
	})
	return out, err
}

// gitOnce runs one git command in dir, isolated from the caller's git
// environment (a server started from a hook inherits GIT_DIR and friends)
// and from the user's hooks.
func gitOnce(ctx context.Context, dir string, args ...string) (string, error) {
	full := append([]string{"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"}, args...)
	cmd := exec.CommandContext(ctx, "git", full...)
	cmd.Dir = dir
	cmd.Env = environ()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), &Error{Args: args, Stderr: strings.TrimSpace(stderr.String()), Err: err}
	}
	return stdout.String(), nil
}

// environ is the process environment without the variables that would
// point git at another repository, index or identity.
func environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY",
			"GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
			"GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE", "GIT_PREFIX":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "GIT_TERMINAL_PROMPT=0", "LC_ALL=C")
}

// Error is a failed git command.
type Error struct {
	Args   []string
	Stderr string
	Err    error
}

func (e *Error) Error() string {
	s := "git " + strings.Join(e.Args, " ") + ": " + e.Err.Error()
	if e.Stderr != "" {
		s += ": " + e.Stderr
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

func isExit(err error, code int) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.ExitCode() == code
}
