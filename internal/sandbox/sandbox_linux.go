package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// ABI returns the Landlock ABI version of the running kernel, 0 when it
// has none (not built in, or not enabled at boot), and why not. The
// environment variable ABIEnv can lower it (never raise it), so that tests
// can simulate an old kernel or one without Landlock.
func ABI() (int, string) {
	v, err := ll.LandlockGetABIVersion()
	if err != nil {
		v = 0
	}
	reason := ""
	if v == 0 {
		reason = "the kernel has no Landlock (not built in, or not in the lsm= boot parameter)"
		if err != nil {
			reason += ": " + err.Error()
		}
	}
	if s := os.Getenv(ABIEnv); s != "" {
		if o, err := strconv.Atoi(s); err == nil && o >= 0 && o < v {
			v = o
			if v == 0 {
				reason = ABIEnv + "=" + s + " simulates a kernel without Landlock"
			}
		}
	}
	return v, reason
}

// Apply confines the calling OS thread, and everything it starts
// afterwards, to p: capabilities dropped, no new privileges, then one
// Landlock ruleset (files, TCP, scopes) and a seccomp filter. It returns
// the Landlock ABI used. A confined mode on a kernel without Landlock is
// an error, never a silent unconfined run. Apply does nothing in the other
// modes. It cannot be undone: call it in a process made for the purpose
// (the subreaper supervisor), on a thread locked to its goroutine
// (runtime.LockOSThread) that then starts and signals the commands: a
// child process is a copy of the thread that forked it, so it and its
// descendants inherit the confinement.
//
// Only the calling thread is confined, at ABI 8 and above too (where the
// kernel could do all threads in one call): confining every thread of a
// Go process below ABI 8 takes a signal round to each thread per call
// (libpsx), four calls, which cost 10–50 ms per command on a loaded
// machine, most of the sandbox's cost. The other threads run only the
// runtime and the supervisor's own code, never the command's; a confined
// process cannot reach them: ptrace and process_vm_* are refused by the
// filter, Landlock refuses ptrace-like access from inside a domain to a
// thread outside it, and from ABI 6 signals. The calling thread is inside
// the command's domain, and shares its memory with the others: the
// caller must make the process not dumpable (PR_SET_DUMPABLE 0, as the
// supervisor does), so that the command cannot open its /proc/PID/mem
// (writing it is also refused by the file rules: /proc is read-only).
func Apply(p Policy) (int, error) {
	if err := p.Check(); err != nil {
		return 0, err
	}
	if !p.Mode.Confined() {
		return 0, nil
	}
	abi, reason := ABI()
	if abi < 1 {
		return 0, fmt.Errorf("cannot confine the command in mode %q: %s", p.Mode, reason)
	}
	rules, err := fsRules(p)
	if err != nil {
		return abi, err
	}
	if err := dropCapabilities(); err != nil {
		return abi, fmt.Errorf("dropping capabilities: %w", err)
	}
	cfg := landlock.V11
	if p.Network {
		cfg.HandledAccessNet = 0
	}
	// One ruleset: file system, network and scopes together (two rulesets,
	// the second without REFER, would make every rename across directories
	// fail with EXDEV). Best effort: what the kernel lacks is dropped, the
	// rest enforced; abi says how much that is.
	fd, flags, err := cfg.BestEffort().NewRulesetFD(rules...)
	if err != nil {
		return abi, fmt.Errorf("landlock (ABI %d): %w", abi, err)
	}
	if fd < 0 {
		return abi, fmt.Errorf("landlock (ABI %d): no ruleset to enforce", abi)
	}
	defer unix.Close(fd)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return abi, fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if err := ll.LandlockRestrictSelf(fd, flags); err != nil {
		return abi, fmt.Errorf("landlock (ABI %d): %w", abi, err)
	}
	if err := loadSeccomp(p.Network); err != nil {
		return abi, fmt.Errorf("seccomp: %w", err)
	}
	return abi, nil
}

