package worktree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	if err := checkLinked(top); err != nil {
		return "", "", err
	}
	return top, rel, nil
}

// Create makes a new worktree at path on a new branch from the current
// HEAD of the work tree at repo. path must not exist. It fails, leaving
// nothing behind, when the repository has no commit yet.
func Create(ctx context.Context, repo, path, branch string) (Info, error) {
	if err := checkLinked(repo); err != nil {
		return Info{}, err
	}
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
	// The checkout runs no filter: the one the user's configuration
	// defines for .gitattributes of the base would smudge what the turn's
	// commit then adds back unfiltered.
	add := &runner{dir: repo}
	if add.config, err = add.noFilters(ctx); err != nil {
		return Info{}, err
	}
	err = retried(ctx, func() error {
		unlock, err := lockRepo(ctx, repo)
		if err != nil {
			return err
		}
		defer unlock()
		_, err = add.once(ctx, "worktree", "add", "--quiet", "-b", branch, path, base)
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
	dir, err := commonDir(ctx, repo)
	if err != nil {
		return nil, err
	}
	mu, _ := repoLocks.LoadOrStore(dir, new(sync.Mutex))
	mu.(*sync.Mutex).Lock()
	return mu.(*sync.Mutex).Unlock, nil
}

// commonDirs caches each repository's common git directory: asking git
// costs a process on every turn's end, and the answer stays while the
// directory does.
var commonDirs sync.Map // the work tree's top -> its common git directory

// commonDir is the common git directory of the work tree at repo.
func commonDir(ctx context.Context, repo string) (string, error) {
	if d, ok := commonDirs.Load(repo); ok {
		if fi, err := os.Stat(d.(string)); err == nil && fi.IsDir() {
			return d.(string), nil
		}
	}
	out, err := git(ctx, repo, "rev-parse", "--path-format=absolute", "--git-common-dir")
	if err != nil {
		return "", err
	}
	d := strings.TrimSpace(out)
	commonDirs.Store(repo, d)
	return d, nil
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
	// The branch's .gitattributes are the child's: check out with no
	// filter (see noFilters).
	add := &runner{dir: w.Repo}
	if add.config, err = add.noFilters(ctx); err != nil {
		return false, err
	}
	if _, err := git(ctx, w.Repo, "rev-parse", "--verify", "--quiet", "refs/heads/"+w.Branch); err == nil {
		_, err = add.run(ctx, "worktree", "add", "--quiet", w.Path, w.Branch)
		return err == nil, err
	}
	_, err = add.run(ctx, "worktree", "add", "--quiet", "-b", w.Branch, w.Path, w.Base)
	return err == nil, err
}

// Commit commits everything changed in the worktree w (added, modified,
// deleted; .gitignore is honoured) on its branch with the fixed identity,
// no hooks, no filters and no signature. It reports whether there was
// anything to commit. A worktree whose .git file no longer names its git
// directory is refused (ErrPointer): nothing is committed.
func Commit(ctx context.Context, w Info, message string) (bool, error) {
	g, err := open(ctx, w)
	if err != nil {
		return false, err
	}
	if _, err := g.run(ctx, "add", "--all"); err != nil {
		return false, err
	}
	if _, err := g.run(ctx, "diff", "--cached", "--quiet", "--no-ext-diff", "--no-textconv", "--ignore-submodules=all"); err == nil {
		return false, nil
	} else if !isExit(err, 1) {
		return false, err
	}
	_, err = g.run(ctx, "-c", "user.name="+IdentityName, "-c", "user.email="+IdentityEmail,
		"commit", "--quiet", "--no-verify", "--allow-empty-message", "-m", message)
	return err == nil, err
}

// Diff is what the worktree w's branch holds beyond its base.
func Diff(ctx context.Context, w Info) (Changes, error) {
	var c Changes
	g, err := open(ctx, w)
	if err != nil {
		return c, err
	}
	out, err := g.run(ctx, "diff", "--no-ext-diff", "--no-textconv", "--no-renames", "--name-status", "-z", w.Base, "HEAD")
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
	stat, err := g.run(ctx, "diff", "--no-ext-diff", "--no-textconv", "--shortstat", w.Base, "HEAD")
	if err != nil {
		return c, err
	}
	c.Diffstat = strings.TrimSpace(stat)
	return c, nil
}

// Unchanged reports whether the worktree at w.Path is exactly its base:
// its branch has no commit beyond it and nothing is left uncommitted.
func Unchanged(ctx context.Context, w Info) (bool, error) {
	g, err := open(ctx, w)
	if err != nil {
		return false, err
	}
	head, err := g.run(ctx, "rev-parse", "HEAD")
	if err != nil {
		return false, err
	}
	if strings.TrimSpace(head) != w.Base {
		return false, nil
	}
	// git would look into a submodule's work tree by running itself
	// there, with the configuration found there (the child's): it only
	// compares the submodule's HEAD ("dirty" is ignored), and a checked
	// out submodule, whose uncommitted edits it did not see, counts as a
	// change so that nothing in it is removed.
	st, err := g.run(ctx, "status", "--porcelain", "--untracked-files=all", "--ignore-submodules=dirty")
	if err != nil || strings.TrimSpace(st) != "" {
		return false, err
	}
	ls, err := g.run(ctx, "ls-files", "-z", "--stage")
	if err != nil {
		return false, err
	}
	for _, e := range strings.Split(ls, "\x00") {
		meta, name, ok := strings.Cut(e, "\t")
		if !ok || !strings.HasPrefix(meta, "160000 ") {
			continue
		}
		if _, err := os.Lstat(filepath.Join(w.Path, name, ".git")); err == nil {
			return false, nil
		}
	}
	return true, nil
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
		// A worktree whose .git file was rewritten is not handed to git
		// at all: its directory is ours to delete, and the prune below
		// drops git's record of it.
		if _, _, perr := adminDir(ctx, w); perr != nil {
			if rerr := os.RemoveAll(w.Path); rerr != nil {
				errs = append(errs, rerr)
			}
		} else if _, err := git(ctx, w.Repo, "worktree", "remove", "--force", "--force", w.Path); err != nil {
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

// git runs one git command in dir (discovering the repository from it:
// only ever the user's own checkout) and returns its stdout, retrying on
// contention (see retried).
func git(ctx context.Context, dir string, args ...string) (out string, err error) {
	return gitCfg(ctx, dir, nil, args...)
}

// gitCfg is git with extra configuration (key, value pairs) after the
// fixed one.
func gitCfg(ctx context.Context, dir string, cfg []string, args ...string) (out string, err error) {
	g := &runner{dir: dir, config: cfg}
	return g.run(ctx, args...)
}

// runner runs git commands with one setting: a working directory, and,
// for a child's worktree, its git directory and work tree given
// explicitly so that git never reads the child-writable .git file.
type runner struct {
	dir      string
	gitDir   string   // --git-dir; "" to discover from dir
	workTree string   // --work-tree, with gitDir
	config   []string // key, value pairs after fixedConfig
}

// fixedConfig is given to every git command this package runs, as
// command-line configuration (which wins over every file): no hooks, no
// file-system monitor (both run commands named in configuration), no
// signing, no recursion into submodules (git would run itself there with
// whatever configuration the submodule holds).
var fixedConfig = []string{
	"core.hooksPath", "/dev/null",
	"core.fsmonitor", "false",
	"commit.gpgsign", "false",
	"submodule.recurse", "false",
}

// run runs one git command, retrying on contention (see retried).
func (g *runner) run(ctx context.Context, args ...string) (out string, err error) {
	err = retried(ctx, func() error {
		out, err = g.once(ctx, args...)
		return err
	})
	return out, err
}

// once runs one git command, isolated from the caller's git environment
// (a server started from a hook inherits GIT_DIR and friends).
// Configuration goes through GIT_CONFIG_COUNT, which takes the key and
// the value apart, so no name can be misparsed as `-c` would.
func (g *runner) once(ctx context.Context, args ...string) (string, error) {
	var full []string
	if g.gitDir != "" {
		full = append(full, "--git-dir="+g.gitDir, "--work-tree="+g.workTree)
	}
	cmd := exec.CommandContext(ctx, "git", append(full, args...)...)
	cmd.Dir = g.dir
	cmd.Env = environ(append(slices.Clip(fixedConfig), g.config...))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), &Error{Args: args, Stderr: strings.TrimSpace(stderr.String()), Err: err}
	}
	return stdout.String(), nil
}

// environ is the process environment without the variables that would
// point git at another repository, index, identity, external diff or
// configuration, plus cfg (key, value pairs) as command configuration.
func environ(cfg []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY",
			"GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
			"GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE", "GIT_PREFIX", "GIT_EXTERNAL_DIFF",
			"GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_ATTR_SOURCE":
			continue
		}
		if strings.HasPrefix(k, "GIT_CONFIG_KEY_") || strings.HasPrefix(k, "GIT_CONFIG_VALUE_") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "GIT_TERMINAL_PROMPT=0", "LC_ALL=C", fmt.Sprintf("GIT_CONFIG_COUNT=%d", len(cfg)/2))
	for i := 0; i+1 < len(cfg); i += 2 {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i/2, cfg[i]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i/2, cfg[i+1]))
	}
	return env
}

