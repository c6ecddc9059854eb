//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
)

// limits.max_running_children in the config file caps the built binary's
// turns in flight: past it a background child is handed out as usual,
// lists as queued (and under the queued filter), and runs when a slot
// frees, in the order the children were started; each settles with one
// notice.
func TestAdmissionCapFromTheConfigFile(t *testing.T) {
	release := make(chan struct{}, 10)
	stop := make(chan struct{})
	arrived := make(chan string, 10)
	var mu sync.Mutex
	inFlight, high := 0, 0
	fake := fakeopenai.New(func(_ int, req fakeopenai.Request) fakeopenai.Reply {
		mu.Lock()
		inFlight++
		high = max(high, inFlight)
		mu.Unlock()
		arrived <- req.LastUserText()
		select {
		case <-release:
		case <-stop:
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
		return fakeopenai.Reply{Text: "done: " + req.LastUserText()}
	})
	defer fake.Close()
	defer close(stop)
	s := start(t, fake, serverOpts{config: `{"limits":{"max_running_children":2}}`})
	ctx := testCtx(t)
	next := func(want string) {
		t.Helper()
		select {
		case got := <-arrived:
			if got != want {
				t.Fatalf("the next request to reach the model is %q's, want %q's", got, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no request for %q reached the model; stderr:\n%s", want, s.stderr)
		}
	}
	var ids, early []string
	for i := range 4 {
		h, ns := startBackground(t, s, ctx, "capped child", fmt.Sprintf("c%d", i))
		ids, early = append(ids, h.AgentID), append(early, ns...)
		if i < 2 {
			next(fmt.Sprintf("c%d", i))
		}
	}
	var queued []string
	if !waitFor(20*time.Second, func() bool {
		_, rows := callList(t, s, ctx, map[string]any{"status": "queued"})
		queued = queued[:0]
		for _, r := range rows {
			queued = append(queued, r.ID)
		}
		return slices.Equal(queued, ids[2:])
	}) {
		t.Fatalf("list_agents status queued = %q, want %q", queued, ids[2:])
	}
	_, rows := callList(t, s, ctx, nil)
	for i, id := range ids {
		want := "running"
		if i >= 2 {
			want = "queued"
		}
		if r, ok := rowOf(rows, id); !ok || r.Status != want {
			t.Errorf("row of %s = %+v, want status %s", id, r, want)
		}
	}
	for i := 2; i < 4; i++ {
		release <- struct{}{}
		next(fmt.Sprintf("c%d", i))
	}
	release <- struct{}{}
	release <- struct{}{}
	got := awaitNotices(t, s, ctx, 30*time.Second, early, func(ns []string) bool { return len(filterNotices(ns, "subagent-settled")) >= 4 })
	settled := filterNotices(got, "subagent-settled")
	for _, id := range ids {
		if n := countWith(settled, "[subagent-settled from "+id+"]"); n != 1 {
			t.Errorf("child %s: %d settlement notices, want 1 (all: %q)", id, n, settled)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if high != 2 {
		t.Errorf("at most %d model requests were in flight, want 2", high)
	}
}
