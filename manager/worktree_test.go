package manager_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/internal/gittest"
	"github.com/mcp-subagent/mcp-subagent/internal/managertest"
	"github.com/mcp-subagent/mcp-subagent/llm/openai"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/manager/retention"
	"github.com/mcp-subagent/mcp-subagent/manager/worktrees"
	"github.com/mcp-subagent/mcp-subagent/persist"
	"github.com/mcp-subagent/mcp-subagent/providers/spawn"
	"github.com/mcp-subagent/mcp-subagent/seam"
	"github.com/mcp-subagent/mcp-subagent/worktree"
)

// editingModel is a fake model that follows the prompt literally:
// "write PATH CONTENT" calls write_file, "read PATH" calls read_file,
// anything else is answered without a tool; after a tool result it answers
// with that result.
func editingModel() *fakeopenai.Server {
	return fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		if out, ok := req.LastToolResult(); ok {
			return fakeopenai.Reply{Text: "tool said: " + out}
		}
		f := strings.Fields(req.LastUserText())
		switch {
		case len(f) == 3 && f[0] == "write":
			args, _ := json.Marshal(map[string]string{"path": f[1], "content": f[2]})
			return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "write_file", Arguments: string(args)}}}
		case len(f) == 2 && f[0] == "read":
			args, _ := json.Marshal(map[string]string{"path": f[1]})
			return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "read_file", Arguments: string(args)}}}
		}
		return fakeopenai.Reply{Text: "nothing to do"}
	})
}

// wtManager is a manager on a bbolt store with spawn over fake, keeping
// worktrees under dir/worktrees; it records every end event.
type wtManager struct {
	*manager.Manager
	mu   sync.Mutex
	ends map[string]chan struct{}
	stop func() // closes the manager and its store
}

func newWTManager(t testing.TB, fake *fakeopenai.Server, dir string) *wtManager {
	t.Helper()
	st, err := persist.Open(filepath.Join(dir, "store"), persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := &wtManager{Manager: manager.New(manager.Options{Store: st, Worktrees: filepath.Join(dir, "worktrees"), MaxRunningChildren: -1}),
		ends: map[string]chan struct{}{}}
	client := openai.New(transport.Config{BaseURL: fake.URL(), APIKey: "k", RetryBaseDelay: time.Millisecond})
	if err := m.Register(spawn.New(spawn.Options{Client: client, Model: "m"})); err != nil {
		t.Fatal(err)
	}
	m.Subscribe(func(e manager.Event) {
		if e.Type == manager.EventEnd {
			close(m.settled(e.RunID))
		}
	})
	if err := m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	m.stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = m.Close(ctx)
			_ = st.Close()
		})
	}
	t.Cleanup(m.stop)
	return m
}

// newWTCase is a repository, a fake model following the prompt, a manager
// over it and a root caller working in the repository.
func newWTCase(t *testing.T) (repo string, m *wtManager, root seam.ParentRef) {
	t.Helper()
	repo = gittest.Repo(t)
	fake := editingModel()
	t.Cleanup(fake.Close)
	return repo, newWTManager(t, fake, t.TempDir()), seam.ParentRef{Principal: "p", Cwd: repo}
}

// followup sends a child a message and waits for the turn that handles it.
func (m *wtManager) followup(t testing.TB, root seam.ParentRef, id, text string) (*manager.Sent, seam.Result) {
	t.Helper()
	sent, err := m.Followup(context.Background(), root, id, text, true)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, ok := sent.Wait(ctx)
	if !ok {
		t.Fatalf("the turn of %q never ended", text)
	}
	return sent, res
}

// settled is closed when the child's epoch ends (its end event: after its
// worktree was settled).
func (m *wtManager) settled(id string) chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch, ok := m.ends[id]
	if !ok {
		ch = make(chan struct{})
		m.ends[id] = ch
	}
	return ch
}

// awaitSettled waits for the child's epoch to end and forgets it, so the
// next epoch can be awaited too.
func (m *wtManager) awaitSettled(t testing.TB, id string) {
	t.Helper()
	select {
	case <-m.settled(id):
	case <-time.After(20 * time.Second):
		t.Fatalf("subagent %s never settled", id)
	}
	m.mu.Lock()
	delete(m.ends, id)
	m.mu.Unlock()
}

