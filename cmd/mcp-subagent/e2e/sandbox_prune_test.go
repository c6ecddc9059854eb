//go:build e2e && linux

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
)

// A pruned child's tool caches under <data>/sandbox/cache/<id> go with it
// (retention here; `prune` takes the same path), and a child that is not
// pruned keeps its own.
func TestAPrunedChildsSandboxCachesAreRemoved(t *testing.T) {
	if abi, reason := sandbox.ABI(); abi < 1 {
		t.Skip("needs Landlock for a confined run_shell: " + reason)
	}
	hold := newGate()
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		if _, ok := req.LastToolResult(); !ok {
			// Every child runs one command first: that makes its cache.
			return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "run_shell", Arguments: `{"command":"mkdir -p \"$GOCACHE/sub\" && echo x > \"$GOCACHE/sub/f\" && chmod -w \"$GOCACHE/sub\""}`}}}
		}
		if strings.Contains(req.LastUserText(), "hold on") {
			hold.wait(30 * time.Second)
		}
		return fakeopenai.Reply{Text: "done"}
	})
	defer fake.Close()
	defer hold.open()
	// No go on PATH: the server would build its Go cache seed once a
	// child has a cache, minutes of CPU this test does not need.
	s := start(t, fake, serverOpts{config: `{"shell": "workspace-write", "retention": {"settled_older_than": "1s", "every": "1s"}}`,
		env: []string{"PATH=/usr/bin:/bin"}})
	ctx := testCtx(t)
	cache := func(id string) string { return filepath.Join(s.dataDir, "sandbox", "cache", id) }
	running, _ := startBackground(t, s, ctx, "long work", "hold on")
	done, _ := startBackground(t, s, ctx, "short work", "be quick")
	if !waitFor(10*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(cache(running.AgentID), "go-build", "sub", "f"))
		return err == nil
	}) {
		t.Fatalf("the running child's command made no cache in %s:\n%s", cache(running.AgentID), s.stderr)
	}
	if !waitFor(15*time.Second, func() bool { _, ok := statuses(t, s, ctx)[done.AgentID]; return !ok }) {
		t.Fatalf("retention did not prune the settled child: %v", statuses(t, s, ctx))
	}
	if !waitFor(5*time.Second, func() bool { _, err := os.Stat(cache(done.AgentID)); return os.IsNotExist(err) }) {
		t.Errorf("the pruned child's caches are still in %s:\n%s", cache(done.AgentID), s.stderr)
	}
	// Logged only for a cache that was there: the child's command made it.
	logged := false
	for _, line := range strings.Split(s.stderr.String(), "\n") {
		logged = logged || strings.Contains(line, "removed a pruned child's tool caches") && strings.Contains(line, done.AgentID)
	}
	if !logged {
		t.Errorf("the daemon did not log removing %s's caches:\n%s", done.AgentID, s.stderr)
	}
	if _, err := os.Stat(cache(running.AgentID)); err != nil {
		t.Errorf("the running child's caches went too: %v", err)
	}
}
