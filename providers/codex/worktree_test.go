package codex

import (
	"cmp"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/gittest"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/manager/worktrees"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// A Codex child asked for isolation runs inside its own worktree: the
// worktree is its working root, what it writes is committed on its branch
// and reported, and the parent's checkout shows nothing.
func TestACodexChildWorksInsideItsWorktree(t *testing.T) {
	f := newFixture(t, nil, func(o *manager.Options) { o.Worktrees = filepath.Join(t.TempDir(), "worktrees") })
	repo := gittest.Init(t, f.cwd, nil)
	_, res := f.start("WRITE a file", func(r *seam.StartRequest) { r.Isolation = worktrees.Isolation })
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
