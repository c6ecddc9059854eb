package worktrees

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/gittest"
	"github.com/mcp-subagent/mcp-subagent/seam"
	"github.com/mcp-subagent/mcp-subagent/worktree"
)

func TestIsolationIsRefusedNamingTheField(t *testing.T) {
	ctx := context.Background()
	repo := gittest.Repo(t)
	for _, c := range []struct {
		k    *Keeper
		req  seam.StartRequest
		want string
	}{
		{New(t.TempDir(), nil), seam.StartRequest{Isolation: "chroot", Cwd: repo}, `unknown isolation "chroot"`},
		{New("", nil), seam.StartRequest{Isolation: Isolation, Cwd: repo}, "keeps no worktrees"},
		{New(t.TempDir(), nil), seam.StartRequest{Isolation: Isolation, Cwd: t.TempDir()}, "not inside a git work tree"},
	} {
		err := c.k.Check(ctx, "spawn", &c.req)
		var se *seam.Error
		if !errors.As(err, &se) || se.Code != seam.CodeInvalidRequest || !strings.Contains(se.Message, `field "isolation"`) || !strings.Contains(se.Message, c.want) {
			t.Errorf("Check(%+v) = %v, want INVALID_REQUEST naming the field and %q", c.req, err, c.want)
		}
	}
	ok := seam.StartRequest{Isolation: Isolation, Cwd: filepath.Join(repo, "pkg")}
	if err := New(t.TempDir(), nil).Check(ctx, "spawn", &ok); err != nil {
		t.Fatalf("Check inside a repository = %v", err)
	}
	if err := New("", nil).Check(ctx, "spawn", &seam.StartRequest{Cwd: repo}); err != nil {
		t.Fatalf("Check without isolation = %v", err)
	}
}

// TestAWorktreeFromStartToSettlement: the child works in its own
// worktree's subdirectory; a turn's changes are committed on its branch
// and reported; settlement keeps a changed worktree and removes an
// unchanged one, which Ensure recreates.
func TestAWorktreeFromStartToSettlement(t *testing.T) {
	ctx := context.Background()
	repo := gittest.Repo(t)
	k := New(t.TempDir(), nil)
	req := seam.StartRequest{ID: "agent-a", Isolation: Isolation, Cwd: filepath.Join(repo, "pkg")}
	w, err := k.Make(ctx, "spawn", &req)
	if err != nil {
		t.Fatal(err)
	}
	if req.Cwd != filepath.Join(w.Path, "pkg") || w.Branch != worktree.BranchPrefix+"agent-a" {
		t.Fatalf("cwd %s, branch %s; want the worktree's pkg and branch subagent/agent-a", req.Cwd, w.Branch)
	}
	if err := os.WriteFile(filepath.Join(req.Cwd, "new.txt"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hdr := seam.Header{ID: "agent-a", Label: "edit", Worktree: w}
	res := k.Commit(ctx, hdr, seam.Result{StopReason: agent.StopCompleted})
	if res.Worktree == nil || res.Changes == nil || len(res.Changes.Added) != 1 || res.Changes.Added[0] != "pkg/new.txt" {
		t.Fatalf("result %+v, want the worktree and pkg/new.txt added", res)
	}
	gittest.Committed(t, repo, w.Branch, "pkg/new.txt", "hi\n")
	k.Settle(ctx, hdr)
	if _, err := os.Stat(w.Path); err != nil {
		t.Fatalf("settlement removed a changed worktree: %v", err)
	}

	idle := seam.StartRequest{ID: "agent-b", Isolation: Isolation, Cwd: repo}
	w2, err := k.Make(ctx, "spawn", &idle)
	if err != nil {
		t.Fatal(err)
	}
	hdr2 := seam.Header{ID: "agent-b", Worktree: w2}
	if res := k.Commit(ctx, hdr2, seam.Result{}); res.Changes == nil || !res.Changes.Empty() {
		t.Fatalf("changes %+v of an unchanged worktree, want empty", res.Changes)
	}
	k.Settle(ctx, hdr2)
	if _, err := os.Stat(w2.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("settlement kept an unchanged worktree: %v", err)
	}
	if err := k.Ensure(ctx, hdr2); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(w2.Path, "README")); err != nil {
		t.Fatalf("Ensure did not recreate the worktree: %v", err)
	}
	if w, err := k.Make(ctx, "spawn", &seam.StartRequest{ID: "agent-c", Cwd: repo}); w != nil || err != nil {
		t.Fatalf("Make without isolation = %v, %v; want nothing", w, err)
	}
}

// records is a store that knows the children in hdrs.
type records map[string]seam.Header

func (r records) Header(_ context.Context, id string) (seam.Header, error) {
	if h, ok := r[id]; ok {
		return h, nil
	}
	return seam.Header{}, seam.ErrNotFound
}
func (records) Residents(context.Context) ([]seam.Claim, error) { return nil, nil }

// TestReconcileRemovesWhatNoChildRecords and leaves a resident child's.
func TestReconcileRemovesWhatNoChildRecords(t *testing.T) {
	ctx := context.Background()
	repo := gittest.Repo(t)
	k := New(t.TempDir(), nil)
	var made []*seam.Worktree
	for _, id := range []string{"agent-orphan", "agent-live"} {
		w, err := k.Make(ctx, "spawn", &seam.StartRequest{ID: id, Isolation: Isolation, Cwd: repo})
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, w)
	}
	store := records{"agent-live": {ID: "agent-live", Worktree: made[1]}}
	k.Reconcile(ctx, store, "me", func(id string) bool { return id == "agent-live" })
	if _, err := os.Stat(made[0].Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a worktree no child records was kept: %v", err)
	}
	if _, err := os.Stat(made[1].Path); err != nil {
		t.Fatalf("a resident child's worktree was removed: %v", err)
	}
	if got := Of(ctx, store, []string{"agent-orphan", "agent-live"}); len(got) != 1 || got[0].Path != made[1].Path {
		t.Fatalf("Of = %+v, want the live child's worktree only", got)
	}
}