// run starts an isolated child with prompt and waits for its first turn.
func (m *wtManager) run(t testing.TB, root seam.ParentRef, cwd, prompt string) (string, seam.Result) {
	t.Helper()
	st, err := m.StartContinuable(context.Background(), "spawn", seam.StartRequest{Label: "edit", Prompt: prompt, Parent: root,
		Cwd: cwd, Isolation: worktrees.Isolation}, true)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, ok := st.Wait(ctx)
	if !ok {
		t.Fatalf("the first turn of %s never ended", st.ChildID)
	}
	return st.ChildID, res
}

func TestParallelChildrenEditTheSameFileInTheirOwnWorktrees(t *testing.T) {
	repo, m, root := newWTCase(t)
	type out struct {
		id  string
		res seam.Result
	}
	outs := make([]out, 2)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, res := m.run(t, root, filepath.Join(repo, "pkg"), fmt.Sprintf("write shared.txt version-%d", i))
			outs[i] = out{id, res}
		}()
	}
	wg.Wait()
	for i, o := range outs {
		if o.res.StopReason != "completed" {
			t.Fatalf("child %d: %+v", i, o.res)
		}
		w := o.res.Worktree
		if w == nil || w.Branch != "subagent/"+o.id || w.Path == "" || strings.HasPrefix(w.Path, repo) {
			t.Fatalf("child %d: worktree %+v", i, w)
		}
		if c := o.res.Changes; c == nil || !slices.Equal(c.Added, []string{"pkg/shared.txt"}) || c.Diffstat == "" {
			t.Fatalf("child %d: changes %+v", i, c)
		}
		if got := gittest.Git(t, repo, "show", w.Branch+":pkg/shared.txt"); got != fmt.Sprintf("version-%d", i) {
			t.Errorf("branch %s holds %q", w.Branch, got)
		}
		if log := gittest.Git(t, repo, "log", "--format=%an", "-1", w.Branch); strings.TrimSpace(log) != worktree.IdentityName {
			t.Errorf("branch %s's commit is by %q", w.Branch, log)
		}
	}
	if outs[0].res.Worktree.Path == outs[1].res.Worktree.Path {
		t.Fatal("both children got one worktree")
	}
	if st := gittest.Status(t, repo); st != "" {
		t.Fatalf("the main checkout changed:\n%s", st)
	}
	if _, err := os.Stat(filepath.Join(repo, "pkg", "shared.txt")); !os.IsNotExist(err) {
		t.Fatalf("the file reached the main checkout: %v", err)
	}
	// Changed worktrees outlive the settlement, and the list shows them.
	for _, o := range outs {
		m.awaitSettled(t, o.id)
		if _, err := os.Stat(filepath.Join(o.res.Worktree.Path, "pkg", "shared.txt")); err != nil {
			t.Errorf("a changed worktree is gone after settlement: %v", err)
		}
	}
	rows, err := managertest.ListChildren(m.Manager, root)
	if err != nil || len(rows) != 2 {
		t.Fatalf("rows %+v, %v", rows, err)
	}
	for _, r := range rows {
		if r.Worktree == nil || r.Worktree.Branch != "subagent/"+r.ID {
			t.Errorf("row %s: worktree %+v", r.ID, r.Worktree)
		}
	}
}

func TestAChildThatChangesNothingLeavesNoWorktreeOrBranch(t *testing.T) {
	repo, m, root := newWTCase(t)
	id, res := m.run(t, root, repo, "look around")
	if res.Worktree == nil || res.Changes == nil || !res.Changes.Empty() {
		t.Fatalf("result %+v / %+v", res.Worktree, res.Changes)
	}
	m.awaitSettled(t, id)
	if wl := gittest.Git(t, repo, "worktree", "list", "--porcelain"); strings.Contains(wl, id) {
		t.Fatalf("worktree left behind:\n%s", wl)
	}
	if b := gittest.Git(t, repo, "branch", "--list", "subagent/*"); b != "" {
		t.Fatalf("branch left behind: %q", b)
	}
	if _, err := os.Stat(res.Worktree.Path); !os.IsNotExist(err) {
		t.Fatalf("worktree directory left behind: %v", err)
	}

	// A follow-up recreates it at the same path on the same branch.
	sent, res2 := m.followup(t, root, id, "write later.txt second")
	if sent.Route != manager.RouteResumed || res2.Worktree == nil || res2.Worktree.Path != res.Worktree.Path || res2.Changes == nil || !slices.Equal(res2.Changes.Added, []string{"later.txt"}) {
		t.Fatalf("follow-up %s: %+v", sent.Route, res2)
	}
	if got := gittest.Git(t, repo, "show", "subagent/"+id+":later.txt"); got != "second" {
		t.Fatalf("branch holds %q", got)
	}
}