// noFilters is configuration that turns off every filter driver the
// configuration g reads defines: a .gitattributes file in the work tree
// (which a child writes) can name any of them for any path, and git runs
// a driver's clean command when it adds or compares a file and its smudge
// command when it checks one out. Only a driver defined in configuration
// runs anything, so blanking each defined one turns them all off. git
// config follows includes, so drivers defined through include.path are
// found too. (git 2.39 has no switch for this: --attr-source and
// GIT_ATTR_SOURCE came in 2.40, and info/attributes, which would win over
// the work tree's files, lives in the user's repository.) Without clean
// and smudge, content goes in and out as stored: a Git LFS pointer stays
// a pointer file in the worktree and is committed back as one.
func (g *runner) noFilters(ctx context.Context) ([]string, error) {
	out, err := g.run(ctx, "config", "--null", "--name-only", "--get-regexp", `^filter\.`)
	if isExit(err, 1) { // none defined
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var cfg []string
	seen := map[string]bool{}
	for _, key := range strings.Split(strings.TrimRight(out, "\x00"), "\x00") {
		i := strings.LastIndexByte(key, '.')
		if i <= len("filter.") || seen[key[:i]] {
			continue
		}
		name := key[:i] // filter.<driver>
		seen[name] = true
		// An empty command is no command; required=false, or git refuses
		// a required driver without one.
		cfg = append(cfg, name+".clean", "", name+".smudge", "", name+".process", "", name+".required", "false")
	}
	return cfg, nil
}

// ErrPointer marks a worktree whose .git file no longer names the git
// directory git made for it: something in the worktree (a child) rewrote
// it. The server runs no git there.
var ErrPointer = errors.New("the worktree's .git file does not name its git directory")

// open is the runner for the child's worktree w: its git directory (the
// entry under the repository's worktrees directory whose gitdir file
// names w.Path/.git, found from the recorded repository, never from the
// worktree), its work tree, and every filter turned off. It refuses a
// worktree whose .git file names anything else.
func open(ctx context.Context, w Info) (*runner, error) {
	admin, _, err := adminDir(ctx, w)
	if err != nil {
		return nil, err
	}
	g := &runner{dir: w.Path, gitDir: admin, workTree: w.Path}
	if g.config, err = g.noFilters(ctx); err != nil {
		return nil, err
	}
	return g, nil
}

// adminDir finds the git directory of the worktree w from its recorded
// repository, and checks that w.Path/.git still names it.
func adminDir(ctx context.Context, w Info) (admin, common string, err error) {
	if common, err = commonDir(ctx, w.Repo); err != nil {
		return "", "", err
	}
	pointer := filepath.Join(w.Path, ".git")
	names := func(dir string) bool {
		b, err := os.ReadFile(filepath.Join(dir, "gitdir"))
		if err != nil {
			return false
		}
		return sameFile(strings.TrimSpace(string(b)), pointer)
	}
	// git names the entry after the worktree's directory, with a number
	// added when that name is taken.
	if d := filepath.Join(common, "worktrees", filepath.Base(w.Path)); names(d) {
		admin = d
	} else {
		es, _ := os.ReadDir(filepath.Join(common, "worktrees"))
		for _, e := range es {
			if d := filepath.Join(common, "worktrees", e.Name()); e.IsDir() && names(d) {
				admin = d
				break
			}
		}
	}
	if admin == "" {
		return "", "", fmt.Errorf("%s is not a worktree of the repository at %s (no entry under %s names it); remove it or recreate it", w.Path, w.Repo, filepath.Join(common, "worktrees"))
	}
	target, err := readPointer(pointer)
	if err != nil {
		return "", "", err
	}
	if !sameFile(target, admin) {
		return "", "", fmt.Errorf("%w: %s names %q, not %s; something in the worktree rewrote it, so the server runs no git there "+
			"(restore it with: echo 'gitdir: %s' > %s)", ErrPointer, pointer, target, admin, admin, pointer)
	}
	return admin, common, nil
}

// readPointer reads a worktree's .git file: a regular file (not a link,
// not a directory) holding "gitdir: <path>", the path absolute or
// relative to the file's directory.
func readPointer(pointer string) (string, error) {
	fi, err := os.Lstat(pointer)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrPointer, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%w: %s is no longer a regular file (%v); something in the worktree replaced it, so the server runs no git there", ErrPointer, pointer, fi.Mode().Type())
	}
	b, err := os.ReadFile(pointer)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrPointer, err)
	}
	target, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir: ")
	if !ok || target == "" {
		return "", fmt.Errorf("%w: %s does not start with \"gitdir: \"", ErrPointer, pointer)
	}
	if !filepath.IsAbs(target) {
		target = filepath.Join(filepath.Dir(pointer), target)
	}
	return filepath.Clean(target), nil
}

