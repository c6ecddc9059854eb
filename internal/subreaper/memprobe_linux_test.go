//go:build linux

package subreaper

import (
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
)

// memProbe tries to open the memory of each thread of the command's
// parent, the supervisor, for writing (code written there would run in the
// supervisor's threads, which are not all confined) and for reading.
// Writing is refused by Landlock's file rules (nothing in /proc is
// writable); reading, and writing at a later ABI that handled /proc
// differently, by the supervisor not being dumpable.
const memProbe = `for t in /proc/$PPID/task/*; do
  if ( exec 3<>"$t/mem" ) 2>/dev/null; then echo "MEM-OPENED rw $t"; else echo "MEM-REFUSED rw $t"; fi
  if ( exec 3<"$t/mem" ) 2>/dev/null; then echo "MEM-OPENED ro $t"; else echo "MEM-REFUSED ro $t"; fi
done`

// A confined command cannot open its supervisor's memory, to write or
// read, through any of its threads (the confined one included); under an
// unconfined supervisor the same script can, so the probe works.
func TestAConfinedCommandCannotOpenItsSupervisorsMemory(t *testing.T) {
	if abi, reason := sandbox.ABI(); abi < 1 {
		t.Skip("needs Landlock: " + reason)
	}
	for _, confined := range []bool{true, false} {
		cmd := supervised(t, confined, memProbe)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("confined=%v: %v\n%s", confined, err, b)
		}
		out := string(b)
		threads := strings.Count(out, "MEM-")
		if threads < 2 {
			t.Fatalf("confined=%v: the supervisor's threads were not all probed:\n%s", confined, out)
		}
		if opened := strings.Contains(out, "MEM-OPENED"); opened == confined {
			t.Errorf("confined=%v: the supervisor's memory opened=%v:\n%s", confined, opened, out)
		}
		if !confined && strings.Contains(out, "MEM-REFUSED") {
			t.Errorf("unconfined, a thread's memory was refused: the probe is not sound:\n%s", out)
		}
	}
}
