//go:build linux

package subreaper

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/mcp-subagent/mcp-subagent/internal/subreaper/leaktest"
)

func TestMain(m *testing.M) {
	Main()
	os.Exit(m.Run())
}

// start runs script with /bin/sh under a supervisor, marked, with stdout
// our own pipe, and returns the command and stdout's read end.
func start(t *testing.T, grace time.Duration, mark, script string) (*exec.Cmd, *os.File) {
	t.Helper()
	cmd, ok := Command(grace, "/bin/sh", "-c", script)
	if !ok {
		t.Fatal("not supervised in a binary that called Main")
	}
	cmd.Env = []string{"PATH=/usr/bin:/bin", mark}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { r.Close() })
	return cmd, r
}

// readAll reads r to EOF, failing the test if EOF does not come.
func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r)
		got <- b
	}()
	select {
	case b := <-got:
		return string(b)
	case <-time.After(20 * time.Second):
		t.Fatal("stdout did not end: something still holds it")
		return ""
	}
}

func TestNothingTheCommandStartedOutlivesItsExit(t *testing.T) {
	mark := leaktest.Mark(t)
	cmd, out := start(t, time.Second, mark, leaktest.Escapes(50)+"; echo started; exit 3")
	// The setsid and double-forked sleeps hold stdout too: it ends only
	// because they are gone.
	if got := readAll(t, out); got != "started\n" {
		t.Errorf("stdout = %q", got)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("exit = %v, want the command's exit status 3", err)
	}
	// Wait returned: the supervisor reaped the whole tree before exiting.
	if live := leaktest.Live(mark); len(live) > 0 {
		t.Errorf("%d of 150 background processes outlived the command: %v", len(live), live)
	}
}

func TestAStopEndsTheTreeAndWhatIgnoresSIGTERMAfterTheGrace(t *testing.T) {
	mark := leaktest.Mark(t)
	script := leaktest.Escapes(50) + "; trap '' TERM; sleep 1000 & echo ready; wait"
	cmd, out := start(t, 200*time.Millisecond, mark, script)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	// The double forks' sleeps start a moment after their subshells.
	for deadline := time.Now().Add(10 * time.Second); len(leaktest.Live(mark)) < 152; {
		if time.Now().After(deadline) {
			t.Fatalf("%d processes running, want the shell, its sleep and 150 more", len(leaktest.Live(mark)))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("exit = %v, want the shell killed", err)
	}
	if ws := ee.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("status = %v, want killed by SIGKILL (the shell ignored SIGTERM)", ws)
	}
	if live := leaktest.Live(mark); len(live) > 0 {
		t.Errorf("%d processes outlived the stop: %v", len(live), live)
	}
}

func TestTheCommandsExitStatusAndSignalPassThrough(t *testing.T) {
	tests := []struct {
		script string
		check  func(syscall.WaitStatus) bool
	}{
		{"exit 0", func(ws syscall.WaitStatus) bool { return ws.Exited() && ws.ExitStatus() == 0 }},
		{"exit 42", func(ws syscall.WaitStatus) bool { return ws.Exited() && ws.ExitStatus() == 42 }},
		{"kill -KILL $$", func(ws syscall.WaitStatus) bool { return ws.Signaled() && ws.Signal() == syscall.SIGKILL }},
		{"kill -TERM $$", func(ws syscall.WaitStatus) bool { return ws.Signaled() && ws.Signal() == syscall.SIGTERM }},
	}
	for _, tt := range tests {
		t.Run(tt.script, func(t *testing.T) {
			cmd, out := start(t, time.Second, leaktest.Mark(t), tt.script)
			readAll(t, out)
			_ = cmd.Wait()
			if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); !tt.check(ws) {
				t.Errorf("status = %v (%s)", ws, cmd.ProcessState)
			}
		})
	}
}

func TestTheCommandGetsTheEnvironmentDirectoryAndStreams(t *testing.T) {
	dir := t.TempDir()
	mark := leaktest.Mark(t)
	c, ok := Command(time.Second, "sh", "-c", "read x; echo \"$x $(pwd)\"; env")
	if !ok {
		t.Fatal("not supervised")
	}
	c.Dir = dir
	c.Env = []string{"PATH=/usr/bin:/bin", mark}
	c.Stdin = strings.NewReader("hello\n")
	b, err := c.Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "hello " + dir + "\n"
	if !strings.HasPrefix(string(b), want) {
		t.Fatalf("output = %q, want it to start %q", b, want)
	}
	// Only what was given, and what sh itself sets.
	for _, kv := range strings.Split(strings.TrimSpace(strings.TrimPrefix(string(b), want)), "\n") {
		name, _, _ := strings.Cut(kv, "=")
		if kv != "PATH=/usr/bin:/bin" && kv != mark && name != "PWD" && name != "SHLVL" && name != "_" && name != "OLDPWD" {
			t.Errorf("the command's environment has %q", kv)
		}
	}
}

func TestAMissingCommandFailsAtStart(t *testing.T) {
	cmd, _ := Command(time.Second, "no-such-command-here")
	if err := cmd.Start(); !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("Start = %v, want not found", err)
	}
}

// The supervisor is the subreaper, never the process that starts it: the
// server's own orphans (and their exit statuses) stay out of it.
func TestTheCallerIsNotMadeASubreaper(t *testing.T) {
	cmd, _ := Command(time.Second, "/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	var v int32
	const prGetChildSubreaper = 37
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prGetChildSubreaper, uintptr(unsafe.Pointer(&v)), 0, 0, 0, 0); e != 0 {
		t.Fatal(e)
	}
	if v != 0 {
		t.Error("the process that started a supervised command is a subreaper")
	}
}
