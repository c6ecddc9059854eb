package worktree_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/gittest"
	"github.com/mcp-subagent/mcp-subagent/worktree"
)

func TestLocateFindsTheTopAndTheSubdirectory(t *testing.T) {
	repo := gittest.Repo(t)
	top, rel, err := worktree.Locate(context.Background(), filepath.Join(repo, "pkg"))
	if err != nil || top != repo || rel != "pkg" {
		t.Fatalf("Locate = %q, %q, %v; want %q, pkg", top, rel, err, repo)
	}
	if _, _, err := worktree.Locate(context.Background(), t.TempDir()); !errors.Is(err, worktree.ErrNotRepo) {
		t.Fatalf("Locate outside a repository: %v, want ErrNotRepo", err)
	}
}

func TestAWorktreeCommitsReportsAndRemovesWithoutTouchingTheMainCheckout(t *testing.T) {
	ctx := context.Background()
	repo := gittest.Repo(t)
	path := filepath.Join(t.TempDir(), "wt", "agent-1")
	w, err := worktree.Create(ctx, repo, path, "subagent/agent-1")
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSpace(gittest.Git(t, repo, "rev-parse", "HEAD")); w.Base != want {
		t.Fatalf("base %s, want HEAD %s", w.Base, want)
	}
	if same, err := worktree.Unchanged(ctx, w); err != nil || !same {
		t.Fatalf("a fresh worktree: Unchanged = %v, %v", same, err)
	}
	if ok, err := worktree.Commit(ctx, w, "nothing"); err != nil || ok {
		t.Fatalf("Commit of nothing = %v, %v; want false", ok, err)
	}
	must(t, os.WriteFile(filepath.Join(path, "new.txt"), []byte("new\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(path, "README"), []byte("changed\n"), 0o644))
	must(t, os.Remove(filepath.Join(path, "pkg", "keep")))
	if ok, err := worktree.Commit(ctx, w, "turn 1"); err != nil || !ok {
		t.Fatalf("Commit = %v, %v; want true", ok, err)
	}
	c, err := worktree.Diff(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Added, []string{"new.txt"}) || !slices.Equal(c.Modified, []string{"README"}) ||
		!slices.Equal(c.Deleted, []string{"pkg/keep"}) || !strings.Contains(c.Diffstat, "3 files changed") {
		t.Fatalf("changes %+v", c)
	}
	if got := gittest.Git(t, path, "log", "-1", "--format=%an <%ae>"); strings.TrimSpace(got) != worktree.IdentityName+" <"+worktree.IdentityEmail+">" {
		t.Fatalf("commit author %q", got)
	}
	if st := gittest.Status(t, repo); st != "" {
		t.Fatalf("main checkout is not clean:\n%s", st)
	}
	if same, err := worktree.Unchanged(ctx, w); err != nil || same {
		t.Fatalf("a changed worktree: Unchanged = %v, %v", same, err)
	}
	es, err := worktree.List(ctx, repo)
	if err != nil || len(es) != 2 || es[1].Path != path || es[1].Branch != "subagent/agent-1" {
		t.Fatalf("List = %+v, %v", es, err)
	}

	// Removed by hand: Ensure recreates it on its branch, edit and all.
	must(t, os.RemoveAll(path))
	if again, err := worktree.Ensure(ctx, w); err != nil || !again {
		t.Fatalf("Ensure = %v, %v", again, err)
	}
	if b, err := os.ReadFile(filepath.Join(path, "new.txt")); err != nil || string(b) != "new\n" {
		t.Fatalf("recreated worktree lost its commit: %q, %v", b, err)
	}
	must(t, worktree.Remove(ctx, w))
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("worktree directory still there: %v", err)
	}
	if b := gittest.Git(t, repo, "branch", "--list", "subagent/*"); b != "" {
		t.Fatalf("branch left behind: %q", b)
	}
	// Branch gone too: Ensure starts again from the base.
	if again, err := worktree.Ensure(ctx, w); err != nil || !again {
		t.Fatalf("Ensure without a branch = %v, %v", again, err)
	}
	if same, err := worktree.Unchanged(ctx, w); err != nil || !same {
		t.Fatalf("recreated from base: Unchanged = %v, %v", same, err)
	}
}

func TestCreateInARepositoryWithoutCommitsLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	gittest.Git(t, dir, "init", "--quiet")
	path := filepath.Join(t.TempDir(), "agent-x")
	if _, err := worktree.Create(context.Background(), dir, path, "subagent/agent-x"); err == nil {
		t.Fatal("Create in an empty repository succeeded")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("directory left behind: %v", err)
	}
}

func TestTwentyWorktreesCreatedAtOnceAllSucceed(t *testing.T) {
	ctx := context.Background()
	repo := gittest.Repo(t)
	root := t.TempDir()
	const n = 20
	var wg sync.WaitGroup
	errs := make([]error, n)
	ws := make([]worktree.Info, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("agent-%02d", i)
			ws[i], errs[i] = worktree.Create(ctx, repo, filepath.Join(root, id), "subagent/"+id)
			if errs[i] == nil {
				errs[i] = os.WriteFile(filepath.Join(ws[i].Path, "f"), []byte(id), 0o644)
			}
			if errs[i] == nil {
				_, errs[i] = worktree.Commit(ctx, ws[i], id)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("child %d: %v", i, err)
		}
	}
	es, err := worktree.List(ctx, repo)
	if err != nil || len(es) != n+1 {
		t.Fatalf("List: %d entries, %v; want %d", len(es), err, n+1)
	}
	// Removing them at once too.
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = worktree.Remove(ctx, ws[i]) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("remove %d: %v", i, err)
		}
	}
	if b := gittest.Git(t, repo, "branch", "--list", "subagent/*"); b != "" {
		t.Fatalf("branches left behind: %q", b)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
