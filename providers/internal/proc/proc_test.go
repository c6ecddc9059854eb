package proc

import (
	"context"
	"errors"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"
)

func groupGone(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

func TestStopEndsTheWholeGroup(t *testing.T) {
	p, err := Start(Spec{Path: "/bin/sh", Args: []string{"-c", "trap '' TERM; sleep 30 & sleep 30; wait"}, Grace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	t0 := time.Now()
	p.Stop()
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("Stop took %v", d)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !groupGone(p.PID()) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !groupGone(p.PID()) {
		t.Error("a member of the process group outlived Stop")
	}
	p.Stop() // idempotent
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
	if time.Since(t0) > 3*time.Second || !groupGone(p.PID()) {
		t.Error("Wait did not stop the group on cancel")
	}
}
