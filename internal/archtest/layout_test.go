package archtest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// layout returns the package directories README.md's Layout section names:
// the first field of each line of its code block that does not start with
// a space (a line that does continues the one above), trailing slash
// dropped.
func layout(readme string) ([]string, error) {
	i := strings.Index(readme, "\n## Layout\n")
	if i < 0 {
		return nil, fmt.Errorf("README.md has no \"## Layout\" section")
	}
	sec := readme[i+len("\n## Layout\n"):]
	if j := strings.Index(sec, "\n## "); j >= 0 {
		sec = sec[:j]
	}
	open := strings.Index(sec, "```\n")
	if open < 0 {
		return nil, fmt.Errorf("README.md's Layout section has no code block")
	}
	block := sec[open+len("```\n"):]
	end := strings.Index(block, "```")
	if end < 0 {
		return nil, fmt.Errorf("README.md's Layout section: the code block is not closed")
	}
	var dirs []string
	for _, line := range strings.Split(block[:end], "\n") {
		if line == "" || line[0] == ' ' {
			continue
		}
		dirs = append(dirs, strings.TrimSuffix(strings.Fields(line)[0], "/"))
	}
	return dirs, nil
}

// layoutDiff returns how the named directories and the packages differ:
// a package not named, a name that is no package, a name given twice.
func layoutDiff(named, pkgs []string) []string {
	var bad []string
	count := map[string]int{}
	for _, d := range named {
		count[d]++
	}
	for _, p := range pkgs {
		if count[p] == 0 {
			bad = append(bad, fmt.Sprintf("package %s is missing from README.md's Layout section: add a line for it", p))
		}
	}
	for d, n := range count {
		switch {
		case !slices.Contains(pkgs, d):
			bad = append(bad, fmt.Sprintf("README.md's Layout section names %s/, which is not a package: remove or correct its line", d))
		case n > 1:
			bad = append(bad, fmt.Sprintf("README.md's Layout section names %s/ %d times: keep one line", d, n))
		}
	}
	sort.Strings(bad)
	return bad
}

// TestReadmeLayoutNamesEveryPackage holds README.md's Layout section to
// the tree: one line for every package, none for a package that is gone.
func TestReadmeLayoutNamesEveryPackage(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	named, err := layout(string(b))
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	for _, p := range listPackages(t) {
		pkgs = append(pkgs, p.path)
	}
	for _, bad := range layoutDiff(named, pkgs) {
		t.Error(bad)
	}
}

// TestTheLayoutCheckCatches: the parser reads a section shaped like the
// README's, and the check reports a missing package, a stale line and a
// doubled one.
func TestTheLayoutCheckCatches(t *testing.T) {
	const readme = "# x\n\n## Layout\n\nText.\n\n```\nmanager/      the lifecycle\n              continued: not/a/package\npersist/      the store\npersist/\n```\n\nAfter.\n\n## Testing\n\n```\ngone/   not in Layout\n```\n"
	named, err := layout(readme)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"manager", "persist", "persist"}; !slices.Equal(named, want) {
		t.Fatalf("layout read %q, want %q", named, want)
	}
	bad := layoutDiff(named, []string{"manager", "tools"})
	for _, want := range []string{"package tools is missing", "names persist/, which is not a package"} {
		if !slices.ContainsFunc(bad, func(b string) bool { return strings.Contains(b, want) }) {
			t.Errorf("layoutDiff found %q, want one containing %q", bad, want)
		}
	}
	if bad := layoutDiff([]string{"manager", "manager"}, []string{"manager"}); len(bad) != 1 || !strings.Contains(bad[0], "2 times") {
		t.Errorf("a doubled line: layoutDiff found %q", bad)
	}
	if _, err := layout("# x\n\n## Testing\n"); err == nil {
		t.Error("a README without a Layout section was read as naming nothing")
	}
}