// checkLinked checks the .git of the work tree top when it is a file (a
// linked worktree, such as a child's own when the child starts an
// isolated child of its own): the git directory it names must lie
// outside the work tree and name top/.git back, as git made it. A main
// checkout's .git directory is taken as it is.
func checkLinked(top string) error {
	pointer := filepath.Join(top, ".git")
	fi, err := os.Lstat(pointer)
	if err != nil || fi.IsDir() {
		return nil // git found the repository some other way; nothing to check
	}
	target, err := readPointer(pointer)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(target, "gitdir"))
	inside := target == top || strings.HasPrefix(target, top+string(filepath.Separator))
	if real, rerr := filepath.EvalSymlinks(target); rerr == nil {
		if rtop, terr := filepath.EvalSymlinks(top); terr == nil {
			inside = inside || real == rtop || strings.HasPrefix(real, rtop+string(filepath.Separator))
		}
	}
	if err != nil || inside || !sameFile(strings.TrimSpace(string(b)), pointer) {
		return fmt.Errorf("%w: %s names %q, which is not a worktree git directory that git made for it; the server runs no git there", ErrPointer, pointer, target)
	}
	return nil
}

// sameFile reports whether the paths a and b are one path, or name one
// existing file (through symbolic links, such as a temporary directory's).
func sameFile(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
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
