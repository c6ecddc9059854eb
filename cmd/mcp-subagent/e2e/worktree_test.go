//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/internal/gittest"
)

// writingModel follows "write PATH CONTENT" with a write_file call and
// answers "wrote" after the tool result; "hold" prompts (and "write" ones
// after their write) wait for gate when it is set.
func writingModel(gate *releaseGate) *fakeopenai.Server {
	return fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		f := strings.Fields(req.LastUserText())
		if _, ok := req.LastToolResult(); ok {
			if gate != nil && len(f) > 0 && f[0] == "write-hold" {
				gate.wait(30 * time.Second)
			}
			return fakeopenai.Reply{Text: "wrote"}
		}
		if len(f) == 3 && strings.HasPrefix(f[0], "write") {
			args, _ := json.Marshal(map[string]string{"path": f[1], "content": f[2]})
			return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "write_file", Arguments: string(args)}}}
		}
		if gate != nil && len(f) > 0 && f[0] == "hold" {
			gate.wait(30 * time.Second)
		}
		return fakeopenai.Reply{Text: "nothing to do"}
	})
}

type worktreeSC struct {
	Path   string `json:"path"`
	Branch string `json:"branch"`
	Base   string `json:"base"`
}

type isolatedSC struct {
	AgentID    string      `json:"agent_id"`
	StopReason string      `json:"stop_reason"`
	Worktree   *worktreeSC `json:"worktree"`
	Changes    *struct {
		Added    []string `json:"added"`
		Modified []string `json:"modified"`
		Deleted  []string `json:"deleted"`
		Diffstat string   `json:"diffstat"`
	} `json:"changes"`
}

// A client asking for isolation gets the child's worktree and its changes
// in the result, committed on the child's branch; its own checkout shows
// nothing. A cwd outside a repository is refused naming the field.
func TestIsolatedChildThroughTheBinary(t *testing.T) {
	fake := writingModel(nil)
	defer fake.Close()
	s := start(t, fake, serverOpts{})
	ctx := testCtx(t)

	res := s.call(t, ctx, "subagent", map[string]any{"description": "not a repo", "prompt": "write a.txt x", "isolation": "worktree"})
	if !res.IsError || !strings.HasPrefix(text(res), `Error: INVALID_REQUEST: field "isolation": `) {
		t.Fatalf("outside a repository: %s", text(res))
	}

	gittest.Init(t, s.workspace, nil)
	res = s.call(t, ctx, "subagent", map[string]any{"description": "edit in isolation", "prompt": "write a.txt from-the-child", "isolation": "worktree"})
	if res.IsError {
		t.Fatalf("isolated child: %s\n%s", text(res), s.stderr)
	}
	var sc isolatedSC
	decodeSC(t, res, &sc)
	w := sc.Worktree
	if w == nil || w.Branch != "subagent/"+sc.AgentID || !strings.HasPrefix(w.Path, filepath.Join(s.dataDir, "worktrees")) || len(w.Base) != 40 {
		t.Fatalf("worktree %+v", w)
	}
	if sc.Changes == nil || !slices.Equal(sc.Changes.Added, []string{"a.txt"}) || !strings.Contains(sc.Changes.Diffstat, "1 file changed") {
		t.Fatalf("changes %+v", sc.Changes)
	}
	if !strings.Contains(text(res), "Changes committed on branch "+w.Branch) {
		t.Errorf("the text result does not say where the changes are: %s", text(res))
	}
	if got := gittest.Git(t, s.workspace, "show", w.Branch+":a.txt"); got != "from-the-child" {
		t.Errorf("branch holds %q", got)
	}
	if st := gittest.Status(t, s.workspace); st != "" {
		t.Errorf("the client's checkout changed:\n%s", st)
	}
	if got := listedWorktrees(t, s, ctx)[sc.AgentID]; got == nil || *got != *w {
		t.Errorf("the list row shows worktree %+v, want %+v", got, w)
	}
}

