package worktree_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/gittest"
	"github.com/mcp-subagent/mcp-subagent/worktree"
)

// A child writes files in its worktree; the server then runs git there at
// the turn's end (Commit, then Diff, as the manager does), when it settles
// (Unchanged) and when it removes it (Remove). Each probe plants what a
// child could write and a command that would create a marker file, and
// checks that none of the server's git runs it: then it runs the plain
// git a user would run in that directory on the same files and checks
// the marker appears, so a probe that plants nothing runnable cannot pass
// for a blocked one.
type gitProbe struct {
	name string
	// plant writes the child's files into the worktree wt (and, for what
	// the user configured, into the repository repo). marker is the
	// file the planted commands create.
	plant func(t *testing.T, repo, wt, marker string)
	// refused: the server must refuse the worktree (its .git file was
	// rewritten) rather than commit.
	refused bool
	// plain runs what the user would, in wt, which must run the planted
	// command (or, with no marker, do the damage checked by harmed).
	plain func(t *testing.T, repo, wt string)
	// harmed reports the damage the probe aims at, besides the marker.
	harmed func(t *testing.T, repo, mainHead string) bool
}

// touch is a shell command creating marker; a filter's form also copies
// its input through.
func touch(marker string) string       { return "touch " + marker }
func touchFilter(marker string) string { return "touch " + marker + "; cat" }

// writeFiles writes name -> content under dir the way write_file does:
// regular files (mode 0644, never executable), parent directories made.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(body), 0o644))
	}
}

// plantGitDir writes a git directory .evil into wt with the given config
// (and extra files), files only, and points wt/.git at it.
func plantGitDir(t *testing.T, wt, config string, extra map[string]string) {
	t.Helper()
	files := map[string]string{
		".evil/HEAD":             "ref: refs/heads/evil\n",
		".evil/objects/.keep":    "",
		".evil/refs/heads/.keep": "",
		".evil/config":           "[core]\n\trepositoryformatversion = 0\n\tbare = false\n" + config,
		".git":                   "gitdir: .evil\n",
	}
	for k, v := range extra {
		files[k] = v
	}
	writeFiles(t, wt, files)
}

// plainGit runs git as a user would in dir: discovering the repository,
// with hooks and all configuration; only an identity is given.
func plainGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=u", "-c", "user.email=u@example.com"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	t.Logf("plain git %v: %v\n%s", args, err, out)
	return string(out)
}

func plainAddCommit(t *testing.T, _, wt string) {
	plainGit(t, wt, "add", "--all")
	plainGit(t, wt, "commit", "-m", "plain")
}

