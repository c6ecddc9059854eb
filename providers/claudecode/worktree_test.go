package claudecode

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/gittest"
	"github.com/mcp-subagent/mcp-subagent/manager"
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
	_, res := startAndWait(t, m, f, seam.StartRequest{Prompt: "SCENARIO: write", Isolation: manager.IsolationWorktree})
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

// The real CLI, asked for isolation, runs with its worktree as its working
// directory: the system prompt it sends names the worktree, not the
// parent's checkout.
func TestRealCLIWorksInsideItsWorktree(t *testing.T) {
	path := realClaude(t)
	api := newFakeAnthropic(t)
	repo := gittest.Init(t, t.TempDir(), nil)
	m := manager.New(manager.Options{Store: memstore.New(), Worktrees: filepath.Join(t.TempDir(), "worktrees")})
	if err := m.Register(New(realOptions(t, path, api.URL))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	})
	_, res := startAndWait(t, m, &fake{cwd: repo}, seam.StartRequest{Prompt: "REAL:hello worktree-marker-7791", Isolation: manager.IsolationWorktree})
	if res.StopReason != "completed" || res.Worktree == nil {
		t.Fatalf("%s %+v (%s)", res.StopReason, res.Worktree, res.Diagnostic)
	}
	reqs := api.find("worktree-marker-7791")
	if len(reqs) == 0 || !strings.Contains(reqs[0].raw, res.Worktree.Path) {
		t.Fatalf("the CLI's request does not name its worktree %s as its working directory", res.Worktree.Path)
	}
	if st := gittest.Status(t, repo); st != "" {
		t.Errorf("the parent's checkout changed:\n%s", st)
	}
}
