//go:build unix

package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
)

// fixture is a workspace root next to a directory outside it:
//
//	root/a.txt                "alpha\nbeta\ngamma\n"
//	root/sub/b.go             a small Go file
//	root/sub/deep/c.txt       "deep beta\n"
//	root/.git/config          "beta in git\n"
//	root/bin.dat              binary, containing "beta"
//	root/empty/               an empty directory
//	root/link_in -> sub       relative link to a directory inside
//	root/link_in_abs -> <root>/sub   absolute link to a directory inside
//	root/a_link.txt -> a.txt  link to a file inside
//	root/link_out -> <outside>        link to a directory outside
//	root/file_out -> <outside>/secret.txt
//	root/dangling_out -> <outside>/nothing
//	outside/secret.txt        "TOP SECRET beta\n"
type fixture struct {
	root, outside string
	tools         map[string]agent.Tool
}

func newFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	base := t.TempDir()
	f := &fixture{root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	files := map[string]string{
		"root/a.txt":          "alpha\nbeta\ngamma\n",
		"root/sub/b.go":       "package sub\n\nfunc BetaHandler() {}\n",
		"root/sub/deep/c.txt": "deep beta\n",
		"root/.git/config":    "beta in git\n",
		"root/bin.dat":        "beta\x00\x01\x02",
		"outside/secret.txt":  "TOP SECRET beta\n",
	}
	for name, content := range files {
		p := filepath.Join(base, name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(content), 0o644))
	}
	must(t, os.Mkdir(filepath.Join(f.root, "empty"), 0o755))
	links := map[string]string{
		"link_in":      "sub",
		"link_in_abs":  filepath.Join(f.root, "sub"),
		"a_link.txt":   "a.txt",
		"link_out":     f.outside,
		"file_out":     filepath.Join(f.outside, "secret.txt"),
		"dangling_out": filepath.Join(f.outside, "nothing"),
	}
	for name, target := range links {
		must(t, os.Symlink(target, filepath.Join(f.root, name)))
	}
	if opts.Root == "" {
		opts.Root = f.root
	}
	tools, err := Tools(opts)
	must(t, err)
	f.tools = map[string]agent.Tool{}
	for _, tl := range tools {
		f.tools[tl.Def().Name] = tl
	}
	return f
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// call runs the named tool with args, a JSON string or a value to marshal.
func (f *fixture) call(t *testing.T, ctx context.Context, name string, args any) (string, error) {
	t.Helper()
	tl, ok := f.tools[name]
	if !ok {
		t.Fatalf("no tool %q", name)
	}
	raw, ok := args.(string)
	if !ok {
		b, err := json.Marshal(args)
		must(t, err)
		raw = string(b)
	}
	return tl.Call(ctx, json.RawMessage(raw))
}

type obj = map[string]any