// listedWorktrees calls list_agents and returns each row's worktree by id.
func listedWorktrees(t testing.TB, s *instance, ctx context.Context) map[string]*worktreeSC {
	t.Helper()
	res := s.call(t, ctx, "list_agents", map[string]any{})
	if res.IsError {
		t.Fatalf("list_agents: %s", text(res))
	}
	var out struct {
		Agents []struct {
			ID       string      `json:"id"`
			Worktree *worktreeSC `json:"worktree"`
		} `json:"agents"`
	}
	decodeSC(t, res, &out)
	m := map[string]*worktreeSC{}
	for _, r := range out.Agents {
		m[r.ID] = r.Worktree
	}
	return m
}

// A daemon killed mid-turn leaves no worktree that nothing lists: after
// the restart every worktree under the data directory is a listed child's,
// and the one of a child that had changed nothing is removed.
func TestAKilledDaemonLeavesEveryWorktreeListedOrRemoved(t *testing.T) {
	gate := newGate()
	fake := writingModel(gate)
	defer fake.Close()
	defer gate.open()
	var replaced int   // the daemon started after the kill
	t.Cleanup(func() { // after the daemon is stopped: it is gone, not exiting
		if replaced > 0 && !waitFor(10*time.Second, func() bool { return syscall.Kill(replaced, 0) != nil }) {
			t.Errorf("the daemon %d outlived its stop", replaced)
		}
	})
	s := start(t, fake, serverOpts{})
	gittest.Init(t, s.workspace, nil)
	ctx := testCtx(t)
	startIsolated := func(prompt string) string {
		res := s.call(t, ctx, "subagent", map[string]any{"description": "isolated", "prompt": prompt, "run_in_background": true, "isolation": "worktree"})
		if res.IsError {
			t.Fatalf("background start: %s", text(res))
		}
		var h handleSC
		decodeSC(t, res, &h)
		return h.AgentID
	}
	changed := startIsolated("write-hold a.txt mid-turn")
	idle := startIsolated("hold")
	wtDir := filepath.Join(s.dataDir, "worktrees")
	if !waitFor(10*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(wtDir, changed, "a.txt"))
		return err == nil && len(fake.Requests()) >= 3
	}) {
		t.Fatal("the children never reached their held model calls")
	}
	pid := daemonPID(s.dataDir)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !waitFor(10*time.Second, func() bool { return syscall.Kill(pid, 0) != nil }) {
		t.Fatal("the daemon survived SIGKILL")
	}
	gate.open()

	rows := listedWorktrees(t, s, ctx) // a new daemon, which recovers and reconciles
	replaced = daemonPID(s.dataDir)
	listed := map[string]bool{}
	for _, w := range rows {
		if w != nil {
			listed[w.Path] = true
		}
	}
	var under []string
	for _, block := range strings.Split(gittest.Git(t, s.workspace, "worktree", "list", "--porcelain"), "\n\n") {
		if p, ok := strings.CutPrefix(strings.SplitN(block, "\n", 2)[0], "worktree "); ok && strings.HasPrefix(p, wtDir) {
			under = append(under, p)
			if !listed[p] {
				t.Errorf("worktree %s is listed by no child (rows %+v)", p, rows)
			}
		}
	}
	if !slices.Contains(under, filepath.Join(wtDir, changed)) {
		t.Errorf("the changed child's worktree is gone: %q", under)
	}
	if b, err := os.ReadFile(filepath.Join(wtDir, changed, "a.txt")); err != nil || string(b) != "mid-turn" {
		t.Errorf("the changed child's edit is lost: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(wtDir, idle)); !os.IsNotExist(err) {
		t.Errorf("the unchanged child's worktree is still there: %v", err)
	}
	if b := gittest.Git(t, s.workspace, "branch", "--list", "subagent/"+idle); b != "" {
		t.Errorf("the unchanged child's branch is still there")
	}
	// The changed child goes on in its worktree, and its next turn commits
	// the edit the crash left uncommitted.
	res, sent := callSend(t, s, ctx, changed, "look around", 10)
	if res.IsError || sent.Route != "resumed" {
		t.Fatalf("resume: %s", text(res))
	}
	if got := gittest.Git(t, s.workspace, "show", "subagent/"+changed+":a.txt"); got != "mid-turn" {
		t.Errorf("after the resumed turn the branch holds %q", got)
	}
}

