package main

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"github.com/mcp-subagent/mcp-subagent/daemon"
)

// detachEnv, set by the session that starts a daemon, makes the started
// process start the real daemon as its own child and exit at once: the
// daemon's parent is then init (or the nearest subreaper), not the
// session's relay. Clients such as opencode and Copilot CLI kill their MCP
// server's whole process tree, found by parent links, when they exit;
// a daemon still under the relay would die with it, and with it every
// background child of every session. Setsid alone does not help: it
// changes the session and group, not the parent.
const detachEnv = "MCP_SUBAGENT_DETACH"

// detach does the double fork when this process was started with
// detachEnv; otherwise it returns at once. It passes the start report's
// descriptor (daemon.ReadyFDEnv) through at the same number, so the
// session hears "ready" from the daemon itself.
func detach() {
	if os.Getenv(detachEnv) != "1" {
		return
	}
	os.Unsetenv(detachEnv)
	err := startDetached()
	if err != nil {
		daemon.ReportReady("", err)
		os.Exit(1)
	}
	// Gone at once, so the daemon leaves the session's process tree before
	// the session relays: a client that kills its server's tree on exit
	// must not find the daemon still under this process. syscall.Exit, not
	// os.Exit: a race-built binary's os.Exit spends a second or more in the
	// race runtime's finalisation.
	syscall.Exit(0)
}

func startDetached() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Env = os.Environ()
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr // daemon.log
	if fd, err := strconv.Atoi(os.Getenv(daemon.ReadyFDEnv)); err == nil && fd >= 3 {
		cmd.ExtraFiles = make([]*os.File, fd-2) // nil entries are closed in the child
		cmd.ExtraFiles[fd-3] = os.NewFile(uintptr(fd), "ready")
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return errors.New("starting the detached daemon: " + err.Error())
	}
	return cmd.Process.Release() // not waited for: its parent becomes init
}
