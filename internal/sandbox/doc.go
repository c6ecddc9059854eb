// Package sandbox confines the commands a child runs (its shell and
// everything the shell starts). [Apply] confines the current process, which
// is meant to be the per-run supervisor of internal/subreaper: the command
// and every descendant inherit the confinement, and the supervisor, in the
// same domain, can still signal and reap them.
//
// In the confined modes (read-only, workspace-write), on Linux:
//
//   - No capabilities: the bounding set and every capability set are
//     emptied, and no new privileges can be gained (set-user-ID binaries,
//     file capabilities), so a server run as root gives its commands a
//     root uid without root's powers. All of this, Landlock and seccomp
//     apply to the calling thread, which starts the commands (see Apply).
//   - Landlock (one ruleset, the newest preset, best effort): reads
//     everywhere except the server user's home directory, where only the
//     workspace, [Toolchains] and the read roots are readable, and except
//     /root, /etc/shadow, /etc/gshadow, /etc/ssh, /etc/sudoers and /dev
//     (only /dev/null, zero, full, tty, random, urandom, fd and pts);
//     writes only in the workspace (workspace-write), the per-command temp
//     dir, the cache dir and the write roots. From ABI 4, TCP bind and
//     connect are refused unless the policy grants the network; from ABI 6,
//     signals to processes outside the domain and connections to abstract
//     unix sockets made outside it are refused; from ABI 9, connections to
//     pathname unix sockets outside the writable trees; from ABI 10, UDP.
//   - seccomp: socket and socketpair fail with EPERM
//     for any family but AF_UNIX (with the network also AF_INET, AF_INET6
//     and AF_NETLINK), and so do io_uring, ptrace, process_vm_readv and
//     writev, bpf, perf_event_open, userfaultfd, the key calls, module and
//     kexec calls, unshare, setns and clone with namespace flags; clone3
//     fails with ENOSYS (libc falls back to clone, whose flags are
//     checked); calls of another architecture's ABI (x86-64's int 0x80)
//     fail with ENOSYS.
//
// Caveats: Landlock only restricts what it handles. Below ABI 9 a command
// can connect to a pathname unix socket anywhere it can reach (the daemon
// refuses it on its own socket: subreaper.InConfinedTree); below ABI 6 it
// can signal the user's other processes. Metadata changes (chmod, chown, utimes) of files the user owns
// are not file-system rights Landlock handles: a command can change the
// mode of a file it cannot write. A tree reachable through a bind mount of
// the home directory elsewhere is readable there. Directory listings of /
// and of the home's ancestors fail (only their entries are allowed). As
// root, root-owned files outside the excluded ones stay readable by owner.
//
// [ABI] reports the kernel's Landlock ABI; the environment variable ABIEnv
// can lower it for tests.
package sandbox

// ABIEnv, set to a number below the kernel's Landlock ABI, makes [ABI]
// report that number instead: 0 simulates a kernel without Landlock.
const ABIEnv = "MCP_SUBAGENT_LANDLOCK_ABI"
