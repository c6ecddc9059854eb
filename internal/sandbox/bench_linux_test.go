package sandbox

import (
	"testing"

	"github.com/landlock-lsm/go-landlock/landlock"
	"golang.org/x/sys/unix"
)

// BenchmarkPrepare is the part of Apply that grows with the file system:
// listing / for the read rules and building the Landlock ruleset (one open
// and one landlock_add_rule per rule), plus assembling the seccomp filter;
// not enforced, so it can repeat in one process.
//
//	go test -run '^$' -bench Prepare ./internal/sandbox
func BenchmarkPrepare(b *testing.B) {
	if abi, reason := ABI(); abi < 1 {
		b.Skip("no Landlock: " + reason)
	}
	ws, tmp := b.TempDir(), b.TempDir()
	p := Policy{Mode: WorkspaceWrite, Workspace: ws, TempDir: tmp}
	for b.Loop() {
		rules, err := fsRules(p)
		if err != nil {
			b.Fatal(err)
		}
		fd, _, err := landlock.V11.BestEffort().NewRulesetFD(rules...)
		if err != nil {
			b.Fatal(err)
		}
		unix.Close(fd)
		pol := seccompPolicy(false)
		if _, err := pol.Assemble(); err != nil {
			b.Fatal(err)
		}
	}
}