var gitProbes = []gitProbe{
	{
		name: "pointer to a planted git dir with a filter",
		plant: func(t *testing.T, _, wt, marker string) {
			plantGitDir(t, wt, "[filter \"evil\"]\n\tclean = "+touchFilter(marker)+"\n", nil)
			writeFiles(t, wt, map[string]string{".gitattributes": "* filter=evil\n", "a.txt": "a\n"})
		},
		refused: true,
		plain:   plainAddCommit,
	},
	{
		name: "pointer replaced by a symbolic link to a planted git dir",
		plant: func(t *testing.T, _, wt, marker string) {
			plantGitDir(t, wt, "[filter \"evil\"]\n\tclean = "+touchFilter(marker)+"\n", nil)
			must(t, os.Remove(filepath.Join(wt, ".git")))
			must(t, os.Symlink(".evil", filepath.Join(wt, ".git")))
			writeFiles(t, wt, map[string]string{".gitattributes": "* filter=evil\n", "a.txt": "a\n"})
		},
		refused: true,
		plain:   plainAddCommit,
	},
	{
		name: "pointer to a planted git dir whose filter comes through include.path",
		plant: func(t *testing.T, _, wt, marker string) {
			plantGitDir(t, wt, "[include]\n\tpath = evil.inc\n", map[string]string{
				".evil/evil.inc": "[filter \"evil\"]\n\tclean = " + touchFilter(marker) + "\n\tsmudge = " + touchFilter(marker) + "\n",
			})
			writeFiles(t, wt, map[string]string{".gitattributes": "* filter=evil\n", "a.txt": "a\n"})
		},
		refused: true,
		plain:   plainAddCommit,
	},
	{
		name: "pointer to a planted git dir with core.fsmonitor",
		plant: func(t *testing.T, _, wt, marker string) {
			plantGitDir(t, wt, "[core]\n\tfsmonitor = "+touch(marker)+"\n", nil)
			writeFiles(t, wt, map[string]string{"a.txt": "a\n"})
		},
		refused: true,
		plain: func(t *testing.T, repo, wt string) {
			plainAddCommit(t, repo, wt)
			plainGit(t, wt, "status")
		},
	},
	{
		// Hooks must be executable, which write_file cannot make; an
		// external agent's own tools or a shell can.
		name: "pointer to a planted git dir with core.hooksPath and hooks",
		plant: func(t *testing.T, _, wt, marker string) {
			plantGitDir(t, wt, "[core]\n\thooksPath = "+filepath.Join(wt, "myhooks")+"\n", nil)
			hook := "#!/bin/sh\n" + touch(marker) + "\n"
			for _, p := range []string{"myhooks/pre-commit", "myhooks/post-commit", ".evil/hooks/pre-commit", ".evil/hooks/post-commit"} {
				must(t, os.MkdirAll(filepath.Dir(filepath.Join(wt, p)), 0o755))
				must(t, os.WriteFile(filepath.Join(wt, p), []byte(hook), 0o755))
			}
			writeFiles(t, wt, map[string]string{"a.txt": "a\n"})
		},
		refused: true,
		plain:   plainAddCommit,
	},
	{
		name: "pointer to a planted git dir with diff.external and textconv",
		plant: func(t *testing.T, _, wt, marker string) {
			plantGitDir(t, wt, "[diff]\n\texternal = "+touch(marker)+"\n[diff \"evil\"]\n\ttextconv = "+touchFilter(marker)+"\n", nil)
			writeFiles(t, wt, map[string]string{".gitattributes": "* diff=evil\n", "a.txt": "a\n"})
		},
		refused: true,
		plain: func(t *testing.T, repo, wt string) {
			plainAddCommit(t, repo, wt)
			writeFiles(t, wt, map[string]string{"a.txt": "b\n"})
			plainGit(t, wt, "diff")
		},
	},
	{
		name: "pointer to the main checkout's git dir",
		plant: func(t *testing.T, repo, wt, _ string) {
			writeFiles(t, wt, map[string]string{".git": "gitdir: " + filepath.Join(repo, ".git") + "\n", "a.txt": "a\n"})
		},
		refused: true,
		plain:   plainAddCommit,
		harmed: func(t *testing.T, repo, mainHead string) bool {
			return strings.TrimSpace(gittest.Git(t, repo, "rev-parse", "refs/heads/main")) != mainHead
		},
	},
	{
		// The pointer is intact; the child's .gitattributes names drivers
		// the user's own configuration defines (as Git LFS's does),
		// directly and through an include.
		name: "the user's filter, textconv and external diff named by the child's .gitattributes",
		plant: func(t *testing.T, repo, wt, marker string) {
			inc := filepath.Join(t.TempDir(), "inc")
			must(t, os.WriteFile(inc, []byte("[filter \"inc\"]\n\tclean = "+touchFilter(marker)+"\n\tsmudge = "+touchFilter(marker)+"\n"), 0o644))
			gittest.Git(t, repo, "config", "filter.user.clean", touchFilter(marker))
			gittest.Git(t, repo, "config", "filter.user.smudge", touchFilter(marker))
			gittest.Git(t, repo, "config", "filter.user.required", "true")
			gittest.Git(t, repo, "config", "filter.proc.process", touch(marker))
			gittest.Git(t, repo, "config", "include.path", inc)
			gittest.Git(t, repo, "config", "diff.external", touch(marker))
			gittest.Git(t, repo, "config", "diff.user.textconv", touchFilter(marker))
			writeFiles(t, wt, map[string]string{
				".gitattributes": "*.a filter=user diff=user\n*.b filter=inc\n*.c filter=proc\n",
				"x.a":            "a\n", "x.b": "b\n", "x.c": "c\n", "README": "changed\n",
			})
		},
		plain: func(t *testing.T, repo, wt string) {
			writeFiles(t, wt, map[string]string{"y.a": "a\n"})
			plainAddCommit(t, repo, wt)
			plainGit(t, wt, "diff", "HEAD~", "HEAD")
		},
	},
}

