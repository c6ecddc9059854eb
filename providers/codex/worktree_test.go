package codex

import (
	"cmp"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/gittest"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// A Codex child asked for isolation runs inside its own worktree: the
// worktree is its working root, what it writes is committed on its branch
// and reported, and the parent's checkout shows nothing.
func TestACodexChildWorksInsideItsWorktree(t *testing.T) {
	f := newFixture(t, nil, func(o *manager.Options) { o.Worktrees = filepath.Join(t.TempDir(), "worktrees") })
	repo := gittest.Init(t, f.cwd, nil)
	_, res := f.start("WRITE a file", func(r *seam.StartRequest) { r.Isolation = manager.IsolationWorktree })
	if res.StopReason != "completed" || res.Worktree == nil {
		t.Fatalf("result %+v", res)
	}
	c := f.calls()[0]
	if root := cmp.Or(c.Flags["-C"], c.Cwd); root != res.Worktree.Path {
		t.Fatalf("codex ran in %q, want its worktree %q", root, res.Worktree.Path)
	}
	if res.Changes == nil || !slices.Equal(res.Changes.Added, []string{"codex.txt"}) {
		t.Fatalf("changes %+v", res.Changes)
	}
	gittest.Committed(t, repo, res.Worktree.Branch, "codex.txt", "by codex\n")
}

// The real CLI, asked for isolation, runs with its worktree as its working
// directory: the environment context it sends the model names the
// worktree, not the parent's checkout.
func TestRealCodexWorksInsideItsWorktree(t *testing.T) {
	bin := findCodex(t)
	f, api := realFixture(t, bin, func(o *manager.Options) { o.Worktrees = filepath.Join(t.TempDir(), "worktrees") })
	repo := gittest.Init(t, f.cwd, nil)
	_, res := f.start("hello from a worktree", func(r *seam.StartRequest) { r.Isolation = manager.IsolationWorktree })
	if res.StopReason != "completed" || res.Worktree == nil {
		t.Fatalf("%s %+v (%s)", res.StopReason, res.Worktree, res.Diagnostic)
	}
	api.mu.Lock()
	body, _ := json.Marshal(api.bodies)
	api.mu.Unlock()
	if len(api.bodies) == 0 || !strings.Contains(string(body), res.Worktree.Path) {
		t.Fatalf("the CLI's requests do not name its worktree %s as its working directory", res.Worktree.Path)
	}
	if st := gittest.Status(t, repo); st != "" {
		t.Errorf("the parent's checkout changed:\n%s", st)
	}
}