func TestAFollowUpSeesItsEarlierEdit(t *testing.T) {
	repo, m, root := newWTCase(t)
	id, res := m.run(t, root, repo, "write notes.txt first-edit")
	m.awaitSettled(t, id)
	_, res2 := m.followup(t, root, id, "read notes.txt")
	if !strings.Contains(res2.Output, "first-edit") {
		t.Fatalf("follow-up did not see its edit: %+v", res2)
	}
	if res2.Worktree == nil || res2.Worktree.Path != res.Worktree.Path {
		t.Fatalf("follow-up worktree %+v, first %+v", res2.Worktree, res.Worktree)
	}
	// Changes are against the base, over all turns.
	if res2.Changes == nil || !slices.Equal(res2.Changes.Added, []string{"notes.txt"}) {
		t.Fatalf("follow-up changes %+v", res2.Changes)
	}
}

func TestTwentyChildrenCreateWorktreesInOneRepositoryAtOnce(t *testing.T) {
	repo, m, root := newWTCase(t)
	const n = 20
	var wg sync.WaitGroup
	results := make([]seam.Result, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, results[i] = m.run(t, root, repo, fmt.Sprintf("write f%02d.txt body-%d", i, i))
		}()
	}
	wg.Wait()
	for i, res := range results {
		if res.StopReason != "completed" || res.Changes == nil || !slices.Equal(res.Changes.Added, []string{fmt.Sprintf("f%02d.txt", i)}) {
			t.Errorf("child %d: %s %+v %s", i, res.StopReason, res.Changes, res.Diagnostic)
		}
	}
	if b := strings.Fields(gittest.Git(t, repo, "branch", "--list", "--format=%(refname:short)", "subagent/*")); len(b) != n {
		t.Errorf("%d branches, want %d", len(b), n)
	}
	if st := gittest.Status(t, repo); st != "" {
		t.Fatalf("the main checkout changed:\n%s", st)
	}
}

func TestIsolationOutsideARepositoryIsRefusedNamingTheField(t *testing.T) {
	fake := editingModel()
	defer fake.Close()
	m := newWTManager(t, fake, t.TempDir())
	plain := t.TempDir()
	_, err := m.StartContinuable(context.Background(), "spawn", seam.StartRequest{Label: "x", Prompt: "p",
		Parent: seam.ParentRef{Principal: "p", Cwd: plain}, Isolation: worktrees.Isolation}, false)
	if !errors.Is(err, seam.ErrInvalidRequest) || !strings.Contains(err.Error(), `field "isolation"`) || !strings.Contains(err.Error(), "not inside a git work tree") {
		t.Fatalf("err = %v", err)
	}
	_, err = m.StartContinuable(context.Background(), "spawn", seam.StartRequest{Label: "x", Prompt: "p",
		Parent: seam.ParentRef{Principal: "p", Cwd: plain}, Isolation: "container"}, false)
	if !errors.Is(err, seam.ErrInvalidRequest) || !strings.Contains(err.Error(), `field "isolation"`) {
		t.Fatalf("unknown isolation: err = %v", err)
	}
	// A deployment without a worktree directory refuses it too.
	bare := manager.New(manager.Options{})
	defer bare.Close(context.Background())
	client := openai.New(transport.Config{BaseURL: fake.URL(), APIKey: "k"})
	if err := bare.Register(spawn.New(spawn.Options{Client: client, Model: "m"})); err != nil {
		t.Fatal(err)
	}
	_, err = bare.Start(context.Background(), "spawn", seam.StartRequest{Label: "x", Prompt: "p",
		Parent: seam.ParentRef{Principal: "p", Cwd: gittest.Repo(t)}, Isolation: worktrees.Isolation})
	if !errors.Is(err, seam.ErrInvalidRequest) || !strings.Contains(err.Error(), `field "isolation"`) {
		t.Fatalf("without a worktree directory: err = %v", err)
	}
}

