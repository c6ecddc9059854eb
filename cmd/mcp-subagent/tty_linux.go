package main

import (
	"os"
	"syscall"
	"unsafe"
)

// isTTY reports whether f is a terminal: a device that answers TCGETS,
// which /dev/null (also a character device) does not.
func isTTY(f *os.File) bool {
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}
