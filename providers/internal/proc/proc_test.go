package proc

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/subreaper"
	"github.com/mcp-subagent/mcp-subagent/internal/subreaper/leaktest"
)

func TestMain(m *testing.M) {
	subreaper.Main()
	os.Exit(m.Run())
}

func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// escaper starts sh running script after 50 each of a setsid, a nohup and
// a double-forked sleep, all marked, and waits for its first line.
func escaper(t *testing.T, script string) (*Process, string) {
	t.Helper()
	mark := leaktest.Mark(t)
	p, err := Start(Spec{Path: "/bin/sh", Args: []string{"-c", leaktest.Escapes(50) + "; " + script},
		Env: []string{"PATH=/usr/bin:/bin", mark}, Grace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Supervised() {
		t.Fatal("not supervised in a binary that called subreaper.Main")
	}
	br := bufio.NewReader(p.Stdout)
	if l, err := br.ReadString('\n'); err != nil || l != "ready\n" {
		t.Fatalf("first line %q, %v", l, err)
	}
	return p, mark
}

func TestStopEndsEverythingTheProcessStarted(t *testing.T) {
	p, mark := escaper(t, "trap '' TERM; sleep 30 & echo ready; wait")
	t0 := time.Now()
	p.Stop()
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("Stop took %v", d)
	}
	// Stop returned: everything is reaped, no waiting needed.
	if live := leaktest.Live(mark); len(live) > 0 {
		t.Errorf("%d processes outlived Stop: %v", len(live), live)
	}
	p.Stop() // idempotent
}

func TestNothingOutlivesAProcessThatExits(t *testing.T) {
	p, mark := escaper(t, "echo ready; echo last words >&2; exit 3")
	// Its stdout ends though the escaped sleeps inherited it.
	if _, err := io.ReadAll(p.Stdout); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if live := leaktest.Live(mark); len(live) > 0 {
		t.Errorf("%d processes outlived the process: %v", len(live), live)
	}
	var ee interface{ ExitCode() int }
	if err := p.Wait(context.Background()); !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("exit = %v, want status 3", err)
	}
	if got := strings.TrimSpace(p.Stderr()); got != "last words" {
		t.Errorf("stderr = %q", got)
	}
}

func TestEnvironmentIsOnlyWhatIsGiven(t *testing.T) {
	t.Setenv("SERVER_SECRET", "leak")
	p, err := Start(Spec{Path: "/usr/bin/env", Env: []string{"ONLY=this"}})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(p.Stdout)
	if err := p.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "ONLY=this" {
		t.Errorf("environment = %q", got)
	}
}

func TestStderrTailIsBounded(t *testing.T) {
	p, err := Start(Spec{Path: "/bin/sh", Args: []string{"-c", "i=0; while [ $i -lt 200 ]; do echo line$i >&2; i=$((i+1)); done"}, StderrLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	_ = p.Wait(context.Background())
	got := p.Stderr()
	if len(got) > 64+len("…") || !strings.HasPrefix(got, "…") || !strings.Contains(got, "line199") {
		t.Errorf("stderr tail = %q", got)
	}
}

func TestWaitStopsOnCancel(t *testing.T) {
	p, err := Start(Spec{Path: "/bin/sleep", Args: []string{"30"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_ = p.Wait(ctx)
	if time.Since(t0) > 3*time.Second || !processGone(p.PID()) {
		t.Error("Wait did not stop the group on cancel")
	}
}
