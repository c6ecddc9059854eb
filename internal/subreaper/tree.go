package subreaper

import (
	"fmt"
	"sync"
)

// The confined supervisors this process started and has not reaped yet.
// Process-wide like wired: whoever starts a confined command in this
// process (run_shell, an external agent) registers it, and the daemon's
// socket, in the same process, asks about its peers.
var confined = struct {
	sync.Mutex
	pids map[int]int // pid → registrations
}{pids: map[int]int{}}

// Track records that pid is a confined supervisor this process started
// (the Process of a started [Confined] command), until release is called.
// Call release after the command has been waited for: while the starter
// has not reaped the supervisor, its pid cannot be reused, so a tracked
// pid is always the supervisor.
func Track(pid int) (release func()) {
	confined.Lock()
	confined.pids[pid]++
	confined.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			confined.Lock()
			defer confined.Unlock()
			if confined.pids[pid]--; confined.pids[pid] <= 0 {
				delete(confined.pids, pid)
			}
		})
	}
}

func tracked(pid int) bool {
	confined.Lock()
	defer confined.Unlock()
	return confined.pids[pid] > 0
}

// ConfinedTreeError says a process belongs to a confined command's tree.
type ConfinedTreeError struct {
	PID        int // the process asked about
	Supervisor int // the confined supervisor above it
}

func (e *ConfinedTreeError) Error() string {
	return fmt.Sprintf("process %d runs inside a sandboxed command: its confined supervisor, pid %d, is among its ancestors", e.PID, e.Supervisor)
}
