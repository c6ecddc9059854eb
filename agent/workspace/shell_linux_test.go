package workspace

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/subreaper/leaktest"
)

// run_shell commands that start background processes which leave the
// process group (setsid), ignore hangups (nohup) or orphan themselves (a
// double fork), 150 of them: none outlives the call, whether the command
// exits, times out or is cancelled. The call returns only once they are
// reaped, so no waiting is needed before looking.
func TestRunShellLeavesNoProcessBehindEvenOnesThatLeftTheGroup(t *testing.T) {
	tests := []struct {
		name    string
		command string
		timeout time.Duration
		cancel  bool
		want    string
	}{
		{"exit", "; echo done", time.Minute, false, "done\n[exit code 0]"},
		{"timeout", "; echo $$ > ready; sleep 1000", time.Second, false, "[timed out after 1 second: the command and every process it started were killed"},
		{"cancel", "; echo $$ > ready; sleep 1000", time.Minute, true, "cancelled"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name, value, _ := strings.Cut(leaktest.Mark(t), "=")
			t.Setenv(name, value) // run_shell passes the server's environment on
			f := newFixture(t, Options{Shell: true, ShellTimeout: tc.timeout})
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			type result struct {
				out string
				err error
			}
			done := make(chan result, 1)
			go func() {
				out, err := f.tools["run_shell"].Call(ctx, json.RawMessage(`{"command":`+strconv.Quote(leaktest.Escapes(50)+tc.command)+`}`))
				done <- result{out, err}
			}()
			if tc.cancel {
				waitForPgid(t, filepath.Join(f.root, "ready"))
				cancel()
			}
			r := <-done
			got := r.out
			if r.err != nil {
				got = r.err.Error()
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("got %q, want %q in it", got, tc.want)
			}
			if live := leaktest.Live(name + "=" + value); len(live) > 0 {
				t.Errorf("%d processes the command started outlived the call: %v", len(live), live)
			}
		})
	}
}
