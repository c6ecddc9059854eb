package notrun

import (
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// tiers are the build tags of the test tiers go test ./... does not run
// (README.md, Testing).
var tiers = []string{"e2e", "realcli", "browser", "postgres"}

// countTierTests counts the Test functions under root in files that build
// with the tier tags on and not with them off (any other tag, such as
// linux or race, taken as on).
func countTierTests(t *testing.T, root string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		expr := buildExpr(f)
		if expr == nil {
			return nil
		}
		withTiers := expr.Eval(func(string) bool { return true })
		without := expr.Eval(func(tag string) bool { return !slices.Contains(tiers, tag) })
		if !withTiers || without {
			return nil
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") && fn.Name.Name != "TestMain" {
				n++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// buildExpr returns the file's //go:build constraint, or nil.
func buildExpr(f *ast.File) constraint.Expr {
	for _, g := range f.Comments {
		if g.Pos() > f.Package {
			break
		}
		for _, c := range g.List {
			if constraint.IsGoBuild(c.Text) {
				if e, err := constraint.Parse(c.Text); err == nil {
					return e
				}
			}
		}
	}
	return nil
}

func TestTheDirectoryNameCountsTheTestsGoTestDoesNotRun(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	n := countTierTests(t, filepath.Join(wd, "..", "..", ".."))
	want := strconv.Itoa(n) + "-tests-need-tags-" + strings.Join(tiers, "-") + "-see-README-Testing"
	if got := filepath.Base(wd); got != want {
		t.Errorf("%d Test functions build only under the tier tags, but this package's directory is %q:\n"+
			"git mv internal/notrun/%[2]s internal/notrun/%[3]s && sed -i s/%[2]s/%[3]s/ README.md docs/architecture.md", n, got, want)
	}
}
