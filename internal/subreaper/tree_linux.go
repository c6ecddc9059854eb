package subreaper

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
)

// maxDepth bounds the walk up the process tree (a loop cannot happen in a
// consistent /proc, but reads are not one snapshot).
const maxDepth = 4096

// InConfinedTree reports whether process pid belongs to the tree of a
// confined command: a *ConfinedTreeError when one of its ancestors (or the
// process itself) is a confined supervisor, nil when none is, and another
// error when its ancestry cannot be read (the caller should then refuse:
// a process that is gone cannot be vouched for).
//
// It walks the parent chain in /proc/PID/stat. That is sound while the
// supervisor lives: it is a child subreaper, so every descendant, even one
// that double-forked or called setsid, has it among its ancestors; and it
// lives until its whole tree is gone. A supervisor is one tracked here
// ([Track]) or, for those of other mcp-subagent processes, one whose
// command line is a supervisor's with a confined policy. Below Landlock
// ABI 9 this is what keeps a confined command off a pathname socket it
// can reach (the daemon's): the kernel lets it connect, and the server
// refuses it at accept.
func InConfinedTree(pid int) error {
	self := os.Getpid()
	// An ancestor that exits between two reads moves its children to the
	// supervisor (still an ancestor); read the chain again.
	for range 8 {
		err, again := walkUp(pid, self)
		if !again {
			return err
		}
	}
	return fmt.Errorf("process %d: its ancestry kept changing while it was read", pid)
}

func walkUp(pid, self int) (err error, again bool) {
	p := pid
	for range maxDepth {
		if p <= 1 || p == self {
			return nil, false
		}
		if tracked(p) || foreignSupervisor(p) {
			return &ConfinedTreeError{PID: pid, Supervisor: p}, false
		}
		ppid, err := readParent(p)
		if err != nil {
			if p == pid {
				return fmt.Errorf("process %d: %w", pid, err), false
			}
			return nil, true
		}
		p = ppid
	}
	return fmt.Errorf("process %d: its ancestry is deeper than %d", pid, maxDepth), false
}

// readParent is parentOf with the error.
func readParent(pid int) (int, error) {
	ppid, ok := parentOf(strconv.Itoa(pid))
	if !ok {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
			return 0, errors.Unwrap(err)
		}
		return 0, errors.New("cannot read its parent from /proc")
	}
	return ppid, nil
}

// foreignSupervisor reports whether pid's command line is a supervisor's
// (see supervisorCommand) with a confined policy: a supervisor this
// process did not start.
func foreignSupervisor(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	argv := bytes.Split(b, []byte{0})
	if len(argv) < 4 || string(argv[1]) != supervisorArg || len(argv[3]) == 0 {
		return false
	}
	p, err := sandbox.Decode(string(argv[3]))
	return err == nil && p.Mode.Confined()
}
