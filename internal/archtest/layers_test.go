package archtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// root is the module's root directory, relative to this package's.
const root = "../.."

// libraries are the outside libraries of note a layer's May link column
// names, by the word it uses.
var libraries = map[string][]string{
	"MCP library": {"github.com/mark3labs/mcp-go", "github.com/modelcontextprotocol/go-sdk"},
	"vendor SDK":  {"github.com/openai/openai-go", "github.com/anthropics/anthropic-sdk-go"},
}

// layer is one row of docs/architecture.md's layer table.
type layer struct {
	name    string
	imports map[string]bool // the layers it may import
	links   map[string]bool // the words of libraries it may link
}

// arch is what docs/architecture.md says: the layers, and each package's
// layer (by its path inside the module).
type arch struct {
	layers map[string]layer
	order  []string          // layer names, bottom up
	place  map[string]string // package → layer
	// allowed are the known exceptions: imports the layers forbid that the
	// doc lists, each with the issue that will remove it ("from → to").
	allowed map[string]bool
}

// pkg is what go list says of one of the module's packages.
type pkg struct {
	path    string   // inside the module: "manager", "persist/pgstore"
	imports []string // the module's packages it imports (non-test files)
	deps    []string // every package it links (non-test files)
	files   []string // its non-test Go files, absolute
}

// table returns the rows of the markdown table between the markers
// <!-- archtest:name --> and <!-- /archtest:name -->, header and rule
// dropped, each as its trimmed cells with backquotes removed.
func table(doc, name string) ([][]string, error) {
	open, end := "<!-- archtest:"+name+" -->", "<!-- /archtest:"+name+" -->"
	i, j := strings.Index(doc, open), strings.Index(doc, end)
	if i < 0 || j < i {
		return nil, fmt.Errorf("no %s table: want it between %s and %s", name, open, end)
	}
	var rows [][]string
	for n, line := range strings.Split(strings.TrimSpace(doc[i+len(open):j]), "\n") {
		line = strings.TrimSpace(line)
		if n < 2 { // the header and the |---| rule
			continue
		}
		if !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") {
			return nil, fmt.Errorf("%s table: %q is not a table row", name, line)
		}
		var cells []string
		for _, c := range strings.Split(line[1:len(line)-1], "|") {
			cells = append(cells, strings.TrimSpace(strings.ReplaceAll(c, "`", "")))
		}
		rows = append(rows, cells)
	}
	return rows, nil
}

// list splits a cell such as "base, contracts" into its items; "—" is none.
func list(cell string) map[string]bool {
	set := map[string]bool{}
	for _, f := range strings.Split(cell, ",") {
		if f = strings.TrimSpace(f); f != "" && f != "—" {
			set[f] = true
		}
	}
	return set
}

// parseArch reads the layer and package tables of docs/architecture.md and
// checks that they are a layering: every layer a row names exists and is
// not above the row, every word in May link is known, every package is
// placed once in a layer that exists.
func parseArch(doc string) (arch, error) {
	a := arch{layers: map[string]layer{}, place: map[string]string{}, allowed: map[string]bool{}}
	rows, err := table(doc, "layers")
	if err != nil {
		return a, err
	}
	for _, r := range rows {
		if len(r) != 3 {
			return a, fmt.Errorf("layers table: row %q has %d cells, want 3 (Layer, May import, May link)", r, len(r))
		}
		l := layer{name: r[0], imports: list(r[1]), links: list(r[2])}
		if _, dup := a.layers[l.name]; dup || l.name == "" {
			return a, fmt.Errorf("layers table: layer %q is named twice or empty", l.name)
		}
		for name := range l.imports {
			if _, below := a.layers[name]; !below && name != l.name {
				return a, fmt.Errorf("layers table: %s may import %s, which is not a layer below it (rows run bottom up)", l.name, name)
			}
		}
		for w := range l.links {
			if libraries[w] == nil {
				return a, fmt.Errorf("layers table: %s may link %q, which is not one of the library words (MCP library, vendor SDK)", l.name, w)
			}
		}
		a.layers[l.name] = l
		a.order = append(a.order, l.name)
	}
	rows, err = table(doc, "packages")
	if err != nil {
		return a, err
	}
	for _, r := range rows {
		if len(r) != 3 {
			return a, fmt.Errorf("packages table: row %q has %d cells, want 3 (Package, Layer, Owns)", r, len(r))
		}
		p, l := r[0], r[1]
		if _, ok := a.layers[l]; !ok {
			return a, fmt.Errorf("packages table: %s is in layer %q, which the layers table does not have", p, l)
		}
		if _, dup := a.place[p]; dup {
			return a, fmt.Errorf("packages table: %s is placed twice", p)
		}
		if r[2] == "" {
			return a, fmt.Errorf("packages table: %s does not say what it owns", p)
		}
		a.place[p] = l
	}
	rows, err = table(doc, "exceptions")
	if err != nil {
		return a, err
	}
	for _, r := range rows {
		if len(r) != 3 || r[0] == "" || r[1] == "" || r[2] == "" {
			return a, fmt.Errorf("exceptions table: row %q must have 3 cells (Package, Imports, Until), none empty", r)
		}
		a.allowed[r[0]+" → "+r[1]] = true
	}
	return a, nil
}