// readExcluded are left unreadable besides the home directory: what a
// server run as root could otherwise read as the files' owner even without
// capabilities. /dev is handled by devRules.
var readExcluded = []string{"/root", "/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/ssh", "/etc/sudoers", "/etc/sudoers.d", "/dev"}

// fsRules is the Landlock rule set of p.
func fsRules(p Policy) ([]landlock.Rule, error) {
	home := homeOf(p)
	excluded := append([]string(nil), readExcluded...)
	if home != "" {
		excluded = append(excluded, home)
	}
	var dirs, files []string
	if err := readable("/", excluded, &dirs, &files); err != nil {
		return nil, err
	}
	var extra []string
	if home != "" {
		for _, t := range Toolchains {
			extra = append(extra, filepath.Join(home, t))
		}
	}
	extraDirs, extraFiles := splitFiles(append(extra, p.ReadRoots...))
	dirs, files = append(dirs, extraDirs...), append(files, extraFiles...)
	// Missing ones are skipped: what was listed may be gone by now.
	rules := []landlock.Rule{
		landlock.RODirs(dirs...).IgnoreIfMissing(),
		landlock.ROFiles(files...).IgnoreIfMissing(),
		// The devices a shell needs; not /dev itself: as root without
		// capabilities, the owner of /dev/sda could still read the disk.
		landlock.RWFiles("/dev/null", "/dev/zero", "/dev/full", "/dev/tty").IgnoreIfMissing(),
		landlock.ROFiles("/dev/random", "/dev/urandom").IgnoreIfMissing(),
		landlock.RODirs("/dev/fd", "/dev/pts").IgnoreIfMissing(),
	}
	writes := []string{p.TempDir}
	if p.CacheDir != "" {
		writes = append(writes, p.CacheDir)
	}
	if p.Mode == WorkspaceWrite {
		writes = append(writes, p.Workspace)
		writes = append(writes, p.WriteRoots...)
	} else {
		rules = append(rules, landlock.RODirs(p.Workspace))
	}
	wdirs, wfiles := splitFiles(writes)
	rules = append(rules, landlock.RWFiles(wfiles...))
	writes = wdirs
	// Refer: renames and links between the writable trees; resolve-unix
	// (ABI 9): the command's own sockets in them.
	rules = append(rules, landlock.RWDirs(writes...).WithRefer().WithResolveUnix())
	return rules, nil
}

// readable appends to dirs and files the entries of dir (absolute, clean)
// that hold none of excluded, descending into each one that is an ancestor
// of an excluded path: Landlock only allows, so "all but X" is everything
// beside X and beside each of its ancestors. Links are resolved, so that a
// link leading into an excluded tree grants nothing. The entries' types
// come from the directory listing: one stat only for a link.
func readable(dir string, excluded []string, dirs, files *[]string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("listing %s for the read rules: %w", dir, err)
	}
	entries, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return fmt.Errorf("listing %s for the read rules: %w", dir, err)
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		real, isDir := path, e.IsDir()
		if e.Type()&os.ModeSymlink != 0 {
			if real, err = filepath.EvalSymlinks(path); err != nil {
				continue // a dangling link grants nothing
			}
			fi, err := os.Stat(real)
			if err != nil {
				continue
			}
			isDir = fi.IsDir()
		}
		skip, descend := false, false
		for _, x := range excluded {
			if within(real, x) || within(path, x) {
				skip = true
				break
			}
			if within(x, path) {
				descend = true
			}
		}
		switch {
		case skip:
		case descend:
			if e.IsDir() {
				if err := readable(path, excluded, dirs, files); err != nil {
					return err
				}
			}
		case isDir:
			*dirs = append(*dirs, path)
		default:
			*files = append(*files, path)
		}
	}
	return nil
}