// check compares a result with a wanted substring of the output, or of the
// error when wantErr is set; errors must never show host paths.
func (f *fixture) check(t *testing.T, got string, err error, want, wantErr string) {
	t.Helper()
	if wantErr != "" {
		if err == nil {
			t.Fatalf("got %q, want error containing %q", got, wantErr)
		}
		if !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("error %q does not contain %q", err, wantErr)
		}
		if strings.Contains(err.Error(), f.root) {
			t.Fatalf("error %q leaks the root's host path", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if !strings.Contains(got, want) {
		t.Fatalf("got %q, want it to contain %q", got, want)
	}
}

func TestReadFileReturnsTextInsideTheWorkspace(t *testing.T) {
	f := newFixture(t, Options{})
	tests := []struct {
		name    string
		args    any
		want    string
		wantErr string
	}{
		{"whole file", obj{"path": "a.txt"}, "alpha\nbeta\ngamma\n", ""},
		{"offset and limit", obj{"path": "a.txt", "offset_line": 2, "limit_lines": 1}, "beta\n[showing lines 2-2 of a.txt as asked by limit_lines; the file continues: call read_file with offset_line=3", ""},
		{"limit reaching the end has no note", obj{"path": "a.txt", "offset_line": 3, "limit_lines": 5}, "gamma\n", ""},
		{"integral float accepted", `{"path":"a.txt","offset_line":3.0}`, "gamma\n", ""},
		{"nested file", obj{"path": "sub/deep/c.txt"}, "deep beta\n", ""},
		{"inner dot-dot staying inside", obj{"path": "sub/../a.txt"}, "alpha\n", ""},
		{"absolute path inside", obj{"path": filepath.Join(f.root, "sub", "b.go")}, "package sub", ""},
		{"through relative dir symlink inside", obj{"path": "link_in/b.go"}, "package sub", ""},
		{"through absolute dir symlink inside", obj{"path": "link_in_abs/deep/c.txt"}, "deep beta", ""},
		{"file symlink inside", obj{"path": "a_link.txt"}, "alpha", ""},
		{"offset past the end", obj{"path": "a.txt", "offset_line": 9}, "", `offset_line 9 is past the end of "a.txt", which has 3 lines`},
		{"directory refused", obj{"path": "sub"}, "", "use list_dir"},
		{"binary refused", obj{"path": "bin.dat"}, "", "binary"},
		{"missing file", obj{"path": "nope.txt"}, "", `cannot read "nope.txt": it does not exist in the workspace`},
		{"empty file", obj{"path": "empty.txt"}, "(the file is empty)", ""},
		{"fifo refused without blocking", obj{"path": "fifo"}, "", `cannot read "fifo": it is not a regular file`},
	}
	must(t, os.WriteFile(filepath.Join(f.root, "empty.txt"), nil, 0o644))
	must(t, syscall.Mkfifo(filepath.Join(f.root, "fifo"), 0o644))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := f.call(t, t.Context(), "read_file", tc.args)
			f.check(t, got, err, tc.want, tc.wantErr)
			if tc.wantErr == "" && tc.name == "whole file" && got != tc.want {
				t.Fatalf("got %q, want exactly %q", got, tc.want)
			}
		})
	}
}

func TestEscapesAreRefused(t *testing.T) {
	f := newFixture(t, Options{})
	outsideAbs := filepath.Join(f.outside, "secret.txt")
	const outsideMsg = "is outside the workspace root; use a path inside the workspace"
	const linkMsg = "leads through a symbolic link to a location outside the workspace root"
	tests := []struct {
		name    string
		tool    string
		args    obj
		wantErr string
	}{
		{"read dot-dot", "read_file", obj{"path": "../outside/secret.txt"}, `path "../outside/secret.txt" ` + outsideMsg},
		{"read dot-dot after a subdirectory", "read_file", obj{"path": "sub/../../outside/secret.txt"}, outsideMsg},
		{"read absolute outside", "read_file", obj{"path": outsideAbs}, outsideMsg},
		{"read absolute system file", "read_file", obj{"path": "/etc/passwd"}, `path "/etc/passwd" ` + outsideMsg},
		{"read file symlink out", "read_file", obj{"path": "file_out"}, linkMsg},
		{"read through dir symlink out", "read_file", obj{"path": "link_out/secret.txt"}, linkMsg},
		{"read dangling symlink out", "read_file", obj{"path": "dangling_out"}, linkMsg},
		{"list parent", "list_dir", obj{"path": ".."}, outsideMsg},
		{"list dir symlink out", "list_dir", obj{"path": "link_out"}, linkMsg},
		{"list absolute outside", "list_dir", obj{"path": f.outside}, outsideMsg},
		{"search parent", "search", obj{"pattern": "SECRET", "path": ".."}, outsideMsg},
		{"search dir symlink out", "search", obj{"pattern": "SECRET", "path": "link_out"}, linkMsg},
		{"search file symlink out", "search", obj{"pattern": "SECRET", "path": "file_out"}, linkMsg},
		{"write dot-dot", "write_file", obj{"path": "../outside/new.txt", "content": "x"}, outsideMsg},
		{"write absolute outside", "write_file", obj{"path": filepath.Join(f.outside, "new.txt"), "content": "x"}, outsideMsg},
		{"write through file symlink out", "write_file", obj{"path": "file_out", "content": "pwned"}, linkMsg},
		{"write new file under dir symlink out", "write_file", obj{"path": "link_out/new.txt", "content": "x"}, linkMsg},
		{"write new dirs under dir symlink out", "write_file", obj{"path": "link_out/a/b/new.txt", "content": "x"}, linkMsg},
		{"write through dangling symlink out", "write_file", obj{"path": "dangling_out", "content": "x"}, "symbolic link"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := f.call(t, t.Context(), tc.tool, tc.args)
			f.check(t, got, err, "", tc.wantErr)
			// Where a symlink leads is not revealed.
			if arg := tc.args["path"].(string); !strings.Contains(arg, f.outside) && strings.Contains(err.Error(), f.outside) {
				t.Fatalf("error %q reveals a symlink target", err)
			}
		})
	}
	// Nothing outside changed.
	entries, err := os.ReadDir(f.outside)
	must(t, err)
	if len(entries) != 1 || entries[0].Name() != "secret.txt" {
		t.Fatalf("outside directory changed: %v", entries)
	}
	b, err := os.ReadFile(outsideAbs)
	must(t, err)
	if string(b) != "TOP SECRET beta\n" {
		t.Fatalf("outside file changed: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(f.root, "dangling_out")); err != nil {
		t.Fatalf("dangling link removed: %v", err)
	}
}