// check returns every way pkgs disagree with a: a package without a row, a
// row without a package, an import the importer's layer may not make, and
// a library linked that the package's layer may not link.
func check(a arch, pkgs []pkg) []string {
	var bad []string
	seen, used := map[string]bool{}, map[string]bool{}
	for _, p := range pkgs {
		seen[p.path] = true
		l, ok := a.place[p.path]
		if !ok {
			bad = append(bad, fmt.Sprintf("%s has no row in docs/architecture.md's packages table: give it one (its layer and what it owns)", p.path))
			continue
		}
		for _, imp := range p.imports {
			il, ok := a.place[imp]
			if !ok {
				continue // reported as a package without a row
			}
			if exc := p.path + " → " + imp; a.allowed[exc] {
				used[exc] = true
			} else if !a.layers[l].imports[il] {
				bad = append(bad, fmt.Sprintf("%s (layer %s) imports %s (layer %s); %s may import only %s", p.path, l, imp, il, l, names(a.layers[l].imports)))
			}
		}
		for w, mods := range libraries {
			if a.layers[l].links[w] {
				continue
			}
			for _, d := range p.deps {
				if m := libModule(d, mods); m != "" {
					bad = append(bad, fmt.Sprintf("%s (layer %s) links %s (%s, through %s); layer %s may not link one", p.path, l, m, w, d, l))
					break
				}
			}
		}
	}
	for p := range a.place {
		if !seen[p] {
			bad = append(bad, fmt.Sprintf("docs/architecture.md places %s, which is not a package: remove its row", p))
		}
	}
	for exc := range a.allowed {
		if !used[exc] {
			bad = append(bad, fmt.Sprintf("docs/architecture.md lists the exception %s, which no longer holds: remove its row", exc))
		}
	}
	sort.Strings(bad)
	return bad
}

// libModule returns the module of mods that dep belongs to, or "".
func libModule(dep string, mods []string) string {
	for _, m := range mods {
		if dep == m || strings.HasPrefix(dep, m+"/") {
			return m
		}
	}
	return ""
}

func names(set map[string]bool) string {
	var s []string
	for n := range set {
		s = append(s, n)
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

// listPackages runs go list -json ./... at the module's root and returns
// its packages, each with its imports of the module and its deps.
func listPackages(t *testing.T) []pkg {
	t.Helper()
	trackInputs(t)
	gobin := goBinary(t)
	cmd := exec.Command(gobin, "list", "-json", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -json ./...: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			ImportPath string
			Dir        string
			GoFiles    []string
			Imports    []string
			Deps       []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list -json ./...: %v", err)
		}
		q := pkg{path: strings.TrimPrefix(p.ImportPath, module), deps: p.Deps}
		for _, f := range p.GoFiles {
			q.files = append(q.files, filepath.Join(p.Dir, f))
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module) {
				q.imports = append(q.imports, strings.TrimPrefix(imp, module))
			}
		}
		pkgs = append(pkgs, q)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list -json ./... listed no package")
	}
	return pkgs
}