// A start reconciles the worktree directory with the store: a worktree no
// child records is removed with its branch; a stored child's changed one
// stays, and one whose directory vanished is recreated.
func TestAStartReconcilesWorktreesWithTheStore(t *testing.T) {
	repo := gittest.Repo(t)
	fake := editingModel()
	defer fake.Close()
	dir := t.TempDir()
	root := seam.ParentRef{Principal: "p", Cwd: repo}
	m := newWTManager(t, fake, dir)
	kept, res := m.run(t, root, repo, "write kept.txt k")
	m.awaitSettled(t, kept)
	vanished, res2 := m.run(t, root, repo, "write v.txt v")
	m.awaitSettled(t, vanished)
	ctx := context.Background()
	m.stop()
	// As a crash between a worktree's creation and its child's record
	// would leave it, and a worktree deleted by hand.
	orphan, err := worktree.Create(ctx, repo, filepath.Join(dir, "worktrees", "agent-orphan"), "subagent/agent-orphan")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(res2.Worktree.Path); err != nil {
		t.Fatal(err)
	}

	newWTManager(t, fake, dir)
	if _, err := os.Stat(orphan.Path); !os.IsNotExist(err) {
		t.Errorf("the orphan worktree is still there: %v", err)
	}
	if b := gittest.Git(t, repo, "branch", "--list", "subagent/agent-orphan"); b != "" {
		t.Errorf("the orphan's branch is still there")
	}
	if _, err := os.Stat(filepath.Join(res.Worktree.Path, "kept.txt")); err != nil {
		t.Errorf("a stored child's changed worktree was removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(res2.Worktree.Path, "v.txt")); err != nil {
		t.Errorf("a vanished worktree was not recreated: %v", err)
	}
}

// Pruning a child removes its worktree, so none is left that nothing
// lists; the branch keeps the child's committed work for its parent.
func TestPruneRemovesAChangedWorktreeAndKeepsItsBranch(t *testing.T) {
	repo, m, root := newWTCase(t)
	id, res := m.run(t, root, repo, "write kept.txt work")
	if res.Worktree == nil || res.Changes == nil || res.Changes.Empty() {
		t.Fatalf("result %+v / %+v", res.Worktree, res.Changes)
	}
	m.awaitSettled(t, id)
	if _, err := os.Stat(res.Worktree.Path); err != nil {
		t.Fatalf("a changed worktree stays after settlement: %v", err)
	}
	pr, err := m.Prune(context.Background(), retention.Request{Principals: []string{root.Principal}, Before: time.Now().Add(time.Hour)})
	if err != nil || len(pr.Pruned) != 1 || pr.Pruned[0].ID != id {
		t.Fatalf("Prune = %+v, %v", pr, err)
	}
	if _, err := os.Stat(res.Worktree.Path); !os.IsNotExist(err) {
		t.Errorf("the pruned child's worktree directory is still there: %v", err)
	}
	if wl := gittest.Git(t, repo, "worktree", "list", "--porcelain"); strings.Contains(wl, id) {
		t.Errorf("the pruned child's worktree is still registered:\n%s", wl)
	}
	gittest.Committed(t, repo, "subagent/"+id, "kept.txt", "work")
}

// RemoveWorktree acts for the child's root principal only, and removes a
// settled child's changed worktree with its branch.
func TestRemoveWorktreeIsTheRootPrincipals(t *testing.T) {
	repo, m, root := newWTCase(t)
	id, res := m.run(t, root, repo, "write kept.txt work")
	if res.Worktree == nil {
		t.Fatalf("result %+v", res)
	}
	m.awaitSettled(t, id)
	ctx := context.Background()
	if _, err := m.RemoveWorktree(ctx, seam.ParentRef{Principal: root.Principal + "-other"}, id); !errors.Is(err, seam.ErrUnauthorized) {
		t.Fatalf("RemoveWorktree by another principal = %v, want UNAUTHORIZED", err)
	}
	if _, err := os.Stat(res.Worktree.Path); err != nil {
		t.Fatalf("a refused removal touched the worktree: %v", err)
	}
	w, err := m.RemoveWorktree(ctx, seam.ParentRef{Principal: root.Principal}, id)
	if err != nil || w.Path != res.Worktree.Path {
		t.Fatalf("RemoveWorktree = %+v, %v", w, err)
	}
	if _, err := os.Stat(res.Worktree.Path); !os.IsNotExist(err) {
		t.Errorf("the worktree is still there: %v", err)
	}
	if b := gittest.Git(t, repo, "branch", "--list", "subagent/"+id); b != "" {
		t.Errorf("the branch is still there: %s", b)
	}
}

// TestTheTurnEndCommitRunsNothingAChildPlanted goes through the manager's
// turn end (issue 22, defects 1 and 11). A child with write_file alone
// plants a git dir whose config defines a filter, and a .gitattributes
// naming it; its rewrite of the .git file is refused, so the turn's commit
// runs nothing. Then the .git file is rewritten behind the tools' back (as
// an external agent's own tools could): the next turn's commit is refused,
// said in the diagnostic, and still runs nothing. Plain git in the same
// worktree runs the filter, proving the probe.
func TestTheTurnEndCommitRunsNothingAChildPlanted(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "marker")
	plant := map[string]string{
		".evil/HEAD":             "ref: refs/heads/evil\n",
		".evil/objects/.keep":    "",
		".evil/refs/heads/.keep": "",
		".evil/config":           "[core]\n\tbare = false\n[filter \"evil\"]\n\tclean = touch " + marker + "; cat\n",
		".gitattributes":         "* filter=evil\n",
		"a.txt":                  "a\n",
		".git":                   "gitdir: .evil\n",
	}
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		if out, ok := req.LastToolResult(); ok {
			return fakeopenai.Reply{Text: "tool said: " + out}
		}
		if req.LastUserText() != "plant" {
			args, _ := json.Marshal(map[string]string{"path": "b.txt", "content": req.LastUserText()})
			return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "write_file", Arguments: string(args)}}}
		}
		var calls []fakeopenai.ToolCall
		for _, p := range slices.Sorted(maps.Keys(plant)) {
			args, _ := json.Marshal(map[string]string{"path": p, "content": plant[p]})
			calls = append(calls, fakeopenai.ToolCall{Name: "write_file", Arguments: string(args)})
		}
		return fakeopenai.Reply{ToolCalls: calls}
	})
	t.Cleanup(fake.Close)
	repo := gittest.Repo(t)
	mainHead := gittest.Git(t, repo, "rev-parse", "main")
	m := newWTManager(t, fake, t.TempDir())
	root := seam.ParentRef{Principal: "p", Cwd: repo}

	id, res := m.run(t, root, repo, "plant")
	if res.Worktree == nil || res.Changes == nil || !slices.Contains(res.Changes.Added, "a.txt") || res.Diagnostic != "" {
		t.Fatalf("first turn: %+v, changes %+v", res, res.Changes)
	}
	wt := res.Worktree.Path
	if b, _ := os.ReadFile(filepath.Join(wt, ".git")); strings.Contains(string(b), ".evil") {
		t.Fatalf("write_file rewrote the .git file: %q", b)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the turn-end commit ran the planted filter")
	}
	m.awaitSettled(t, id)

	if err := os.WriteFile(filepath.Join(wt, ".git"), []byte("gitdir: .evil\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, res2 := m.followup(t, root, id, "second")
	if !strings.Contains(res2.Diagnostic, "does not name its git directory") {
		t.Fatalf("second turn's diagnostic %q; want the refusal", res2.Diagnostic)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the turn-end commit ran the planted filter")
	}
	if got := gittest.Git(t, repo, "rev-parse", "main"); got != mainHead {
		t.Fatalf("the user's branch moved")
	}

	// The proof: plain git there runs the filter.
	cmd := exec.Command("git", "add", "--all")
	cmd.Dir = wt
	out, err := cmd.CombinedOutput()
	if _, serr := os.Stat(marker); serr != nil {
		t.Fatalf("the probe is broken: plain git add did not run the filter: %v, %v\n%s", serr, err, out)
	}
}
