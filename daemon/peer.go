package daemon

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// checkPeer runs check on the pid of the process at the other end of c
// (SO_PEERCRED: the process that connected). The pid is pinned with a
// pidfd (SO_PEERPIDFD, Linux 6.5) where the kernel has one: a peer that
// is no longer alive once check has looked at /proc is refused, so that
// check cannot have read another process that reused its pid. Without a
// pidfd, a peer that exits and whose pid is reused within the check (a
// pid wrap-around in microseconds) could be mistaken for another process.
func checkPeer(c *net.UnixConn, check func(pid int) error) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	pidfd := -1
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if cerr == nil {
			if p, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD); err == nil {
				pidfd = p
			}
		}
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("reading the peer's credentials: %w", cerr)
	}
	if pidfd >= 0 {
		defer unix.Close(pidfd)
	}
	if err := check(int(cred.Pid)); err != nil {
		return err
	}
	if pidfd >= 0 {
		if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("process %d exited before it could be checked", cred.Pid)
		}
	}
	return nil
}
