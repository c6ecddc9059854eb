package claudecode

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// keepOpen returns a duplicate of a process's stdout read end. os/exec's
// Wait, which proc runs as soon as the process starts, closes the read end
// it made the moment the process exits — before the reader has drained
// the lines still in the pipe (the result line, typically). The duplicate
// stays open until the reader has read to EOF, and Close on it still
// interrupts a pending read (it shares the original's non-blocking mode, so
// it is on the runtime poller).
func keepOpen(r io.Reader) (*os.File, error) {
	f, ok := r.(*os.File)
	if !ok {
		return nil, errors.New("stdout is not a pipe file")
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	nfd := -1
	var dupErr error
	err = rc.Control(func(fd uintptr) {
		// ForkLock: no process may be forked between the dup and setting
		// close-on-exec, or it would inherit our end of the pipe.
		syscall.ForkLock.RLock()
		defer syscall.ForkLock.RUnlock()
		nfd, dupErr = syscall.Dup(int(fd))
		if dupErr == nil {
			syscall.CloseOnExec(nfd)
		}
	})
	if err == nil {
		err = dupErr
	}
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(nfd), "claude-stdout"), nil
}
