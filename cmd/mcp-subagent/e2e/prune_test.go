//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/manager/retention"
	"github.com/mcp-subagent/mcp-subagent/persist"
)

// runAdmin runs the built binary with args (an admin command against
// dataDir's daemon) and returns its exit code, stdout and stderr.
func runAdmin(t *testing.T, dataDir string, args ...string) (int, string, string) {
	t.Helper()
	return runOut(t, 60*time.Second, nil, append(args, "--data-dir", dataDir)...)
}

// statuses lists the root's children as list_agents gives them: id → status.
func statuses(t *testing.T, s *instance, ctx context.Context) map[string]string {
	t.Helper()
	_, rows := callList(t, s, ctx, map[string]any{"limit": 100})
	out := map[string]string{}
	for _, r := range rows {
		out[r.ID] = r.Status
	}
	return out
}

// lastActive is the last activity the store records of the settled
// children ids (as a dry-run prune names them): the latest of them.
func lastActive(t *testing.T, dataDir string, ids []string) time.Time {
	t.Helper()
	code, out, errOut := runAdmin(t, dataDir, "prune", "--older-than", "0.001s", "--dry-run", "--json")
	if code != 0 {
		t.Fatalf("prune --dry-run --json: exit %d\n%s", code, errOut)
	}
	var dry retention.Result
	if err := json.Unmarshal([]byte(out), &dry); err != nil {
		t.Fatalf("prune --json printed no JSON: %v\n%s", err, out)
	}
	var last time.Time
	found := 0
	for _, p := range dry.Pruned {
		if slices.Contains(ids, p.ID) {
			found++
			if p.LastActive.After(last) {
				last = p.LastActive
			}
		}
	}
	if found != len(ids) {
		t.Fatalf("the dry run named %d of the settled children %v: %+v", found, ids, dry.Pruned)
	}
	return last
}

