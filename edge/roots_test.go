package edge

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

func newPlainServer(t *testing.T, opts Options) *Server {
	t.Helper()
	mgr := manager.New(manager.Options{})
	if err := mgr.Register(&plainProvider{}); err != nil {
		t.Fatal(err)
	}
	s, err := New(mgr, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The README promises that `roots` in the config add to the server's working
// directory; they once replaced it.
func TestConfiguredRootsAddToTheWorkingDirectory(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	wd, _ = filepath.EvalSymlinks(wd)
	extra, _ := filepath.EvalSymlinks(t.TempDir())
	outside, _ := filepath.EvalSymlinks(t.TempDir())

	t.Run("server", func(t *testing.T) {
		s := newPlainServer(t, Options{Roots: []string{extra}})
		ref := s.rootCaller(context.Background(), "local")
		if ref.Cwd != wd {
			t.Errorf("default cwd = %q, want the working directory %q", ref.Cwd, wd)
		}
		for _, dir := range []string{wd, extra} {
			if got, err := s.resolveCwd(context.Background(), ref, dir); err != nil || got != dir {
				t.Errorf("cwd %s = %q, %v; want it allowed", dir, got, err)
			}
		}
		if _, err := s.resolveCwd(context.Background(), ref, outside); err == nil || !strings.Contains(err.Error(), "outside the allowed roots") {
			t.Errorf("cwd outside every root: err = %v", err)
		}
	})
	t.Run("daemon", func(t *testing.T) {
		// A daemon's working directory is nobody's project: only the
		// configured roots (and each session's own cwd) are allowed.
		s := newPlainServer(t, Options{Roots: []string{extra}, NoWorkingDirRoot: true})
		ref := seam.ParentRef{Principal: "local"}
		if _, err := s.resolveCwd(context.Background(), ref, wd); err == nil {
			t.Errorf("the daemon's working directory %s was allowed", wd)
		}
		if got, err := s.resolveCwd(context.Background(), ref, extra); err != nil || got != extra {
			t.Errorf("configured root: %q, %v", got, err)
		}
	})
}
