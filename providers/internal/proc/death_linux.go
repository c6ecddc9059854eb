package proc

import "syscall"

// setDeathSignal asks the kernel to signal the process if the server dies
// without stopping it (kill -9): the last guard against an orphan. A
// supervisor gets SIGTERM, which it handles by ending the whole tree; an
// unsupervised agent gets SIGKILL (its own children are stopped with the
// group on every orderly path).
func setDeathSignal(a *syscall.SysProcAttr, supervised bool) {
	a.Pdeathsig = syscall.SIGKILL
	if supervised {
		a.Pdeathsig = syscall.SIGTERM
	}
}