func TestTheServersGitRunsNothingAChildPlanted(t *testing.T) {
	for _, p := range gitProbes {
		t.Run(p.name, func(t *testing.T) {
			ctx := context.Background()
			repo := gittest.Repo(t)
			mainHead := strings.TrimSpace(gittest.Git(t, repo, "rev-parse", "refs/heads/main"))
			w, err := worktree.Create(ctx, repo, filepath.Join(t.TempDir(), "wt", "agent-p"), "subagent/agent-p")
			must(t, err)
			marker := filepath.Join(t.TempDir(), "marker")
			p.plant(t, repo, w.Path, marker)

			// The server: the turn's end, settlement.
			ok, err := worktree.Commit(ctx, w, "turn")
			if p.refused {
				if !errors.Is(err, worktree.ErrPointer) {
					t.Errorf("Commit = %v, %v; want ErrPointer", ok, err)
				}
			} else if err != nil || !ok {
				t.Errorf("Commit = %v, %v; want a commit", ok, err)
			}
			c, err := worktree.Diff(ctx, w)
			if p.refused != (err != nil) {
				t.Errorf("Diff = %+v, %v", c, err)
			}
			if !p.refused && !strings.Contains(strings.Join(c.Added, " "), "x.a") {
				t.Errorf("Diff = %+v; want x.a added", c)
			}
			if _, err := worktree.Unchanged(ctx, w); p.refused != (err != nil) {
				t.Errorf("Unchanged: %v", err)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatalf("the server's git ran the planted command")
			}
			if p.harmed != nil && p.harmed(t, repo, mainHead) {
				t.Fatalf("the server's git did the planted damage")
			}
			if got := strings.TrimSpace(gittest.Git(t, repo, "rev-parse", "refs/heads/main")); got != mainHead {
				t.Fatalf("the user's branch moved to %s", got)
			}
			if st := gittest.Status(t, repo); st != "" {
				t.Fatalf("the main checkout changed:\n%s", st)
			}
			if !p.refused {
				// Recreated from its branch, whose .gitattributes are the
				// child's: the checkout smudges nothing.
				must(t, os.RemoveAll(w.Path))
				if again, err := worktree.Ensure(ctx, w); err != nil || !again {
					t.Fatalf("Ensure = %v, %v", again, err)
				}
				if _, err := os.Stat(marker); err == nil {
					t.Fatalf("recreating the worktree ran the planted command")
				}
			}

			// The proof: plain git on the same files runs it.
			p.plain(t, repo, w.Path)
			_, err = os.Stat(marker)
			if p.harmed != nil {
				if !p.harmed(t, repo, mainHead) {
					t.Fatalf("the probe is broken: plain git did no damage")
				}
			} else if err != nil {
				t.Fatalf("the probe is broken: plain git did not run the planted command: %v", err)
			}

			// Removal runs nothing either.
			_ = os.Remove(marker)
			must(t, worktree.Remove(ctx, w))
			if _, err := os.Stat(marker); err == nil {
				t.Fatalf("Remove ran the planted command")
			}
			if _, err := os.Stat(w.Path); !os.IsNotExist(err) {
				t.Fatalf("the worktree is still there: %v", err)
			}
		})
	}
}

