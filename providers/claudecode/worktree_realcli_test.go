//go:build realcli

package claudecode

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/gittest"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/manager/worktrees"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

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
	_, res := startAndWait(t, m, &fake{cwd: repo}, seam.StartRequest{Prompt: "REAL:hello worktree-marker-7791", Isolation: worktrees.Isolation})
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
