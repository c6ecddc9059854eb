package claudecode

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/gittest"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/manager/worktrees"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// A Claude Code child asked for isolation runs inside its own worktree:
// the worktree is its cwd, what it writes is committed on its branch and
// reported, and the parent's checkout shows nothing.
func TestAClaudeCodeChildWorksInsideItsWorktree(t *testing.T) {
	f := newFake(t)
	repo := gittest.Init(t, f.cwd, nil)
	m := manager.New(manager.Options{Store: memstore.New(), Worktrees: filepath.Join(t.TempDir(), "worktrees")})
	if err := m.Register(New(f.options(t))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	})
	_, res := startAndWait(t, m, f, seam.StartRequest{Prompt: "SCENARIO: write", Isolation: worktrees.Isolation})
	if res.StopReason != "completed" || res.Worktree == nil {
		t.Fatalf("result %+v", res)
	}
	if c := f.lastCall(t); c.Cwd != res.Worktree.Path {
		t.Fatalf("claude ran in %q, want its worktree %q", c.Cwd, res.Worktree.Path)
	}
	if res.Changes == nil || !slices.Equal(res.Changes.Added, []string{"claude.txt"}) {
		t.Fatalf("changes %+v", res.Changes)
	}
	gittest.Committed(t, repo, res.Worktree.Branch, "claude.txt", "by claude\n")
}