func TestSymlinkSwappedInAfterTheCheckIsStillRefused(t *testing.T) {
	// resolve checks a path, then os.Root uses it. A directory replaced by
	// a link leading out in between must still not be followed.
	f := newFixture(t, Options{})
	w, err := newWorkspace(Options{Root: f.root})
	must(t, err)
	victim := filepath.Join(f.root, "victim")
	must(t, os.Mkdir(victim, 0o755))
	must(t, os.WriteFile(filepath.Join(victim, "secret.txt"), []byte("inside"), 0o644))
	rel, _, err := w.resolve("victim/secret.txt")
	must(t, err)
	must(t, os.RemoveAll(victim))
	must(t, os.Symlink(f.outside, victim))

	r, err := w.openRoot()
	must(t, err)
	defer r.Close()
	_, rerr := r.Open(rel)
	_, werr := r.OpenFile(filepath.Join("victim", "new.txt"), os.O_WRONLY|os.O_CREATE, 0o644)
	for _, err := range []error{rerr, werr} {
		if !isEscape(err) {
			t.Fatalf("os.Root followed a link out: %v", err)
		}
		if got := fsError("read", "victim/secret.txt", err).Error(); !strings.Contains(got, "outside the workspace root") || strings.Contains(got, f.outside) {
			t.Fatalf("escape worded as %q", got)
		}
	}
	if _, err := os.Stat(filepath.Join(f.outside, "new.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file was created outside: %v", err)
	}
}