// trackInputs stats every Go file, go.mod and go.sum of the module and
// reads every directory, so that go test's cache, which keys a test's
// result on the files and directories it touched, reruns these tests when
// a package, an import or a file changes: the go list they run is a
// subprocess the cache cannot see into.
func trackInputs(t *testing.T) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") || name == "go.mod" || name == "go.sum" {
			_, err = os.Stat(path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func readArch(t *testing.T) arch {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := parseArch(string(b))
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	return a
}

// TestPackagesKeepToTheirLayers holds the tree to docs/architecture.md:
// every package has a row, every row a package, no import goes where the
// importer's layer may not, no package links a library its layer may not.
func TestPackagesKeepToTheirLayers(t *testing.T) {
	for _, b := range check(readArch(t), listPackages(t)) {
		t.Error(b)
	}
}

// TestTheLayerCheckCatches plants each kind of disagreement in a small
// architecture and a fake package list, so a checker that reads nothing
// cannot pass for a tree that keeps to its layers.
func TestTheLayerCheckCatches(t *testing.T) {
	const doc = `
<!-- archtest:layers -->
| Layer | May import | May link |
|---|---|---|
| base | base | — |
| stores | base | — |
| core | base | — |
| edge | base, core, edge | MCP library |
| testing | base, stores, core, edge, testing | MCP library, vendor SDK |
<!-- /archtest:layers -->

<!-- archtest:packages -->
| Package | Layer | Owns |
|---|---|---|
| ` + "`llm`" + ` | base | messages |
| ` + "`persist`" + ` | stores | bbolt |
| ` + "`persist/pgstore`" + ` | stores | postgres |
| ` + "`manager`" + ` | core | lifecycle |
| ` + "`tools`" + ` | edge | MCP surface |
| ` + "`internal/fakeopenai`" + ` | testing | fake |
<!-- /archtest:packages -->

<!-- archtest:exceptions -->
| Package | Imports | Until |
|---|---|---|
| ` + "`persist`" + ` | ` + "`manager`" + ` | issue 1 |
<!-- /archtest:exceptions -->
`
	a, err := parseArch(doc)
	if err != nil {
		t.Fatal(err)
	}
	clean := func() []pkg {
		return []pkg{
			{path: "llm"},
			{path: "persist", imports: []string{"llm", "manager"}},
			{path: "persist/pgstore", imports: []string{"llm"}},
			{path: "manager", imports: []string{"llm"}},
			{path: "tools", imports: []string{"manager", "llm"}, deps: []string{"github.com/mark3labs/mcp-go/mcp"}},
			{path: "internal/fakeopenai", imports: []string{"tools"}, deps: []string{"github.com/openai/openai-go/v3"}},
		}
	}
	if bad := check(a, clean()); len(bad) > 0 {
		t.Fatalf("the clean tree fails: %v", bad)
	}
	// Each case adds one import or one linked package to the package at
	// index at, or plants by hand.
	for _, tc := range []struct {
		name     string
		at       int
		imp, dep string
		plant    func([]pkg) []pkg
		want     string
	}{
		{name: "an import from a higher layer (the manager imports the edge)", at: 3, imp: "tools",
			want: "manager (layer core) imports tools (layer edge)"},
		{name: "an import from a layer beside it (the manager imports a store)", at: 3, imp: "persist",
			want: "manager (layer core) imports persist (layer stores)"},
		{name: "an import within a layer that does not name itself (one store backend imports another)", at: 2, imp: "persist",
			want: "persist/pgstore (layer stores) imports persist (layer stores)"},
		{name: "a production package imports a test helper", at: 4, imp: "internal/fakeopenai",
			want: "tools (layer edge) imports internal/fakeopenai (layer testing)"},
		{name: "the core links an MCP library", at: 3, dep: "github.com/mark3labs/mcp-go/server",
			want: "manager (layer core) links github.com/mark3labs/mcp-go (MCP library"},
		{name: "the edge links a vendor SDK", at: 4, dep: "github.com/anthropics/anthropic-sdk-go/v2/option",
			want: "tools (layer edge) links github.com/anthropics/anthropic-sdk-go (vendor SDK"},
		{name: "a package the doc does not place", plant: func(p []pkg) []pkg {
			return append(p, pkg{path: "manager/admission", imports: []string{"llm"}})
		}, want: "manager/admission has no row"},
		{name: "an exception that no longer holds", plant: func(p []pkg) []pkg {
			p[1].imports = []string{"llm"}
			return p
		}, want: "the exception persist → manager, which no longer holds"},
		{name: "a row whose package is gone", plant: func(p []pkg) []pkg {
			return slices.Delete(p, 2, 3)
		}, want: "places persist/pgstore, which is not a package"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := clean()
			switch {
			case tc.plant != nil:
				p = tc.plant(p)
			case tc.imp != "":
				p[tc.at].imports = append(p[tc.at].imports, tc.imp)
			default:
				p[tc.at].deps = append(p[tc.at].deps, tc.dep)
			}
			bad := check(a, p)
			if !slices.ContainsFunc(bad, func(b string) bool { return strings.Contains(b, tc.want) }) {
				t.Errorf("check found %q, want one containing %q", bad, tc.want)
			}
		})
	}
}