// `mcp-subagent worktree rm ID` asks the daemon, which owns the store: it
// removes a settled child's changed worktree and its branch while the
// daemon runs, and refuses a resident child's, which may be working there.
func TestWorktreeRmRemovesAChangedWorktree(t *testing.T) {
	gate := newGate()
	fake := writingModel(gate)
	defer fake.Close()
	defer gate.open()
	s := start(t, fake, serverOpts{})
	repo := gittest.Init(t, s.workspace, nil)
	ctx := testCtx(t)
	res := s.call(t, ctx, "subagent", map[string]any{"description": "edit in isolation", "prompt": "write a.txt kept", "isolation": "worktree"})
	var sc isolatedSC
	decodeSC(t, res, &sc)
	if res.IsError || sc.Worktree == nil {
		t.Fatalf("isolated child: %s", text(res))
	}
	res = s.call(t, ctx, "subagent", map[string]any{"description": "held in isolation", "prompt": "write-hold b.txt held",
		"run_in_background": true, "isolation": "worktree"})
	var held handleSC
	decodeSC(t, res, &held)
	if res.IsError || held.AgentID == "" {
		t.Fatalf("background isolated child: %s", text(res))
	}
	heldTree := filepath.Join(s.dataDir, "worktrees", held.AgentID)
	// Two calls of the foreground child, then the held one's write and
	// its held call.
	if !waitFor(10*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(heldTree, "b.txt"))
		return err == nil && len(fake.Requests()) >= 4
	}) {
		t.Fatal("the background child never reached its held model call")
	}
	rm := func(id string) (string, error) {
		out, err := exec.Command(binary, "worktree", "rm", id, "--data-dir", s.dataDir).CombinedOutput()
		return string(out), err
	}
	if out, err := rm(held.AgentID); err == nil || !strings.Contains(out, "is resident") {
		t.Fatalf("rm of a running child's worktree: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(heldTree, "b.txt")); err != nil {
		t.Fatalf("the refused rm touched the running child's worktree: %v", err)
	}
	if out, err := rm(sc.AgentID); err != nil || !strings.Contains(out, "removed worktree "+sc.Worktree.Path) {
		t.Fatalf("rm while the daemon runs: %v\n%s", err, out)
	}
	if _, err := os.Stat(sc.Worktree.Path); !os.IsNotExist(err) {
		t.Errorf("the worktree is still there: %v", err)
	}
	if b := gittest.Git(t, repo, "branch", "--list", sc.Worktree.Branch); b != "" {
		t.Errorf("the branch is still there")
	}
	// Once the held child settles its worktree is no longer in use.
	gate.open()
	var out string
	if !waitFor(10*time.Second, func() bool {
		var err error
		out, err = rm(held.AgentID)
		return err == nil
	}) {
		t.Fatalf("rm after the child settled: %s", out)
	}
	if _, err := os.Stat(heldTree); !os.IsNotExist(err) {
		t.Errorf("the settled child's worktree is still there: %v", err)
	}
	out2, err := exec.Command(binary, "worktree", "rm", "agent-0000000000000000", "--data-dir", s.dataDir).CombinedOutput()
	if err == nil || !strings.Contains(string(out2), "agent-0000000000000000") {
		t.Errorf("rm of an unknown child: %v\n%s", err, out2)
	}
}

// An ACP child asked for isolation opens its session in its worktree.
func TestAnACPChildOpensItsSessionInItsWorktree(t *testing.T) {
	cfg, dir := fakeACPConfig(t, "")
	s := start(t, nil, serverOpts{config: cfg})
	gittest.Init(t, s.workspace, nil)
	res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "acp in isolation", "prompt": "hello", "provider": "fake", "isolation": "worktree"})
	var sc isolatedSC
	decodeSC(t, res, &sc)
	if res.IsError || sc.Worktree == nil {
		t.Fatalf("isolated ACP child: %s\n%s", text(res), s.stderr)
	}
	news := acpCalls(t, dir, "session/new")
	if len(news) == 0 || news[0].Cwd != sc.Worktree.Path {
		t.Fatalf("session/new = %+v, want cwd %s", news, sc.Worktree.Path)
	}
	if st := gittest.Status(t, s.workspace); st != "" {
		t.Errorf("the client's checkout changed:\n%s", st)
	}
}