func TestListDirShowsSortedEntriesWithDirectorySlashes(t *testing.T) {
	f := newFixture(t, Options{})
	tests := []struct {
		name    string
		args    any
		want    string
		wantErr string
	}{
		{"root by default", `{}`, ".git/\na.txt\na_link.txt\nbin.dat\ndangling_out\nempty/\nfile_out\nlink_in/\nlink_in_abs/\nlink_out\nsub/", ""},
		{"null args are the root", `null`, "a.txt", ""},
		{"subdirectory", obj{"path": "sub"}, "b.go\ndeep/", ""},
		{"through symlink inside", obj{"path": "link_in"}, "b.go\ndeep/", ""},
		{"empty directory", obj{"path": "empty"}, "(empty directory)", ""},
		{"file refused", obj{"path": "a.txt"}, "", "use read_file"},
		{"missing", obj{"path": "nope"}, "", "does not exist"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := f.call(t, t.Context(), "list_dir", tc.args)
			f.check(t, got, err, tc.want, tc.wantErr)
			if tc.name == "root by default" && got != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestSearchFindsMatchesAsPathLineText(t *testing.T) {
	f := newFixture(t, Options{})
	tests := []struct {
		name    string
		args    obj
		want    string // exact output
		wantErr string
	}{
		{"whole workspace skips binary, .git and symlinks", obj{"pattern": "beta"},
			"a.txt:2: beta\nsub/deep/c.txt:1: deep beta\n(1 binary file skipped)", ""},
		{"case-insensitive RE2", obj{"pattern": `(?i)BETA\w*`, "path": "sub"},
			"sub/b.go:3: func BetaHandler() {}\nsub/deep/c.txt:1: deep beta", ""},
		{"glob on base name", obj{"pattern": "beta", "glob": "*.txt"},
			"a.txt:2: beta\nsub/deep/c.txt:1: deep beta", ""},
		{"glob with slash on path", obj{"pattern": "beta", "glob": "sub/*/*.txt"},
			"sub/deep/c.txt:1: deep beta", ""},
		{"single file", obj{"pattern": "a$", "path": "a.txt"},
			"a.txt:1: alpha\na.txt:2: beta\na.txt:3: gamma", ""},
		{"through symlinked dir inside reports real paths", obj{"pattern": "Handler", "path": "link_in"},
			"sub/b.go:3: func BetaHandler() {}", ""},
		{"explicit .git is searched", obj{"pattern": "git", "path": ".git"},
			".git/config:1: beta in git", ""},
		{"no matches", obj{"pattern": "zeta", "path": "sub"},
			`no matches for "zeta" in 2 files under "sub"`, ""},
		{"bad regexp", obj{"pattern": "func("}, "", `invalid pattern "func(": missing closing ): ` + "`func(`"},
		{"bad glob", obj{"pattern": "x", "glob": "[a"}, "", `invalid glob "[a"`},
		{"missing path", obj{"pattern": "x", "path": "nope"}, "", "does not exist"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := f.call(t, t.Context(), "search", tc.args)
			f.check(t, got, err, tc.want, tc.wantErr)
			if tc.wantErr == "" && got != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestSearchStopsAfterMaxMatches(t *testing.T) {
	f := newFixture(t, Options{})
	must(t, os.WriteFile(filepath.Join(f.root, "many.txt"), []byte(strings.Repeat("hit\n", 500)), 0o644))
	got, err := f.call(t, t.Context(), "search", obj{"pattern": "hit", "glob": "many.*"})
	must(t, err)
	lines := strings.Split(got, "\n")
	if len(lines) != maxSearchMatches+1 {
		t.Fatalf("got %d lines, want %d matches and a note", len(lines), maxSearchMatches)
	}
	if lines[0] != "many.txt:1: hit" || !strings.HasPrefix(lines[maxSearchMatches], "[stopped after 200 matches") {
		t.Fatalf("unexpected output: first %q, last %q", lines[0], lines[maxSearchMatches])
	}
}

func TestWriteFileWritesInsideTheWorkspace(t *testing.T) {
	f := newFixture(t, Options{})
	tests := []struct {
		name     string
		args     obj
		want     string
		file     string // host path to check, relative to root
		content  string
		wantErr  string
		wantMode os.FileMode
	}{
		{"new file", obj{"path": "new.txt", "content": "hello"}, "wrote 5 bytes to new.txt", "new.txt", "hello", "", 0o644},
		{"creates parent directories", obj{"path": "x/y/z.txt", "content": "deep"}, "wrote 4 bytes to x/y/z.txt", "x/y/z.txt", "deep", "", 0},
		{"overwrites", obj{"path": "a.txt", "content": ""}, "wrote 0 bytes to a.txt", "a.txt", "", "", 0},
		{"keeps the mode of an existing file", obj{"path": "run.sh", "content": "#!/bin/sh\n"}, "wrote 10 bytes to run.sh", "run.sh", "#!/bin/sh\n", "", 0o750},
		{"through dir symlink inside", obj{"path": "link_in/new.go", "content": "package sub\n"}, "wrote 12 bytes to link_in/new.go", "sub/new.go", "package sub\n", "", 0},
		{"through absolute dir symlink inside, new dirs", obj{"path": "link_in_abs/n/m.go", "content": "m"}, "wrote 1 bytes to link_in_abs/n/m.go", "sub/n/m.go", "m", "", 0},
		{"through file symlink inside keeps the link", obj{"path": "a_link.txt", "content": "via link"}, "wrote 8 bytes to a_link.txt", "a.txt", "via link", "", 0},
		{"absolute path inside", obj{"path": filepath.Join(f.root, "abs.txt"), "content": "abs"}, "wrote 3 bytes to abs.txt", "abs.txt", "abs", "", 0},
		{"directory refused", obj{"path": "sub", "content": "x"}, "", "", "", "it is a directory", 0},
		{"root refused", obj{"path": ".", "content": "x"}, "", "", "", "workspace root directory", 0},
		{"parent is a file", obj{"path": "a_file/b.txt", "content": "x"}, "", "", "", "not a directory", 0},
	}
	must(t, os.WriteFile(filepath.Join(f.root, "run.sh"), []byte("old"), 0o750))
	must(t, os.WriteFile(filepath.Join(f.root, "a_file"), []byte("old"), 0o644))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := f.call(t, t.Context(), "write_file", tc.args)
			f.check(t, got, err, tc.want, tc.wantErr)
			if tc.wantErr != "" {
				return
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			p := filepath.Join(f.root, tc.file)
			b, err := os.ReadFile(p)
			must(t, err)
			if string(b) != tc.content {
				t.Fatalf("%s holds %q, want %q", tc.file, b, tc.content)
			}
			fi, err := os.Lstat(p)
			must(t, err)
			if !fi.Mode().IsRegular() {
				t.Fatalf("%s is %v, want a regular file", tc.file, fi.Mode())
			}
			if tc.wantMode != 0 && fi.Mode().Perm()&^0o022 != tc.wantMode&^0o022 {
				t.Fatalf("%s has mode %v, want %v", tc.file, fi.Mode().Perm(), tc.wantMode)
			}
		})
	}
	if fi, err := os.Lstat(filepath.Join(f.root, "a_link.txt")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("a_link.txt is no longer a symlink: %v", err)
	}
	// No temporary files are left behind.
	err := filepath.WalkDir(f.root, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".tmp-") {
			t.Errorf("temporary file left: %s", p)
		}
		return err
	})
	must(t, err)
}

func TestConcurrentWritesAndReadsNeverSeePartialFiles(t *testing.T) {
	f := newFixture(t, Options{})
	const n = 32 << 10
	big := func(c byte) string { return strings.Repeat(string(c), n) }
	must(t, os.WriteFile(filepath.Join(f.root, "race.txt"), []byte(big('a')), 0o644))
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			c := byte('a' + i)
			for range 10 {
				if _, err := f.call(t, t.Context(), "write_file", obj{"path": "race.txt", "content": big(c)}); err != nil {
					t.Error(err)
					return
				}
				got, err := f.call(t, t.Context(), "read_file", obj{"path": "race.txt"})
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) != n || strings.Count(got, got[:1]) != len(got) {
					t.Errorf("read a partial or mixed file of %d bytes", len(got))
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestOutputIsTruncatedWithANote(t *testing.T) {
	f := newFixture(t, Options{Shell: true, MaxReadBytes: 64, MaxOutputBytes: 100})
	lines := ""
	for i := 1; i <= 20; i++ {
		lines += fmt.Sprintf("line %02d\n", i) // 8 bytes each
	}
	must(t, os.WriteFile(filepath.Join(f.root, "lines.txt"), []byte(lines), 0o644))
	must(t, os.WriteFile(filepath.Join(f.root, "long.txt"), []byte(strings.Repeat("x", 200)+"\nnext\n"), 0o644))
	for i := range 30 {
		must(t, os.WriteFile(filepath.Join(f.root, "empty", fmt.Sprintf("file%02d.txt", i)), []byte("needle\n"), 0o644))
	}
	tests := []struct {
		name string
		tool string
		args obj
		want []string
	}{
		{"read_file cuts at a line boundary", "read_file", obj{"path": "lines.txt"},
			[]string{"line 01\n", "line 08\n[truncated: read_file returns at most 64 bytes per call; lines 1-8 shown; call read_file with offset_line=9 to continue]"}},
		{"read_file continues from the offset", "read_file", obj{"path": "lines.txt", "offset_line": 9},
			[]string{"line 09\n", "line 16\n[truncated: read_file returns at most 64 bytes per call; lines 9-16 shown; call read_file with offset_line=17 to continue]"}},
		{"read_file cuts an overlong line", "read_file", obj{"path": "long.txt"},
			[]string{strings.Repeat("x", 64) + "\n[truncated: line 1 is longer than the 64 bytes read_file returns per call and was cut; call read_file with offset_line=2 to continue after it]"}},
		{"list_dir", "list_dir", obj{"path": "empty"},
			[]string{"file00.txt\n", "[listing truncated at 100 bytes: 9 of 30 entries shown]"}},
		{"search", "search", obj{"pattern": "needle", "path": "empty"},
			[]string{"empty/file00.txt:1: needle\n", "[output truncated at 100 bytes after 3 matches; narrow the pattern, path or glob to see the rest]"}},
		{"run_shell keeps head and tail", "run_shell", obj{"command": "seq 1 1000"},
			[]string{"1\n2\n3\n", "bytes of output omitted", "999\n1000\n[exit code 0]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := f.call(t, t.Context(), tc.tool, tc.args)
			must(t, err)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Fatalf("got\n%s\nwant it to contain\n%s", got, w)
				}
			}
		})
	}
}

func TestRunShellIsOnlyPresentWhenEnabled(t *testing.T) {
	for _, shell := range []bool{false, true} {
		t.Run(fmt.Sprintf("shell=%v", shell), func(t *testing.T) {
			f := newFixture(t, Options{Shell: shell})
			if _, ok := f.tools["run_shell"]; ok != shell {
				t.Fatalf("run_shell present = %v, want %v", ok, shell)
			}
		})
	}
}

func TestNamesMatchTools(t *testing.T) {
	root := t.TempDir()
	for _, shell := range []bool{false, true} {
		tools, err := Tools(Options{Root: root, Shell: shell})
		must(t, err)
		var got []string
		for _, tl := range tools {
			got = append(got, tl.Def().Name)
		}
		if want := Names(shell); !slices.Equal(got, want) {
			t.Fatalf("shell=%v: Tools names %v, Names %v", shell, got, want)
		}
	}
}

func TestDefsAdvertiseStrictSchemas(t *testing.T) {
	f := newFixture(t, Options{Shell: true})
	wantRequired := map[string][]string{
		"read_file":  {"path"},
		"list_dir":   nil,
		"search":     {"pattern"},
		"write_file": {"path", "content"},
		"run_shell":  {"command"},
	}
	for name, req := range wantRequired {
		def := f.tools[name].Def()
		var s struct {
			Type                 string                     `json:"type"`
			Properties           map[string]json.RawMessage `json:"properties"`
			Required             []string                   `json:"required"`
			AdditionalProperties *bool                      `json:"additionalProperties"`
		}
		must(t, json.Unmarshal(def.Parameters, &s))
		if s.Type != "object" || s.AdditionalProperties == nil || *s.AdditionalProperties || !slices.Equal(s.Required, req) {
			t.Errorf("%s: schema %s", name, def.Parameters)
		}
		if len(def.Description) < 100 || strings.Contains(def.Description, f.root) {
			t.Errorf("%s: description too thin or leaks the root: %q", name, def.Description)
		}
	}
}

func TestBadArgumentsNameTheField(t *testing.T) {
	f := newFixture(t, Options{Shell: true})
	tests := []struct {
		name, tool, args, wantErr string
	}{
		{"wrong type", "read_file", `{"path": 1}`, `invalid arguments for read_file: field "path" must be a string`},
		{"number as string", "read_file", `{"path": "a.txt", "offset_line": "2"}`, `invalid arguments for read_file: field "offset_line" must be an integer`},
		{"fraction", "read_file", `{"path": "a.txt", "limit_lines": 1.5}`, `field "limit_lines" must be an integer`},
		{"below minimum", "read_file", `{"path": "a.txt", "offset_line": 0}`, `field "offset_line" must be at least 1`},
		{"unknown field", "read_file", `{"path": "a.txt", "file": "b"}`, `unknown field "file"; the allowed fields are path, offset_line, limit_lines`},
		{"missing required", "write_file", `{"path": "a.txt"}`, `invalid arguments for write_file: field "content" is required`},
		{"null required", "search", `{"pattern": null}`, `field "pattern" is required`},
		{"empty required path", "read_file", `{"path": ""}`, `field "path" must not be empty`},
		{"not an object", "list_dir", `["a"]`, `invalid arguments for list_dir: arguments must be a JSON object`},
		{"broken JSON", "run_shell", `{"command": "ls"`, `invalid arguments for run_shell: arguments are not valid JSON`},
		{"object as string", "run_shell", `{"command": {"cmd": "ls"}}`, `field "command" must be a string`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := f.call(t, t.Context(), tc.tool, tc.args)
			f.check(t, got, err, "", tc.wantErr)
		})
	}
}

func TestToolsRejectsABadRoot(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	must(t, os.WriteFile(file, nil, 0o644))
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"empty", Options{}, "Root is required"},
		{"relative", Options{Root: "rel/dir"}, "not an absolute path"},
		{"missing", Options{Root: filepath.Join(dir, "missing")}, "no such file"},
		{"a file", Options{Root: file}, "not a directory"},
		{"negative limit", Options{Root: dir, MaxReadBytes: -1}, "must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Tools(tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestToolsAcceptASymlinkedRoot(t *testing.T) {
	f := newFixture(t, Options{})
	alias := filepath.Join(filepath.Dir(f.root), "alias")
	must(t, os.Symlink(f.root, alias))
	tools, err := Tools(Options{Root: alias})
	must(t, err)
	f.tools = map[string]agent.Tool{}
	for _, tl := range tools {
		f.tools[tl.Def().Name] = tl
	}
	for _, p := range []string{"a.txt", filepath.Join(alias, "a.txt"), filepath.Join(f.root, "a.txt")} {
		got, err := f.call(t, t.Context(), "read_file", obj{"path": p})
		f.check(t, got, err, "alpha", "")
	}
	_, err = f.call(t, t.Context(), "read_file", obj{"path": "../outside/secret.txt"})
	f.check(t, "", err, "", "outside the workspace root")
}

func TestRunShell(t *testing.T) {
	t.Setenv("WORKSPACE_TEST_API_KEY", "sk-should-not-leak")
	t.Setenv("WORKSPACE_TEST_PLAIN", "visible")
	f := newFixture(t, Options{Shell: true})
	real, err := filepath.EvalSymlinks(f.root)
	must(t, err)
	tests := []struct {
		name, command, want string
	}{
		{"output and exit code", "echo out; echo err >&2", "out\nerr\n[exit code 0]"},
		{"non-zero exit", "echo failing; exit 3", "failing\n[exit code 3]"},
		{"no output", "true", "(no output)\n[exit code 0]"},
		{"runs in the root", "pwd; cat a.txt | head -1", real + "\nalpha\n[exit code 0]"},
		{"stdin is empty", "cat; echo done", "done\n[exit code 0]"},
		{"killed by a signal", "kill -9 $$", "(no output)\n[killed by signal 9 (killed)]"},
		{"credentials are not in the environment", `echo "key=$WORKSPACE_TEST_API_KEY plain=$WORKSPACE_TEST_PLAIN"`, "key= plain=visible\n[exit code 0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := f.call(t, t.Context(), "run_shell", obj{"command": tc.command})
			must(t, err)
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// waitForPgid reads the process group id the command wrote to file.
func waitForPgid(t *testing.T, file string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(file); err == nil && strings.HasSuffix(string(b), "\n") {
			pgid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			must(t, err)
			return pgid
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the command never wrote its pid")
	return 0
}

// assertGroupGone waits until no process is left in group pgid. Killed
// background processes are orphans reaped by init, which may take a moment.
func assertGroupGone(t *testing.T, pgid int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := syscall.Kill(-pgid, 0)
		if errors.Is(err, syscall.ESRCH) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still exists: kill(-pgid, 0) = %v", pgid, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRunShellKillsTheWholeProcessGroup(t *testing.T) {
	const script = "echo $$ > pgid; sleep 30 & sleep 30"
	tests := []struct {
		name    string
		timeout time.Duration
		cancel  bool
		want    string // in the output
		wantErr string
	}{
		{"on cancellation", time.Minute, true, "", "the command was cancelled and killed with its process group: context canceled"},
		{"on timeout", time.Second, false, "(no output)\n[timed out after 1 second: the command and every process it started were killed", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Options{Shell: true, ShellTimeout: tc.timeout})
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			type res struct {
				out string
				err error
			}
			done := make(chan res, 1)
			go func() {
				out, err := f.tools["run_shell"].Call(ctx, json.RawMessage(`{"command":`+strconv.Quote(script)+`}`))
				done <- res{out, err}
			}()
			pgid := waitForPgid(t, filepath.Join(f.root, "pgid"))
			if err := syscall.Kill(-pgid, 0); err != nil {
				t.Fatalf("process group %d not running: %v", pgid, err)
			}
			start := time.Now()
			if tc.cancel {
				cancel()
			}
			var r res
			select {
			case r = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("run_shell did not return within 5s")
			}
			if took := time.Since(start); took > 3*time.Second {
				t.Fatalf("run_shell took %v to return", took)
			}
			f.check(t, r.out, r.err, tc.want, tc.wantErr)
			assertGroupGone(t, pgid)
		})
	}
}

func TestRunShellKillsBackgroundProcessesLeftBehind(t *testing.T) {
	f := newFixture(t, Options{Shell: true})
	start := time.Now()
	got, err := f.call(t, t.Context(), "run_shell", obj{"command": "echo $$ > pgid; sleep 30 & echo started"})
	must(t, err)
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("run_shell waited %v for a background process", took)
	}
	if got != "started\n[exit code 0]" {
		t.Fatalf("got %q", got)
	}
	assertGroupGone(t, waitForPgid(t, filepath.Join(f.root, "pgid")))
}

func TestCallHonoursACancelledContext(t *testing.T) {
	f := newFixture(t, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := f.call(t, ctx, "read_file", obj{"path": "a.txt"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// TestWriteFileRefusesGitDirectories: a child that writes core.fsmonitor
// into .git/config has the user's next `git status` run its command, and
// one that rewrites a worktree's .git pointer file moves the server's own
// git to a repository it planted. Every path with a component naming a
// git directory is refused, however spelled; each refused path is then
// written with os.WriteFile to prove the refusal is the tool's, not the
// file system's.
func TestWriteFileRefusesGitDirectories(t *testing.T) {
	f := newFixture(t, Options{})
	must(t, os.MkdirAll(filepath.Join(f.root, "wt"), 0o755))
	must(t, os.WriteFile(filepath.Join(f.root, "wt", ".git"), []byte("gitdir: /repo/.git/worktrees/wt\n"), 0o644))
	must(t, os.MkdirAll(filepath.Join(f.root, "vendor", "lib", ".Git"), 0o755))
	must(t, os.Symlink(".git", filepath.Join(f.root, "gitlink")))
	for _, path := range []string{
		".git/config",
		".git/hooks/pre-commit",
		"./sub/../.git/config",
		".GIT/config",
		".git./config",
		"wt/.git",                // a worktree's pointer file
		"vendor/lib/.Git/config", // a nested repository
		".g\u200cit/config",      // HFS+ ignores U+200C
		"gitlink/config",         // a symlink to .git
		filepath.Join(f.root, ".git", "info", "attributes"),
	} {
		t.Run(path, func(t *testing.T) {
			host := path
			if !filepath.IsAbs(host) {
				host = filepath.Join(f.root, path)
			}
			before, _ := os.ReadFile(host)
			got, err := f.call(t, t.Context(), "write_file", obj{"path": path, "content": "[core]\n\tfsmonitor = touch /tmp/pwned\n"})
			f.check(t, got, err, "", "inside a git directory")
			shown := filepath.Clean(path)
			if filepath.IsAbs(shown) {
				shown, _ = filepath.Rel(f.root, shown)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", shown)) {
				t.Errorf("the error does not name the path: %v", err)
			}
			if after, _ := os.ReadFile(host); string(after) != string(before) {
				t.Fatalf("%s changed to %q", path, after)
			}
			// The probe: the path itself was writable.
			must(t, os.MkdirAll(filepath.Dir(host), 0o755))
			must(t, os.WriteFile(host, []byte("x"), 0o644))
		})
	}
	for _, path := range []string{".gitattributes", ".gitignore", ".github/workflows/ci.yml", "git/x", "sub/.gitx", "sub/x.git"} {
		got, err := f.call(t, t.Context(), "write_file", obj{"path": path, "content": "ok"})
		f.check(t, got, err, "wrote 2 bytes", "")
	}
}
