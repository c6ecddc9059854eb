// Package worktree owns the git operations behind a subagent's worktree
// isolation: finding the repository that holds a directory, creating a
// worktree on a new branch from the repository's HEAD, committing what a
// child changed at a turn's end, reporting the changes against the base,
// removing a worktree with its branch, and listing a repository's
// worktrees for reconciliation. It runs the git executable; it knows
// nothing of agents or MCP.
//
// Guarantees:
//
//   - The user's main checkout is never written to: every command runs in
//     the worktree itself, or is one of `git worktree add/remove/prune` and
//     `git branch -D subagent/...` on the repository, none of which touch
//     the main checkout's index or files.
//   - Commits use a fixed identity (Identity) given with -c, never the
//     user's; they run no hooks (core.hooksPath is /dev/null, --no-verify)
//     and are never signed (commit.gpgsign=false). Nothing is read from or
//     written to global git configuration beyond what git itself reads.
//   - Git in a child's worktree runs nothing the child wrote there. The
//     child can write every file of its work tree, the .git pointer file
//     included; it cannot write the repository's git directory. So git
//     runs with --git-dir (the entry under the recorded repository's
//     worktrees directory whose gitdir file names the worktree) and
//     --work-tree, never discovering the repository from the worktree; a
//     .git file that names anything else is ErrPointer and nothing runs
//     (removal deletes the directory without git). Configuration given
//     on every command turns off hooks and core.fsmonitor; every filter
//     driver the configuration defines is blanked, as a .gitattributes
//     file can name any of them (also at checkout: worktree add);
//     diffs run with --no-ext-diff and --no-textconv; status does not
//     look into submodules. Configuration inherited through the
//     environment as command-line configuration (GIT_CONFIG_PARAMETERS,
//     GIT_CONFIG_COUNT) and GIT_EXTERNAL_DIFF are dropped.
//     A work tree whose .git is a file (a child's own worktree, when it
//     starts an isolated child) must name a git directory outside it
//     that names it back, as git made it.
//   - Many children can create worktrees in one repository at once. Within
//     this process the commands that write .git/worktrees (add, remove,
//     prune) take a per-repository lock: git reads every worktree's entry
//     while adding one and fails on an entry another add has half written.
//     Across processes git's own locks arbitrate: a command that fails
//     because another holds a lock (index.lock, a ref's lock) or is half
//     way through a worktree entry is retried with backoff (see Retry).
//
// Changes are reported relative to the worktree's base (the commit it was
// created from), cumulatively over all turns: that is what a parent
// merges or cherry-picks.
//
// Caveats: Unchanged looks at what git tracks or would track: files
// .gitignore ignores (build output) do not make a worktree changed, and go
// with it when it is removed. A child that rewrites its own branch history (git reset, a
// rebase) is reported against the recorded base all the same; a worktree
// whose directory vanished is recreated by Ensure from its branch (or,
// when the branch is gone too, from the base).
package worktree
