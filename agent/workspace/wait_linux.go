package workspace

import (
	"syscall"
	"unsafe"
)

const pPID = 1 // P_PID for waitid(2)

// waitExited blocks until the child pid has exited, leaving it waitable
// (WNOWAIT): it stays a zombie, holding its pid and process group id,
// until cmd.Wait reaps it.
func waitExited(pid int) error {
	var info [128]byte // siginfo_t
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info[0])), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		switch e {
		case 0:
			return nil
		case syscall.EINTR:
			continue
		default:
			return e
		}
	}
}
