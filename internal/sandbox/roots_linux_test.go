//go:build linux

package sandbox

import (
	"os"
	"path/filepath"
	"testing"
)

// The configured roots, inside the home directory, where nothing is
// readable or writable by default: readRootDir is a read root, writeRootDir
// a write root (when the policy names them).
const (
	readRootDir  = "shared-docs"
	writeRootDir = "scratch"
)

// rootProbes try the roots; runProbes runs them after the escape probes
// (whose test ignores them: without the roots they are only more escapes).
var rootProbes = []probe{
	{name: "read a file in the read root", run: func(v victims) error {
		_, err := os.ReadFile(filepath.Join(v.Home, readRootDir, "doc"))
		return err
	}},
	{name: "write in the read root", run: func(v victims) error {
		return os.WriteFile(filepath.Join(v.Home, readRootDir, "new"), []byte("x"), 0o644)
	}},
	{name: "write in the write root", run: func(v victims) error {
		return os.WriteFile(filepath.Join(v.Home, writeRootDir, "new"), []byte("x"), 0o644)
	}},
	{name: "read a file in the write root", run: func(v victims) error {
		_, err := os.ReadFile(filepath.Join(v.Home, writeRootDir, "old"))
		return err
	}},
}

// read_roots and write_roots open exactly what they name: with them, a
// file in the read root under $HOME is readable but not writable, the
// write root writable, and the rest of $HOME (the planted secret) and the
// outside stay closed; without them, the same probes are blocked; and
// unconfined they all succeed, so no probe is broken.
func TestReadAndWriteRootsOpenOnlyWhatTheyName(t *testing.T) {
	if abi, reason := ABI(); abi < 1 {
		t.Skip("no Landlock here: " + reason)
	}
	uid := os.Getuid()
	type want map[string]bool // probe → allowed
	for _, tc := range []struct {
		name  string
		mode  Mode
		roots bool
		want  want
	}{
		{"confined with the roots", WorkspaceWrite, true, want{
			"read a file in the read root": true, "write in the read root": false,
			"write in the write root": true, "read a file in the write root": true,
			"read the planted secret under home": false, "create a file outside the workspace": false,
		}},
		{"confined without them", WorkspaceWrite, false, want{
			"read a file in the read root": false, "write in the read root": false,
			"write in the write root": false, "read a file in the write root": false,
			"read the planted secret under home": false,
		}},
		{"read-only with the roots: no write root", ReadOnly, true, want{
			"read a file in the read root": true, "write in the write root": false,
			"read the planted secret under home": false,
		}},
		{"unconfined", Unconfined, true, want{
			"read a file in the read root": true, "write in the read root": true,
			"write in the write root": true, "read a file in the write root": true,
			"read the planted secret under home": true,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, pol := setup(t, uid)
			readRoot, writeRoot := filepath.Join(v.Home, readRootDir), filepath.Join(v.Home, writeRootDir)
			for dir, file := range map[string]string{readRoot: "doc", writeRoot: "old"} {
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, file), []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			pol.Mode = tc.mode
			if tc.roots {
				if err := CheckRoots("shell.", []string{readRoot}, []string{writeRoot}, v.Home); err != nil {
					t.Fatal(err)
				}
				pol.ReadRoots, pol.WriteRoots = []string{readRoot}, []string{writeRoot}
			}
			sl, _ := sleeper(t, uid)
			v.Sleeper = sl.Process.Pid
			r := runAs(t, probeBinary(t, uid), uid, v, pol)
			for name, allowed := range tc.want {
				got, ok := r.Results[name]
				if !ok {
					t.Errorf("probe %q did not run", name)
					continue
				}
				if (got == "ok") != allowed {
					t.Errorf("%s: %q: got %s, want allowed=%v", tc.name, name, got, allowed)
				}
			}
		})
	}
}
