//go:build realcli

package codex

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/gittest"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/manager/worktrees"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// The real CLI, asked for isolation, runs with its worktree as its working
// directory: the environment context it sends the model names the
// worktree, not the parent's checkout.
func TestRealCodexWorksInsideItsWorktree(t *testing.T) {
	bin := findCodex(t)
	f, api := realFixture(t, bin, func(o *manager.Options) { o.Worktrees = filepath.Join(t.TempDir(), "worktrees") })
	repo := gittest.Init(t, f.cwd, nil)
	_, res := f.start("hello from a worktree", func(r *seam.StartRequest) { r.Isolation = worktrees.Isolation })
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
