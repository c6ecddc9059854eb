//go:build linux

package subreaper

import (
	"os"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
)

// BenchmarkShellTrue is run_shell's `true` under the supervisor,
// unconfined and confined (workspace-write, the default), in one run: the
// difference is what the sandbox costs each command (the policy encoded,
// the read rules listed, capabilities dropped, Landlock and seccomp
// applied, the temp dir made and removed).
//
//	go test -run '^$' -bench ShellTrue -benchtime 200x ./internal/subreaper
func BenchmarkShellTrue(b *testing.B) {
	if abi, reason := sandbox.ABI(); abi < 1 {
		b.Skip("no Landlock: " + reason)
	}
	ws := b.TempDir()
	env := []string{"PATH=/usr/bin:/bin"}
	b.Run("unconfined", func(b *testing.B) {
		for b.Loop() {
			cmd, _ := Command(time.Second, "/bin/sh", "-c", "true")
			cmd.Dir, cmd.Env = ws, env
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("confined", func(b *testing.B) {
		for b.Loop() {
			tmp, err := os.MkdirTemp("", "bench-shell-")
			if err != nil {
				b.Fatal(err)
			}
			pol := sandbox.Policy{Mode: sandbox.WorkspaceWrite, Workspace: ws, TempDir: tmp} // the real home: / listed, as in production
			cmd, err := Confined(time.Second, pol, "/bin/sh", "-c", "true")
			if err != nil {
				b.Fatal(err)
			}
			cmd.Dir, cmd.Env = ws, pol.Env(env)
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
			os.RemoveAll(tmp)
		}
	})
}
