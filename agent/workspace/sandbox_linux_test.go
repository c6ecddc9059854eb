package workspace

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
)

// run_shell under the default sandbox: writes in the workspace and its own
// temp dir work, a write outside and a read of a secret under home do not;
// the same commands unconfined succeed (the probes work). Each command's
// temp dir is gone after the call, and the caches are in CacheDir.
func TestRunShellIsConfinedByDefaultAndNotWhenUnconfined(t *testing.T) {
	if abi, reason := sandbox.ABI(); abi < 1 {
		t.Skip("no Landlock: " + reason)
	}
	for _, mode := range []sandbox.Mode{"", sandbox.Unconfined} {
		base := t.TempDir()
		home, tmpRoot, cache := filepath.Join(base, "home"), filepath.Join(base, "tmp"), filepath.Join(base, "cache")
		must(t, os.MkdirAll(filepath.Join(home, ".ssh"), 0o700))
		must(t, os.Mkdir(tmpRoot, 0o700))
		must(t, os.WriteFile(filepath.Join(home, ".ssh", "id_ed25519"), []byte("PRIVATE KEY"), 0o600))
		f := newFixture(t, Options{Shell: true, Sandbox: sandbox.Policy{Mode: mode, Home: home, TempDir: tmpRoot, CacheDir: cache}})
		script := `echo in > in.txt && echo ok-workspace
echo t > "$TMPDIR/t" && echo ok-tmp
{ echo x > ` + filepath.Join(f.outside, "new.txt") + `; } 2>/dev/null && echo wrote-outside
cat ` + filepath.Join(home, ".ssh", "id_ed25519") + ` 2>/dev/null && echo read-secret
echo "gocache=$GOCACHE"
`
		out, err := f.call(t, t.Context(), "run_shell", obj{"command": script})
		must(t, err)
		for _, want := range []string{"ok-workspace", "ok-tmp"} {
			if !strings.Contains(out, want) {
				t.Errorf("mode %q: no %s in %q", mode, want, out)
			}
		}
		confined := mode == ""
		for _, escape := range []string{"wrote-outside", "PRIVATE KEY"} {
			if strings.Contains(out, escape) == confined {
				t.Errorf("mode %q: %s: output %q", mode, escape, out)
			}
		}
		if confined {
			if !strings.Contains(out, "gocache="+filepath.Join(cache, "go-build")) {
				t.Errorf("GOCACHE not in the cache dir: %q", out)
			}
			if left, _ := os.ReadDir(tmpRoot); len(left) != 0 {
				t.Errorf("the command's temp dir was left behind: %v", left)
			}
			if d := f.tools["run_shell"].Def().Description; !strings.Contains(d, "there is no network") || !strings.Contains(d, "only inside the workspace") {
				t.Errorf("the description does not say what the sandbox allows: %q", d)
			}
		}
	}
}

func TestRunShellNeedsAModeThatRunsCommands(t *testing.T) {
	for _, m := range []sandbox.Mode{sandbox.Off, "bogus"} {
		if _, err := Tools(Options{Root: t.TempDir(), Shell: true, Sandbox: sandbox.Policy{Mode: m}}); err == nil || !strings.Contains(err.Error(), "Sandbox.Mode") {
			t.Errorf("mode %q: %v", m, err)
		}
	}
}