// TestTheLayerTableMustBeALayering: a table whose layer may import one
// above it, names an unknown layer or library, or places a package in a
// layer it does not have is refused, not read as a permission.
func TestTheLayerTableMustBeALayering(t *testing.T) {
	const head = "<!-- archtest:layers -->\n| Layer | May import | May link |\n|---|---|---|\n"
	const pkgs = "<!-- archtest:packages -->\n| Package | Layer | Owns |\n|---|---|---|\n"
	for _, tc := range []struct{ name, doc, want string }{
		{"a layer may import one above it", head + "| base | base, core | — |\n| core | base, core | — |\n<!-- /archtest:layers -->\n" + pkgs + "<!-- /archtest:packages -->", "base may import core"},
		{"an unknown library word", head + "| base | base | gRPC |\n<!-- /archtest:layers -->\n" + pkgs + "<!-- /archtest:packages -->", `may link "gRPC"`},
		{"a package in a layer that does not exist", head + "| base | base | — |\n<!-- /archtest:layers -->\n" + pkgs + "| `llm` | leaves | messages |\n<!-- /archtest:packages -->", `layer "leaves"`},
		{"a package placed twice", head + "| base | base | — |\n<!-- /archtest:layers -->\n" + pkgs + "| `llm` | base | a |\n| `llm` | base | b |\n<!-- /archtest:packages -->", "placed twice"},
		{"no exceptions table", head + "| base | base | — |\n<!-- /archtest:layers -->\n" + pkgs + "<!-- /archtest:packages -->", "no exceptions table"},
		{"no packages table", head + "| base | base | — |\n<!-- /archtest:layers -->\n", "no packages table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := parseArch(tc.doc); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parseArch: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// scanFiles calls found for each non-test Go file of the packages keep
// accepts whose bytes match, and fails when it read too few files for an
// empty answer to mean anything.
func scanFiles(t *testing.T, keep func(path string) bool, match func([]byte) bool, found func(file string)) {
	t.Helper()
	checked := 0
	for _, p := range listPackages(t) {
		if !keep(p.path) {
			continue
		}
		for _, f := range p.files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			checked++
			if match(b) {
				found(f)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked %d files; the probe reads too little to mean anything", checked)
	}
}

// TestOnlyTheCommandNamesStdout: in stdio mode stdout carries the protocol,
// so no production package but the command may write to it; a library
// that logs takes a *slog.Logger. Fakes and harnesses (the testing layer)
// may: a fake ACP agent speaks on its own stdout.
func TestOnlyTheCommandNamesStdout(t *testing.T) {
	a := readArch(t)
	scanFiles(t, func(p string) bool { return a.place[p] != "command" && a.place[p] != "testing" },
		func(b []byte) bool { return bytes.Contains(b, []byte("os.Stdout")) },
		func(f string) {
			t.Errorf("%s names os.Stdout; stdout is the protocol's in stdio mode: log through a *slog.Logger (stderr) instead", f)
		})
}

// TestNoInitFunctions: wiring happens in main, where it can be read; no
// package does work on import (STYLE.md §3).
func TestNoInitFunctions(t *testing.T) {
	scanFiles(t, func(string) bool { return true },
		func(b []byte) bool {
			return bytes.HasPrefix(b, []byte("func init()")) || bytes.Contains(b, []byte("\nfunc init()"))
		},
		func(f string) {
			t.Errorf("%s has an init function; do the work where the value is built (main, or a constructor)", f)
		})
}
