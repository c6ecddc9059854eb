package workspace

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/mcp-subagent/mcp-subagent/agent"
)

const (
	maxShownLine  = 300     // bytes of a matching line shown
	maxSearchLine = 1 << 20 // lines longer than this end the search of a file
)

func (w *workspace) searchTool() agent.Tool {
	params := []param{
		{name: "pattern", kind: kindString, required: true, nonEmpty: true,
			desc: "A regular expression in Go RE2 syntax (no backreferences or lookaround), matched against each line; e.g. \"func \\\\w+Handler\" or \"(?i)todo\"."},
		{name: "path", kind: kindString,
			desc: "The directory to search recursively, or a single file, relative to the workspace root. Default \".\", the whole workspace."},
		{name: "glob", kind: kindString,
			desc: "Only search files whose name matches this glob, e.g. \"*.go\". A glob containing \"/\" is matched against the whole path relative to the workspace root instead; \"**\" is not supported."},
	}
	desc := fmt.Sprintf("Search the contents of the files under a path in the workspace for a regular expression and print one line per matching line, "+
		"as \"path:line: text\" with path relative to the workspace root and lines counted from 1. "+
		"Files are visited in name order; binary files, .git directories and symbolic links are skipped. "+
		"The search stops after %d matches or %s of output (narrow pattern, path or glob to see more); matching lines are shown up to %d bytes.",
		maxSearchMatches, size(w.maxOutput), maxShownLine)
	return newTool(nameSearch, desc, params, w.search)
}

// searchResult accumulates the output of one search.
type searchResult struct {
	out                         strings.Builder
	max                         int
	matches, files              int
	binary, unreadable, tooLong int
	full                        string // why the search stopped early
}

func (w *workspace) search(ctx context.Context, a args) (string, error) {
	pattern, glob := a.str("pattern", ""), a.str("glob", "")
	re, err := regexp.Compile(pattern)
	if err != nil {
		return "", fmt.Errorf("invalid pattern %q: %s (patterns use Go RE2 syntax; escape characters such as ( [ . * + ? with a backslash to match them literally)",
			pattern, strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	if _, err := path.Match(glob, ""); err != nil {
		return "", fmt.Errorf("invalid glob %q: %v; use a pattern such as \"*.go\"", glob, err)
	}
	arg := a.str("path", ".")
	rel, _, err := w.resolve(arg)
	if err != nil {
		return "", err
	}
	r, err := w.openRoot()
	if err != nil {
		return "", err
	}
	defer r.Close()
	start := filepath.ToSlash(rel)
	fsys := r.FS()
	st, err := fs.Stat(fsys, start)
	if err != nil {
		return "", fsError("search", arg, err)
	}
	res := &searchResult{max: w.maxOutput}
	if !st.IsDir() {
		// A file named explicitly is searched whatever the glob says.
		if err := res.file(ctx, r, start, re); err != nil {
			return "", err
		}
	} else {
		err := fs.WalkDir(fsys, start, func(p string, d fs.DirEntry, err error) error {
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			if err != nil {
				if p == start {
					return err
				}
				res.unreadable++
				return nil
			}
			if d.IsDir() {
				if d.Name() == ".git" && p != start {
					return fs.SkipDir
				}
				return nil
			}
			if !d.Type().IsRegular() || !globMatch(glob, p) {
				return nil
			}
			if err := res.file(ctx, r, p, re); err != nil {
				return err
			}
			if res.full != "" {
				return fs.SkipAll
			}
			return nil
		})
		if err != nil {
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			return "", fsError("search", arg, err)
		}
	}
	return res.String(pattern, arg), nil
}

// globMatch matches glob against the base name of p, or against all of p
// (slash-separated, relative to the root) when glob contains a slash.
func globMatch(glob, p string) bool {
	if glob == "" {
		return true
	}
	name := path.Base(p)
	if strings.Contains(glob, "/") {
		name = p
	}
	ok, _ := path.Match(glob, name)
	return ok
}

// file searches one file. It returns only cancellation errors: a file that
// cannot be read is counted and skipped.
func (res *searchResult) file(ctx context.Context, r *os.Root, p string, re *regexp.Regexp) error {
	f, err := r.OpenFile(filepath.FromSlash(p), openReadFlags, 0)
	if err != nil {
		res.unreadable++
		return nil
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	br := bufio.NewReaderSize(f, 64<<10)
	if isBinary(br) {
		res.binary++
		return nil
	}
	res.files++
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 0, 64<<10), maxSearchLine)
	for n := 1; sc.Scan(); n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		line := sc.Bytes()
		if !re.Match(line) {
			continue
		}
		text := strings.TrimRight(string(line), "\r")
		if len(text) > maxShownLine {
			text = string(cutUTF8([]byte(text), maxShownLine)) + "…"
		}
		entry := fmt.Sprintf("%s:%d: %s\n", p, n, validUTF8(text))
		if res.out.Len()+len(entry) > res.max {
			res.full = fmt.Sprintf("[output truncated at %s after %d matches; narrow the pattern, path or glob to see the rest]", size(res.max), res.matches)
			return nil
		}
		res.out.WriteString(entry)
		res.matches++
		if res.matches >= maxSearchMatches {
			res.full = fmt.Sprintf("[stopped after %d matches; there may be more: narrow the pattern, path or glob to see the rest]", maxSearchMatches)
			return nil
		}
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		res.tooLong++
	} else if sc.Err() != nil {
		res.unreadable++
	}
	return nil
}

func (res *searchResult) String(pattern, arg string) string {
	var skipped []string
	if res.binary > 0 {
		skipped = append(skipped, plural(res.binary, "binary file")+" skipped")
	}
	if res.unreadable > 0 {
		skipped = append(skipped, plural(res.unreadable, "entry")+" could not be read")
	}
	if res.tooLong > 0 {
		skipped = append(skipped, plural(res.tooLong, "file")+fmt.Sprintf(" searched only up to a line longer than %s", size(maxSearchLine)))
	}
	var b strings.Builder
	if res.matches == 0 && res.full == "" {
		fmt.Fprintf(&b, "no matches for %q in %s under %q", pattern, plural(res.files, "file"), arg)
	} else {
		b.WriteString(res.out.String())
		if res.full != "" {
			b.WriteString(res.full)
		}
	}
	if len(skipped) > 0 {
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "(%s)", strings.Join(skipped, "; "))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// plural renders "1 file", "2 files", "3 entries".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "y") {
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(noun, "y"))
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
