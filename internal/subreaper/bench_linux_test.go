//go:build linux

package subreaper

import (
	"os"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
)

// BenchmarkShellTrue is run_shell's `true` under the supervisor, unconfined
// and confined (workspace-write, the default, with the real home: / is
// listed as in production), in one run and interleaved, so that the load
// of the machine weighs on both alike. It reports the mean of each and the
// mean of the paired differences (added-ms/op): what the sandbox costs
// each command (the policy encoded, the read rules listed, capabilities
// dropped, Landlock and seccomp applied, the temp dir made and removed).
//
//	go test -run '^$' -bench ShellTrue -benchtime 300x ./internal/subreaper
func BenchmarkShellTrue(b *testing.B) {
	if abi, reason := sandbox.ABI(); abi < 1 {
		b.Skip("no Landlock: " + reason)
	}
	ws := b.TempDir()
	env := []string{"PATH=/usr/bin:/bin"}
	var plain, confined time.Duration
	n := 0
	for b.Loop() {
		start := time.Now()
		cmd, _ := Command(time.Second, "/bin/sh", "-c", "true")
		cmd.Dir, cmd.Env = ws, env
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		plain += time.Since(start)

		start = time.Now()
		tmp, err := os.MkdirTemp("", "bench-shell-")
		if err != nil {
			b.Fatal(err)
		}
		pol := sandbox.Policy{Mode: sandbox.WorkspaceWrite, Workspace: ws, TempDir: tmp}
		cmd, err = Confined(time.Second, pol, "/bin/sh", "-c", "true")
		if err != nil {
			b.Fatal(err)
		}
		cmd.Dir, cmd.Env = ws, pol.Env(env)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
		os.RemoveAll(tmp)
		confined += time.Since(start)
		n++
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(n) / 1e6 }
	b.ReportMetric(ms(plain), "unconfined-ms/op")
	b.ReportMetric(ms(confined), "confined-ms/op")
	b.ReportMetric(ms(confined-plain), "added-ms/op")
}
