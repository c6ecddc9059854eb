package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The socket sits in the data directory while its path fits a sockaddr_un;
// a longer data directory gets a short, stable path of its own under the
// system's temporary directory, one per data directory and per uid.
func TestTheSocketLivesInTheDataDirUnlessItsPathIsTooLong(t *testing.T) {
	short := t.TempDir()
	if got, want := SocketPath(short), filepath.Join(short, "daemon.sock"); got != want {
		t.Errorf("SocketPath(%q) = %q, want %q", short, got, want)
	}
	long1 := filepath.Join(short, strings.Repeat("a", maxSocketPath))
	long2 := filepath.Join(short, strings.Repeat("b", maxSocketPath))
	p1, p2 := SocketPath(long1), SocketPath(long2)
	if len(p1) >= maxSocketPath {
		t.Errorf("the fallback %q is %d bytes, does not fit %d", p1, len(p1), maxSocketPath)
	}
	if want := filepath.Join(os.TempDir(), fmt.Sprintf("mcp-subagent-%d", os.Getuid())); filepath.Dir(p1) != want {
		t.Errorf("the fallback %q is not in %q", p1, want)
	}
	if p1 == p2 {
		t.Errorf("two data directories share the socket %q", p1)
	}
	if again := SocketPath(long1); again != p1 {
		t.Errorf("SocketPath is not stable: %q then %q", p1, again)
	}
}

// socketDir uses the fallback directory only when it is a real directory of
// ours with mode 0700, and names what is wrong otherwise; with the owner
// check off (checkOwners, the probes' switch) the same directories pass, so
// the refusals come from the check and not from a broken setup.
func TestTheSocketDirectoryMustBeAPrivateDirectoryOfOurs(t *testing.T) {
	cases := []struct {
		name    string
		prepare func(t *testing.T, dir string)
		refusal string // "" accepts
	}{
		{"absent: made 0700", func(*testing.T, string) {}, ""},
		{"ours, 0700", func(t *testing.T, dir string) { must(t, os.Mkdir(dir, 0o700)) }, ""},
		{"ours, 0755", func(t *testing.T, dir string) {
			must(t, os.Mkdir(dir, 0o700))
			must(t, os.Chmod(dir, 0o755))
		}, "mode 0755, not 0700"},
		{"a symlink to a directory of ours", func(t *testing.T, dir string) {
			target := filepath.Join(t.TempDir(), "elsewhere")
			must(t, os.Mkdir(target, 0o700))
			must(t, os.Symlink(target, dir))
		}, "it is a symlink"},
		{"a file", func(t *testing.T, dir string) { must(t, os.WriteFile(dir, nil, 0o600)) }, "it is not a directory"},
	}
	for _, check := range []bool{true, false} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/check=%v", c.name, check), func(t *testing.T) {
				old := checkOwners
				checkOwners = check
				t.Cleanup(func() { checkOwners = old })
				dir := filepath.Join(t.TempDir(), "sockets")
				c.prepare(t, dir)
				err := socketDir(t.TempDir(), filepath.Join(dir, "x.sock"))
				if !check || c.refusal == "" {
					if err != nil {
						t.Fatalf("socketDir = %v, want it accepted", err)
					}
					if c.refusal == "" {
						fi, err := os.Lstat(dir)
						if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
							t.Fatalf("the socket directory is %v (%v), want a 0700 directory", fi.Mode(), err)
						}
					}
					return
				}
				if err == nil || !strings.Contains(err.Error(), c.refusal) || !strings.Contains(err.Error(), "TMPDIR") {
					t.Fatalf("socketDir = %v, want a refusal saying %q and how to fix it", err, c.refusal)
				}
			})
		}
	}
}

// A socket inside the data directory needs no directory of its own: Listen
// makes the data directory.
func TestASocketInTheDataDirMakesNothing(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	if err := socketDir(dataDir, filepath.Join(dataDir, "daemon.sock")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("socketDir made the data directory (%v); Listen does", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
