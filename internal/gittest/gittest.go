// Package gittest makes temporary git repositories for tests. The
// identity of a test's commits is given with -c on each command, never
// through the user's or the global git configuration.
package gittest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Git runs git in dir and returns its combined output; a failure fails the
// test.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false",
		"-c", "core.hooksPath=/dev/null"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
	return string(out)
}

// Init makes dir a repository on branch main with one commit holding files
// (name -> content; names may have directories), and returns dir with its
// symbolic links resolved, as git reports it.
func Init(t testing.TB, dir string, files map[string]string) string {
	t.Helper()
	Git(t, dir, "init", "--quiet", "-b", "main")
	if len(files) == 0 {
		files = map[string]string{"README": "hello\n"}
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	Git(t, dir, "add", ".")
	Git(t, dir, "commit", "--quiet", "-m", "init")
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	return real
}

// Repo is a new temporary repository with one commit holding README and
// pkg/keep.
func Repo(t testing.TB) string {
	t.Helper()
	return Init(t, t.TempDir(), map[string]string{"README": "hello\n", "pkg/keep": "keep\n"})
}

// Committed checks that branch holds file with content want, committed,
// and that the work tree at repo (the parent's checkout) is clean.
func Committed(t testing.TB, repo, branch, file, want string) {
	t.Helper()
	if got := Git(t, repo, "show", branch+":"+file); got != want {
		t.Errorf("branch %s holds %q in %s, want %q", branch, got, file, want)
	}
	if st := Status(t, repo); st != "" {
		t.Errorf("the checkout at %s changed:\n%s", repo, st)
	}
}

// Status is the work tree's `git status --porcelain` with untracked files:
// empty when it is clean.
func Status(t testing.TB, dir string) string {
	t.Helper()
	return Git(t, dir, "status", "--porcelain", "--untracked-files=all")
}
