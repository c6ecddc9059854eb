// Package leaktest finds, for tests, the processes that outlived what
// started them: each test marks the processes it causes with an
// environment variable holding a fresh token (inherited by everything they
// start), and Live lists the processes still running with it.
package leaktest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Var is the marking environment variable.
const Var = "MCP_SUBAGENT_LEAKTEST"

// Mark returns a fresh "Var=token" to put in the environment of what a
// test starts. When the test ends, whatever still runs with it is killed,
// so a failing test leaks nothing into the next.
func Mark(t testing.TB) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	kv := Var + "=" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		for _, p := range Live(kv) {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	})
	return kv
}

// Live lists the processes that run with kv in their environment and are
// neither zombies nor already dying of SIGKILL. (A zombie's environment
// cannot be read, so it is not listed: it runs nothing.)
func Live(kv string) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	want := []byte(kv)
	var out []int
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + name + "/environ")
		if err != nil || !hasEntry(env, want) || dying(name) {
			continue
		}
		out = append(out, pid)
	}
	return out
}

func hasEntry(env, kv []byte) bool {
	for _, e := range bytes.Split(env, []byte{0}) {
		if bytes.Equal(e, kv) {
			return true
		}
	}
	return false
}

// dying reports a process that is a zombie, exiting, or has SIGKILL
// pending: it will not run again.
func dying(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return true // gone meanwhile
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			if strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X") {
				return true
			}
		case "SigPnd", "ShdPnd":
			if mask, err := strconv.ParseUint(v, 16, 64); err == nil && mask&(1<<(int(syscall.SIGKILL)-1)) != 0 {
				return true
			}
		}
	}
	return false
}

// Escapes is a shell script that starts n each of the background
// processes a process-group kill misses or that outlive their parent: a
// setsid one (its own session and group), a nohup one, and a double fork
// (an orphan at once), each a `sleep 1000`.
func Escapes(n int) string {
	return "i=0; while [ $i -lt " + strconv.Itoa(n) + " ]; do " +
		"setsid sleep 1000 & nohup sleep 1000 >/dev/null 2>&1 & (sleep 1000 &) & " +
		"i=$((i+1)); done"
}
