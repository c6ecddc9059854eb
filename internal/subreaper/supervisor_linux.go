package subreaper

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
)

const supported = true

// sweepEvery is how often the tree is swept again while it is being
// killed: a process forked after one sweep is caught by the next, and each
// sweep reads all of /proc, so not after every reap.
const sweepEvery = 50 * time.Millisecond

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER for prctl(2).
const prSetChildSubreaper = 36

func mainSupervisor() {
	if len(os.Args) < 5 || os.Args[1] != supervisorArg {
		return
	}
	grace, err := strconv.Atoi(os.Args[2])
	if err != nil || grace < 0 {
		fmt.Fprintf(os.Stderr, "mcp-subagent supervisor: bad grace %q\n", os.Args[2])
		syscall.Exit(2)
	}
	var policy *sandbox.Policy
	if os.Args[3] != "" {
		p, err := sandbox.Decode(os.Args[3])
		if err != nil {
			fmt.Fprintf(os.Stderr, "mcp-subagent supervisor: %v\n", err)
			syscall.Exit(126)
		}
		policy = &p
	}
	// syscall.Exit, not os.Exit: nothing of the binary's own exit hooks
	// (a race-enabled test binary sleeps a second in them) runs here.
	syscall.Exit(supervise(time.Duration(grace)*time.Millisecond, policy, os.Args[4], os.Args[5:]))
}

type exit struct {
	pid int
	ws  syscall.WaitStatus
}

func supervise(grace time.Duration, policy *sandbox.Policy, path string, args []string) int {
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0, 0, 0, 0); e != 0 {
		fmt.Fprintf(os.Stderr, "mcp-subagent supervisor: cannot become a child subreaper: %v\n", e)
		return 126
	}
	// One OS thread starts the command and signals its tree: below
	// Landlock ABI 8 each thread of a confined process is given a domain of
	// its own, and a signal from one thread's domain to a process forked in
	// another's is refused as leaving the domain. Never unlocked.
	runtime.LockOSThread()
	// Confined before the command starts, and the supervisor with it: what
	// the command starts inherits the domain, and the supervisor, inside
	// the same one, can still signal it. Never a silent unconfined run.
	if policy != nil {
		// Not dumpable: only this thread is confined (see sandbox.Apply),
		// and the command, in the same Landlock domain as this thread,
		// could otherwise open /proc/<supervisor>/task/<this thread>/mem
		// for writing (same uid, same domain) and so run code in the
		// address space the unconfined threads execute. A process that
		// is not dumpable can be ptrace-accessed only with
		// CAP_SYS_PTRACE, which the command has not. exec makes the
		// command dumpable again: this holds for the supervisor alone.
		if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
			fmt.Fprintf(os.Stderr, "mcp-subagent supervisor: prctl(PR_SET_DUMPABLE): %v\n", err)
			return 126
		}
		if _, err := sandbox.Apply(*policy); err != nil {
			fmt.Fprintf(os.Stderr, "mcp-subagent supervisor: %v\n", err)
			return 126
		}
	}
	// Before the command starts, so that a stop sent right away is seen.
	stops := make(chan os.Signal, 4)
	signal.Notify(stops, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)

	pid, err := syscall.ForkExec(path, append([]string{path}, args...), &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		// The command leads a process group of its own, as it would
		// unsupervised; if the supervisor is killed outright, the command
		// goes with it.
		Sys: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "mcp-subagent supervisor: cannot start %s: %v\n", path, err)
		return 127
	}
	// Let go of the standard streams: the command's readers see EOF once
	// the tree is gone, not once the supervisor is.
	if null, err := syscall.Open("/dev/null", syscall.O_RDWR|syscall.O_CLOEXEC, 0); err == nil {
		for fd := 0; fd <= 2; fd++ {
			_ = syscall.Dup3(null, fd, 0)
		}
		_ = syscall.Close(null)
	}

	// The reaper: every child, the command and each re-parented orphan.
	// It ends at ECHILD: a subreaper without children has no descendants.
	reaped := make(chan exit)
	go func() {
		defer close(reaped)
		for {
			var ws syscall.WaitStatus
			p, err := syscall.Wait4(-1, &ws, 0, nil)
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				return
			}
			reaped <- exit{p, ws}
		}
	}()

	me := os.Getpid()
	var status syscall.WaitStatus
	var graceOver, sweep <-chan time.Time
	stopping, killing := false, false
	kill := func() {
		signalTree(me, syscall.SIGKILL)
		sweep = time.After(sweepEvery)
	}
	for {
		select {
		case e, ok := <-reaped:
			if !ok {
				return exitCode(status)
			}
			if e.pid == pid {
				status = e.ws
				if !killing { // what the command left behind dies now
					killing = true
					kill()
				}
			}
		case <-stops:
			if !stopping {
				stopping = true
				signalTree(me, syscall.SIGTERM)
				graceOver = time.After(grace)
			}
		case <-graceOver:
			if !killing {
				killing = true
				kill()
			}
		case <-sweep:
			// Again, for what was started since the last sweep or was
			// re-parented here from a process the last one killed.
			kill()
		}
	}
}

// exitCode ends the supervisor as the command ended: with its exit status,
// or by the signal that killed it (else 128 + the signal, as a shell
// reports it, when the signal cannot be raised here).
func exitCode(ws syscall.WaitStatus) int {
	if !ws.Signaled() {
		return ws.ExitStatus()
	}
	sig := ws.Signal()
	signal.Reset(sig)
	// On this thread, so that it is delivered before tgkill returns.
	runtime.LockOSThread()
	_ = syscall.Tgkill(os.Getpid(), syscall.Gettid(), sig)
	return 128 + int(sig)
}

// signalTree sends sig to every descendant of root.
func signalTree(root int, sig syscall.Signal) {
	for _, p := range descendants(root) {
		_ = syscall.Kill(p, sig)
	}
}

// descendants lists the processes below root, from each process's parent
// in /proc/PID/stat.
func descendants(root int) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	kids := map[int][]int{}
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if ppid, ok := parentOf(name); ok {
			kids[ppid] = append(kids[ppid], pid)
		}
	}
	var out []int
	queue := kids[root]
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		out = append(out, p)
		queue = append(queue, kids[p]...)
	}
	return out
}

// parentOf reads the parent pid from /proc/PID/stat: "pid (comm) state
// ppid ...", where comm may hold spaces and parentheses.
func parentOf(pid string) (int, bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}