// TestUnchangedDoesNotRunGitInASubmodule: git looks into a checked out
// submodule by running itself there, with the submodule's configuration,
// which the child wrote. The server's settlement check does not; it keeps
// the worktree (an uncommitted edit in the submodule is not lost), and
// plain git status runs the submodule's planted core.fsmonitor.
func TestUnchangedDoesNotRunGitInASubmodule(t *testing.T) {
	ctx := context.Background()
	sub := gittest.Init(t, t.TempDir(), map[string]string{"s.txt": "s\n"})
	subHead := strings.TrimSpace(gittest.Git(t, sub, "rev-parse", "HEAD"))
	repo := gittest.Repo(t)
	gittest.Git(t, repo, "update-index", "--add", "--cacheinfo", "160000,"+subHead+",sub")
	gittest.Git(t, repo, "commit", "--quiet", "-m", "a submodule")
	w, err := worktree.Create(ctx, repo, filepath.Join(t.TempDir(), "wt", "agent-s"), "subagent/agent-s")
	must(t, err)
	if same, err := worktree.Unchanged(ctx, w); err != nil || !same {
		t.Fatalf("a fresh worktree with an empty submodule: Unchanged = %v, %v", same, err)
	}

	// The child checks the submodule out, edits it and plants a monitor.
	marker := filepath.Join(t.TempDir(), "marker")
	must(t, os.Remove(filepath.Join(w.Path, "sub")))
	if out, err := exec.Command("cp", "-a", sub, filepath.Join(w.Path, "sub")).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	gittest.Git(t, filepath.Join(w.Path, "sub"), "config", "core.fsmonitor", touch(marker))
	writeFiles(t, w.Path, map[string]string{"sub/s.txt": "edited\n"})

	same, err := worktree.Unchanged(ctx, w)
	if err != nil || same {
		t.Errorf("Unchanged = %v, %v; want false (the submodule may hold edits)", same, err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("Unchanged ran the submodule's core.fsmonitor")
	}
	plainGit(t, w.Path, "status")
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the probe is broken: plain git status did not run the submodule's monitor: %v", err)
	}
}

// TestAWorktreeIsMadeFromAChildsWorktreeOnlyWhileItsGitFileIsIntact: a
// child in a worktree may start an isolated child of its own; git then
// finds the repository through the first child's .git file, so a
// rewritten one is refused before git runs there.
func TestAWorktreeIsMadeFromAChildsWorktreeOnlyWhileItsGitFileIsIntact(t *testing.T) {
	ctx := context.Background()
	repo := gittest.Repo(t)
	root := t.TempDir()
	w, err := worktree.Create(ctx, repo, filepath.Join(root, "agent-1"), "subagent/agent-1")
	must(t, err)
	if top, _, err := worktree.Locate(ctx, filepath.Join(w.Path, "pkg")); err != nil || top != w.Path {
		t.Fatalf("Locate in an intact worktree = %q, %v", top, err)
	}
	w2, err := worktree.Create(ctx, w.Path, filepath.Join(root, "agent-2"), "subagent/agent-2")
	must(t, err)
	must(t, worktree.Remove(ctx, w2))

	// A planted git dir that even names the worktree back.
	plantGitDir(t, w.Path, "", map[string]string{".evil/gitdir": filepath.Join(w.Path, ".git") + "\n"})
	if _, _, err := worktree.Locate(ctx, w.Path); !errors.Is(err, worktree.ErrPointer) {
		t.Errorf("Locate in a worktree pointing at a planted git dir: %v, want ErrPointer", err)
	}
	if _, err := worktree.Create(ctx, w.Path, filepath.Join(root, "agent-3"), "subagent/agent-3"); !errors.Is(err, worktree.ErrPointer) {
		t.Errorf("Create from a worktree pointing at a planted git dir: %v, want ErrPointer", err)
	}
	if _, err := os.Stat(filepath.Join(root, "agent-3")); !os.IsNotExist(err) {
		t.Errorf("a worktree was made: %v", err)
	}
	// The probe: git itself takes the planted dir for the repository.
	if got := strings.TrimSpace(plainGit(t, w.Path, "rev-parse", "--absolute-git-dir")); got != filepath.Join(w.Path, ".evil") {
		t.Fatalf("the probe is broken: plain git uses %q", got)
	}
}
