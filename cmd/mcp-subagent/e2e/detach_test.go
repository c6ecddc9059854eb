//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/daemon"
)

// parentOf is pid's parent pid, from /proc, or 0.
func parentOf(pid int) int {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// treeOf is pid and every process under it by parent links, the way a
// client that kills its MCP server's whole tree finds them.
func treeOf(pid int) []int {
	tree := []int{pid}
	for i := 0; i < len(tree); i++ {
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		for _, d := range dirs {
			p, _ := strconv.Atoi(filepath.Base(d))
			if parentOf(p) == tree[i] {
				tree = append(tree, p)
			}
		}
	}
	return tree
}

// The daemon a session starts is not in that session's process tree:
// a client that kills its MCP server's whole tree when it exits (opencode,
// Copilot CLI) ends the relay only, and the daemon serves on.
func TestTheDaemonLeavesTheStartingSessionsProcessTree(t *testing.T) {
	dataDir, ws := t.TempDir(), t.TempDir()
	t.Cleanup(func() { stopDaemon(t, dataDir) })
	r, err := startRaw(t, binary, nil, dataDir, ws)
	if err != nil {
		t.Fatal(err)
	}
	pid := daemonPID(dataDir)
	if pid == 0 || !alive(pid) {
		t.Fatalf("no daemon runs after the session started (pid %d)", pid)
	}
	relay := r.cmd.Process.Pid
	// The middle process of the double fork exits right after it started
	// the daemon (a race-built binary takes a second or so to exit).
	inTree := func() bool { return slices.Contains(treeOf(relay)[1:], pid) }
	if !waitFor(30*time.Second, func() bool { return !inTree() }) {
		t.Fatalf("the daemon (pid %d, parent %d) is in the relay's (pid %d) process tree %v", pid, parentOf(pid), relay, treeOf(relay))
	}
	tree := treeOf(relay)
	for _, p := range tree {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	if _, err := daemon.Status(testCtx(t), dataDir); err != nil || !alive(pid) {
		t.Fatalf("the daemon died with the session's tree: %v", err)
	}
}
