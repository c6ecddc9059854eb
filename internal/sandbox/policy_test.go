package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckRootsRefusesBadRootsNamingTheField(t *testing.T) {
	home := t.TempDir()
	inside := filepath.Join(home, "proj")
	if err := os.Mkdir(inside, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		read, write []string
		want        string // "" : accepted
	}{
		{"a directory inside home is a fine write root", nil, []string{inside}, ""},
		{"a relative read root", []string{"rel/dir"}, nil, "shell.read_roots[0]: \"rel/dir\" is not an absolute path"},
		{"a missing read root", []string{"/nonexistent-sandbox-root"}, nil, "shell.read_roots[0]: \"/nonexistent-sandbox-root\": no such file"},
		{"a relative write root", nil, []string{inside, "x"}, "shell.write_roots[1]: \"x\" is not an absolute path"},
		{"/ as a write root", nil, []string{"/"}, "shell.write_roots[0]: \"/\" would make / or the home directory"},
		{"home as a write root", nil, []string{home}, "shell.write_roots[0]"},
		{"a parent of home as a write root", nil, []string{filepath.Dir(home)}, "would make / or the home directory"},
	} {
		err := CheckRoots("shell.", tc.read, tc.write, home)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: err = %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}

func TestParseModeNamesTheValidModes(t *testing.T) {
	for _, s := range []string{"off", "read-only", "workspace-write", "unconfined"} {
		if m, err := ParseMode(s); err != nil || string(m) != s {
			t.Errorf("ParseMode(%q) = %q, %v", s, m, err)
		}
	}
	if _, err := ParseMode("sandboxed"); err == nil || !strings.Contains(err.Error(), `"workspace-write"`) {
		t.Errorf("ParseMode of an unknown mode = %v", err)
	}
}

func TestEnvMovesTempAndCachesOutOfTheUsersHome(t *testing.T) {
	p := Policy{TempDir: "/d/tmp/1", CacheDir: "/d/cache/c1"}
	env := p.Env([]string{"HOME=/root", "GOCACHE=/root/.cache/go-build", "TMPDIR=/tmp", "PATH=/bin"})
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := got[k]; dup {
			t.Errorf("%s set twice", k)
		}
		got[k] = v
	}
	for k, want := range map[string]string{"HOME": "/root", "PATH": "/bin", "TMPDIR": "/d/tmp/1", "GOCACHE": "/d/cache/c1/go-build",
		"npm_config_cache": "/d/cache/c1/npm", "PIP_CACHE_DIR": "/d/cache/c1/pip", "CARGO_HOME": "/d/cache/c1/cargo"} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q", k, got[k], want)
		}
	}
}

func TestPolicyRoundTripsAndChecksPaths(t *testing.T) {
	p := Policy{Mode: WorkspaceWrite, Workspace: "/w", TempDir: "/t", ReadRoots: []string{"/r"}, Network: true}
	q, err := Decode(p.Encode())
	if err != nil || q.Workspace != "/w" || !q.Network || len(q.ReadRoots) != 1 {
		t.Errorf("Decode(Encode) = %+v, %v", q, err)
	}
	if _, err := Decode(Policy{Mode: WorkspaceWrite, Workspace: "w", TempDir: "/t"}.Encode()); err == nil || !strings.Contains(err.Error(), "workspace") {
		t.Errorf("a relative workspace: %v", err)
	}
	if _, err := Decode(Policy{Mode: ReadOnly, Workspace: "/w"}.Encode()); err == nil || !strings.Contains(err.Error(), "temp_dir is required") {
		t.Errorf("no temp dir: %v", err)
	}
}

// A writable workspace that is / or holds the home directory is refused,
// naming the field; one inside the home directory, and a read-only one
// anywhere, are not.
func TestAWorkspaceHoldingTheHomeDirectoryIsRefused(t *testing.T) {
	home := t.TempDir()
	for _, ws := range []string{home, filepath.Dir(home), "/"} {
		err := Policy{Mode: WorkspaceWrite, Workspace: ws, TempDir: "/t", Home: home}.Check()
		if err == nil || !strings.Contains(err.Error(), "workspace:") || !strings.Contains(err.Error(), "home directory") {
			t.Errorf("workspace %s holding home %s: %v; want a refusal naming the workspace", ws, home, err)
		}
	}
	for _, p := range []Policy{
		{Mode: WorkspaceWrite, Workspace: filepath.Join(home, "project"), TempDir: "/t", Home: home},
		{Mode: WorkspaceWrite, Workspace: t.TempDir(), TempDir: "/t", Home: home},
		{Mode: ReadOnly, Workspace: home, TempDir: "/t", Home: home},
	} {
		if err := p.Check(); err != nil {
			t.Errorf("%s workspace %s (home %s): %v", p.Mode, p.Workspace, home, err)
		}
	}
}
