package acp

import (
	"errors"
	"syscall"
)

// groupGone reports whether no process of the group pgid is left.
func groupGone(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}
