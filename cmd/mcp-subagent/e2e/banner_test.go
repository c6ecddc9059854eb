//go:build e2e && linux

package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// openPTY opens a pseudo-terminal pair: the master the test reads and
// types into, the slave serve gets as its terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatal("unlockpt:", e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatal("ptsname:", e)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// serve started by a person on a terminal says in one line what it is and
// how to register it, warns of a model without a key, and ends within a
// second of Ctrl-C typed at that terminal (the daemon goes on).
func TestServeOnATerminal(t *testing.T) {
	master, slave := openPTY(t)
	dataDir, ws := t.TempDir(), t.TempDir()
	t.Cleanup(func() { stopDaemon(t, dataDir) })
	cmd := exec.Command(binary, "serve", "--data-dir", dataDir)
	cmd.Env, cmd.Dir = serverEnv(nil, []string{"OPENAI_API_KEY="}), ws
	cmd.Stdin, cmd.Stderr = slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	lines := make(chan string, 16)
	go func() {
		r := bufio.NewReader(master)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				close(lines)
				return
			}
			lines <- l
		}
	}()
	var got []string
	deadline := time.After(30 * time.Second)
	for len(got) < 2 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the terminal closed after %q", got)
			}
			got = append(got, l)
		case <-deadline:
			t.Fatalf("serve printed %q on its terminal; want the banner and the key warning", got)
		}
	}
	if !strings.Contains(got[0], "speaks MCP on stdin/stdout") || !strings.Contains(got[0], "claude mcp add") || !strings.Contains(got[0], dataDir) {
		t.Errorf("banner = %q", got[0])
	}
	if !strings.Contains(got[1], "no API key: OPENAI_API_KEY") {
		t.Errorf("key warning = %q", got[1])
	}
	pid := daemonPID(dataDir)
	// A race-built binary alone takes a second or more to exit on a
	// loaded machine; the plain binary, under 100 ms.
	bound := time.Second
	if raceBuild {
		bound = 10 * time.Second
	}
	sent := time.Now()
	if _, err := master.Write([]byte{3}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	select {
	case <-exited:
		t.Logf("serve ended %v after Ctrl-C", time.Since(sent).Round(time.Millisecond))
	case <-time.After(bound):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("serve did not end within %v of Ctrl-C", bound)
	}
	if !alive(pid) {
		t.Errorf("the daemon (pid %d) ended with the session", pid)
	}
}