// prune --older-than removes only the settled children idle past the age
// (a running child and a young settled one stay, and list_agents agrees);
// --dry-run names each without removing; compact then shrinks the file
// while the daemon keeps serving, and every remaining child reads whole.
func TestPruneAndCompactAgainstARunningDaemon(t *testing.T) {
	hold := newGate()
	bulk := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 500) // ~22 KB a child
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		last := req.LastUserText()
		switch {
		case strings.Contains(last, "hold on"):
			hold.wait(30 * time.Second)
			return fakeopenai.Reply{Text: "held and done"}
		case strings.Contains(last, "recall"):
			// The resumed child's history reaches the model whole.
			for _, m := range req.Messages {
				if strings.Contains(m.Content, "young work") {
					return fakeopenai.Reply{Text: "I remember the young work."}
				}
			}
			return fakeopenai.Reply{Text: "I remember nothing."}
		}
		return fakeopenai.Reply{Text: "finished: " + bulk}
	})
	defer fake.Close()
	defer hold.open()
	s := start(t, fake, serverOpts{})
	ctx := testCtx(t)

	const olds = 30
	var old []string
	for range olds {
		h, _ := startBackground(t, s, ctx, "old bulk work", "old work: "+bulk)
		old = append(old, h.AgentID)
	}
	if !waitFor(30*time.Second, func() bool {
		st := statuses(t, s, ctx)
		for _, id := range old {
			if st[id] != "ready" {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the old children did not settle: %v", statuses(t, s, ctx))
	}
	// Prune measures a wall-clock age from each child's last activity as
	// the store records it: the young child starts once the old children's
	// is four seconds past, and every prune's age puts its cutoff midway
	// between the old children's latest and the young one's, two seconds
	// from either.
	oldLast := lastActive(t, s.dataDir, old)
	if !waitFor(10*time.Second, func() bool { return time.Since(oldLast) > 4*time.Second }) {
		t.Fatalf("the old children's last activity %v is not four seconds past", oldLast)
	}
	young, _ := startBackground(t, s, ctx, "young work", "young work, quickly")
	running, _ := startBackground(t, s, ctx, "long work", "hold on")
	if !waitFor(10*time.Second, func() bool {
		st := statuses(t, s, ctx)
		return st[young.AgentID] == "ready" && st[running.AgentID] == "running"
	}) {
		t.Fatalf("the young child did not settle, or the held one is not running: %v", statuses(t, s, ctx))
	}
	youngLast := lastActive(t, s.dataDir, []string{young.AgentID})
	age := func() string {
		mid := oldLast.Add(youngLast.Sub(oldLast) / 2)
		return fmt.Sprintf("%.3fs", time.Since(mid).Seconds())
	}
	pid := daemonPID(s.dataDir)

	code, out, errOut := runAdmin(t, s.dataDir, "prune", "--older-than", age(), "--dry-run", "--json")
	if code != 0 {
		t.Fatalf("prune --dry-run --json: exit %d\n%s", code, errOut)
	}
	var dry retention.Result
	if err := json.Unmarshal([]byte(out), &dry); err != nil {
		t.Fatalf("prune --json printed no JSON: %v\n%s", err, out)
	}
	var named []string
	for _, p := range dry.Pruned {
		named = append(named, p.ID)
	}
	slices.Sort(named)
	want := slices.Sorted(slices.Values(old))
	if !dry.DryRun || !slices.Equal(named, want) {
		t.Fatalf("the dry run named %v, want the %d old children %v", named, olds, want)
	}
	if st := statuses(t, s, ctx); len(st) != olds+2 {
		t.Fatalf("after the dry run list_agents shows %d children, want all %d", len(st), olds+2)
	}
	code, out, errOut = runAdmin(t, s.dataDir, "prune", "--dry-run", "--older-than", age())
	if code != 0 || !strings.Contains(out, "would prune 30 settled children idle longer than") {
		t.Fatalf("prune --dry-run: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, id := range old {
		if !strings.Contains(out, id) {
			t.Errorf("the dry run's table does not name %s:\n%s", id, out)
		}
	}

	dbPath := filepath.Join(s.dataDir, persist.FileName)
	code, out, errOut = runAdmin(t, s.dataDir, "prune", "--older-than", age())
	if code != 0 || !strings.Contains(out, "pruned 30 settled children") {
		t.Fatalf("prune: exit %d\n%s\n%s", code, out, errOut)
	}
	st := statuses(t, s, ctx)
	if len(st) != 2 || st[young.AgentID] != "ready" || st[running.AgentID] != "running" {
		t.Fatalf("after prune list_agents shows %v; want only the young (ready) and the running child", st)
	}
	res, _ := callSend(t, s, ctx, old[0], "are you there", 0)
	if !res.IsError {
		t.Errorf("send_message to a pruned child was accepted: %s", text(res))
	}

	fi, err := os.Stat(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runAdmin(t, s.dataDir, "compact", "--json")
	if code != 0 {
		t.Fatalf("compact: exit %d\n%s", code, errOut)
	}
	var cs persist.CompactStats
	if err := json.Unmarshal([]byte(out), &cs); err != nil {
		t.Fatalf("compact --json printed no JSON: %v\n%s", err, out)
	}
	after, err := os.Stat(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("compact: %d bytes before (stat %d), %d after (stat %d)", cs.Before, fi.Size(), cs.After, after.Size())
	if cs.Before != fi.Size() || cs.After != after.Size() || after.Size()*3 > fi.Size() {
		t.Fatalf("compact: %d → %d bytes (stat %d → %d); want the file at most a third of its size", cs.Before, cs.After, fi.Size(), after.Size())
	}
	if got := daemonPID(s.dataDir); got != pid || !alive(pid) {
		t.Fatalf("the daemon was replaced (pid %d → %d)", pid, got)
	}
	// The daemon serves on: the remaining children list, the young one
	// resumes from the compacted file with its history, the running one
	// finishes.
	if st := statuses(t, s, ctx); len(st) != 2 {
		t.Fatalf("after compact list_agents shows %v", st)
	}
	res, sent := callSend(t, s, ctx, young.AgentID, "recall what you did", 20)
	if res.IsError || sent.Route != "resumed" || !strings.Contains(text(res), "I remember the young work.") {
		t.Fatalf("send_message to the young child after compact (route %q): %s", sent.Route, text(res))
	}
	hold.open()
	if !waitFor(10*time.Second, func() bool { return statuses(t, s, ctx)[running.AgentID] == "ready" }) {
		t.Fatalf("the running child did not settle after compact: %v", statuses(t, s, ctx))
	}
	code, out, _ = runAdmin(t, s.dataDir, "compact")
	if code != 0 || !strings.Contains(out, "compacted "+dbPath) {
		t.Errorf("a second compact: exit %d\n%s", code, out)
	}
}

// The config's retention prunes settled children on its own, never a
// running one.
func TestRetentionConfigPrunesSettledChildren(t *testing.T) {
	hold := newGate()
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		if strings.Contains(req.LastUserText(), "hold on") {
			hold.wait(30 * time.Second)
		}
		return fakeopenai.Reply{Text: "done"}
	})
	defer fake.Close()
	defer hold.open()
	s := start(t, fake, serverOpts{config: `{"retention": {"settled_older_than": "1s", "every": "1s"}}`})
	ctx := testCtx(t)
	running, _ := startBackground(t, s, ctx, "long work", "hold on")
	done, _ := startBackground(t, s, ctx, "short work", "be quick")
	if !waitFor(10*time.Second, func() bool { return statuses(t, s, ctx)[done.AgentID] == "ready" }) {
		t.Fatalf("the short child did not settle: %v", statuses(t, s, ctx))
	}
	if !waitFor(15*time.Second, func() bool { _, ok := statuses(t, s, ctx)[done.AgentID]; return !ok }) {
		t.Fatalf("retention did not prune the settled child: %v", statuses(t, s, ctx))
	}
	if st := statuses(t, s, ctx); st[running.AgentID] != "running" {
		t.Fatalf("retention touched the running child: %v", st)
	}
	// The pass logs once Prune returns, which may be after the listing
	// above saw the child gone.
	if !waitFor(5*time.Second, func() bool { return strings.Contains(s.stderr.String(), "retention: pruned settled children") }) {
		t.Errorf("the daemon did not log the pass:\n%s", s.stderr)
	}
}

// Bad ages are refused with the flag or field named.
func TestPruneRefusesBadAges(t *testing.T) {
	dir := t.TempDir()
	for _, age := range []string{"-1d", "0s", "soon", "3w"} {
		code, _, errOut := runAdmin(t, dir, "prune", "--older-than", age)
		if code != 2 || !strings.Contains(errOut, "--older-than") || !strings.Contains(errOut, "units s, m, h, d") {
			t.Errorf("prune --older-than %s: exit %d\n%s", age, code, errOut)
		}
	}
	cfg := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfg, []byte(`{"retention": {"settled_older_than": "0d"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runAdmin(t, dir, "prune", "--config", cfg)
	if code != 1 || !strings.Contains(errOut, `field "retention.settled_older_than"`) {
		t.Errorf("a config with a zero retention age: exit %d\n%s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "daemon.sock")); err == nil {
		t.Error("a refused prune started a daemon")
	}
}
