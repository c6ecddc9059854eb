//go:build linux

package subreaper

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
)

// BenchmarkShellCost is what the sandbox adds to a run_shell command, the
// way run_shell runs it (the supervisor re-executed, a temp dir made and
// removed, the policy's environment), for `true` and for `go test -count=1`
// of a generated module of 100 files with a warm build cache (shared by
// both sides: the comparison is of the confinement, not of the cache).
// Unconfined and confined (workspace-write with the real home) alternate
// in one run, each first in every other pair, so that the machine's load
// weighs on both alike; it reports
// each side's mean, the mean of the paired differences (added-ms/op) and
// their ratio.
//
//	go test -run '^$' -bench ShellCost -benchtime 20x ./internal/subreaper
func BenchmarkShellCost(b *testing.B) {
	if abi, reason := sandbox.ABI(); abi < 1 {
		b.Skip("no Landlock: " + reason)
	}
	b.Run("true", func(b *testing.B) { shellCost(b, b.TempDir(), nil, "true") })
	b.Run("go-test-100-files", func(b *testing.B) {
		gobin, err := exec.LookPath("go")
		if err != nil {
			b.Skip("no go on PATH")
		}
		ws, cache := b.TempDir(), b.TempDir()
		writeModule(b, ws, 100)
		env := []string{"PATH=" + filepath.Dir(gobin) + ":/usr/bin:/bin", "HOME=" + os.Getenv("HOME"),
			"GOFLAGS=", "GOTOOLCHAIN=local", "GOCACHE=" + filepath.Join(cache, "go-build")}
		warm := exec.Command(gobin, "test", "-count=1", "./...")
		warm.Dir, warm.Env = ws, append(env, "TMPDIR="+b.TempDir())
		if out, err := warm.CombinedOutput(); err != nil {
			b.Fatalf("warming the cache: %v\n%s", err, out)
		}
		shellCost(b, ws, env, "go test -count=1 ./... >/dev/null", cache)
	})
}

// shellCost runs line unconfined and confined alternately; cache, when
// given, is the confined side's CacheDir (the unconfined side's GOCACHE
// is set in env to the same).
func shellCost(b *testing.B, ws string, env []string, line string, cache ...string) {
	if env == nil {
		env = []string{"PATH=/usr/bin:/bin"}
	}
	runPlain := func() time.Duration {
		start := time.Now()
		tmp, err := os.MkdirTemp("", "bench-shell-")
		if err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		cmd, _ := Command(time.Second, "/bin/sh", "-c", line)
		cmd.Dir, cmd.Env = ws, append(env, "TMPDIR="+tmp)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("unconfined: %v: %s", err, out)
		}
		return time.Since(start)
	}
	runConfined := func() time.Duration {
		start := time.Now()
		tmp, err := os.MkdirTemp("", "bench-shell-")
		if err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		pol := sandbox.Policy{Mode: sandbox.WorkspaceWrite, Workspace: ws, TempDir: tmp}
		if len(cache) > 0 {
			pol.CacheDir = cache[0]
		}
		cmd, err := Confined(time.Second, pol, "/bin/sh", "-c", line)
		if err != nil {
			b.Fatal(err)
		}
		cmd.Dir, cmd.Env = ws, pol.Env(env)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("confined: %v: %s", err, out)
		}
		return time.Since(start)
	}
	var plain, confined time.Duration
	n := 0
	for b.Loop() {
		// Which side goes first alternates: the first of a pair can pay
		// for the second (page cache, CPU frequency), and that must not
		// count for either.
		if n%2 == 0 {
			plain += runPlain()
			confined += runConfined()
		} else {
			confined += runConfined()
			plain += runPlain()
		}
		n++
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(n) / 1e6 }
	b.ReportMetric(ms(plain), "unconfined-ms/op")
	b.ReportMetric(ms(confined), "confined-ms/op")
	b.ReportMetric(ms(confined-plain), "added-ms/op")
	b.ReportMetric(float64(confined)/float64(plain), "ratio")
}

// writeModule writes a module of files Go files (one package, a test).
func writeModule(b *testing.B, dir string, files int) {
	put := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	put("go.mod", "module example.com/hundred\n\ngo 1.22\n")
	var calls strings.Builder
	for i := range files - 1 {
		put(fmt.Sprintf("f%03d.go", i), fmt.Sprintf("package hundred\n\nfunc F%03d(x int) int { return x + %d }\n", i, i))
		fmt.Fprintf(&calls, "\tsum = F%03d(sum)\n", i)
	}
	put("sum_test.go", "package hundred\n\nimport \"testing\"\n\nfunc TestSum(t *testing.T) {\n\tsum := 0\n"+calls.String()+
		fmt.Sprintf("\tif sum != %d {\n\t\tt.Fatal(sum)\n\t}\n}\n", (files-1)*(files-2)/2))
}