// splitFiles sorts paths into directories and other files (Landlock
// refuses directory rights on a file), leaving out the missing ones.
func splitFiles(paths []string) (dirs, files []string) {
	for _, p := range paths {
		fi, err := os.Stat(p)
		switch {
		case err != nil:
		case fi.IsDir():
			dirs = append(dirs, p)
		default:
			files = append(files, p)
		}
	}
	return dirs, files
}

// dropCapabilities empties the bounding set and every capability set of
// the calling thread (see Apply), so that nothing started from it (a root
// shell included) has or regains a capability.
func dropCapabilities() error {
	last := 40
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			last = n
		}
	}
	for c := 0; c <= last; c++ {
		// EINVAL: a capability this kernel does not know; EPERM: not ours
		// to drop (no CAP_SETPCAP), and then it is not in our sets either.
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil &&
			!errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.EPERM) {
			return fmt.Errorf("PR_CAPBSET_DROP %d: %w", c, err)
		}
	}
	// Empty permitted, effective and inheritable sets; the kernel keeps the
	// ambient set within permitted and inheritable (cap_capset), so it is
	// emptied too.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// Namespace flags of clone(2) (not CLONE_NEWTIME, 0x80: in clone(2) the
// low byte is the exit signal).
const cloneNewMask = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// refused are the syscalls that fail with EPERM whatever their arguments:
// the kernel's larger attack surface, and ways to act on other processes.
var refused = []string{
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"ptrace", "process_vm_readv", "process_vm_writev",
	"bpf", "perf_event_open", "userfaultfd",
	"keyctl", "add_key", "request_key",
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
	"unshare", "setns",
}

// seccompPolicy is the filter: the calls above refused, socket and
// socketpair only for AF_UNIX (and AF_INET, AF_INET6, AF_NETLINK with the
// network), clone without namespace flags, clone3 ENOSYS (its flags are
// behind a pointer, which seccomp cannot read; libc then falls back to
// clone, whose flags it can).
func seccompPolicy(network bool) seccomp.Policy {
	families := []uint64{unix.AF_UNIX}
	if network {
		// Netlink: glibc's getaddrinfo asks the kernel for the addresses.
		families = append(families, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK)
	}
	var notListed seccomp.ArgumentConditions
	for _, f := range families {
		notListed = append(notListed, seccomp.Condition{Argument: 0, Operation: seccomp.NotEqual, Value: f})
	}
	return seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: seccomp.ActionErrno, Names: refused},
			{Action: seccomp.ActionErrno, NamesWithCondtions: []seccomp.NameWithConditions{
				{Name: "socket", Conditions: notListed},
				{Name: "socketpair", Conditions: notListed},
				{Name: "clone", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: cloneNewMask}}},
			}},
			{Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS), Names: []string{"clone3"}},
		},
	}
}

// loadSeccomp installs the filter on the calling thread. The library's
// program lets calls of another architecture through (on x86-64, the
// 32-bit ABI through int 0x80 would skip every rule), so they are refused
// first, with ENOSYS.
func loadSeccomp(network bool) error {
	// Assembled when this binary was built, where it was (see
	// seccompFilters): assembling takes as long as the rest of the
	// preparation, for every command.
	filter := seccompFilters[network]
	if filter == nil {
		var err error
		if filter, err = assembleSeccomp(network); err != nil {
			return err
		}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	// No new privileges is set already (Landlock needed it). This thread
	// only, as Landlock (see Apply).
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return e
	}
	return nil
}

// assembleSeccomp is the filter's program for this architecture.
func assembleSeccomp(network bool) ([]unix.SockFilter, error) {
	pol := seccompPolicy(network)
	insts, err := pol.Assemble()
	if err != nil {
		return nil, err
	}
	native, err := arch.GetInfo("")
	if err != nil {
		return nil, err
	}
	prog := append([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(native.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionErrno) | uint32(unix.ENOSYS)},
	}, insts...)
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, err
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return filter, nil
}
