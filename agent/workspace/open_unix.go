//go:build unix

package workspace

import (
	"os"
	"syscall"
)

// openReadFlags opens for reading without blocking on a FIFO or device;
// the caller checks the file is regular (or a directory) before reading.
const openReadFlags = os.O_RDONLY | syscall.O_NONBLOCK
