package proc

import "syscall"

// setDeathSignal asks the kernel to kill the agent if the server dies
// without stopping it (kill -9): the last guard against an orphan. (It
// reaches the agent itself; its own children are stopped with the group on
// every orderly path.)
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
