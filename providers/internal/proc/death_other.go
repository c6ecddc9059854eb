//go:build !linux

package proc

import "syscall"

func setDeathSignal(*syscall.SysProcAttr, bool) {}
