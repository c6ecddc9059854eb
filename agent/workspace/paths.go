package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// confinement maps path arguments to paths relative to the workspace root.
//
// The check is done twice. resolve works on the host file system (lexical
// cleaning, then filepath.EvalSymlinks of the longest existing prefix) so
// that a refusal can be explained to the model. The file operations
// themselves then go through an [os.Root] opened on the real root, which
// refuses any escape by construction, including one introduced by a
// concurrent change between the check and the operation.
type confinement struct {
	root string // the root as configured, cleaned
	real string // the root with symlinks resolved
}

// resolve maps arg (relative to the root, or absolute inside it; "" is the
// root itself) to a clean path relative to the real root, with the symlinks
// of its existing prefix resolved, so that os.Root need not follow absolute
// symlinks (which it refuses even when they point inside). display is the
// path as the model should see it: relative to the root, symlinks not
// resolved.
func (c *confinement) resolve(arg string) (rel, display string, err error) {
	if strings.IndexByte(arg, 0) >= 0 {
		return "", "", fmt.Errorf("path %q contains a NUL byte; use a plain file path", arg)
	}
	p := arg
	if p == "" {
		p = "."
	}
	var lex string
	if filepath.IsAbs(p) {
		p = filepath.Clean(p)
		var ok bool
		if lex, ok = within(c.root, p); !ok {
			if lex, ok = within(c.real, p); !ok {
				// Perhaps an alias of the root through some symlink.
				if lex, ok = within(c.real, evalExisting(p)); !ok {
					return "", "", outsideError(arg)
				}
			}
		}
	} else {
		lex = filepath.Clean(p)
		if escapes(lex) {
			return "", "", outsideError(arg)
		}
	}
	rel, ok := within(c.real, evalExisting(filepath.Join(c.real, lex)))
	if !ok {
		return "", "", symlinkError(arg)
	}
	return rel, filepath.ToSlash(lex), nil
}

// within returns p relative to base if p (absolute, clean) lies in base.
func within(base, p string) (string, bool) {
	rel, err := filepath.Rel(base, p)
	if err != nil || escapes(rel) {
		return "", false
	}
	return rel, true
}

// escapes reports whether the clean relative path rel leaves its base.
func escapes(rel string) bool {
	return rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel)
}

// evalExisting resolves the symlinks of the longest prefix of the absolute
// path p that resolves, and appends the rest unchanged. The rest names
// nothing that exists yet (or something os.Root will judge when it is
// used, such as a dangling symlink).
func evalExisting(p string) string {
	cur, rest := p, ""
	for {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// gitDirError refuses a write whose path (lexical: as given, cleaned and
// relative to the root, which the error names; rel: as resolved through
// symbolic links) has a component that names a git
// directory: git runs commands named in the files there (core.fsmonitor,
// hooks, filter drivers in .git/config), so a child that could write them
// would have the user's next `git status`, or the server's own git, run
// its code. A worktree's .git pointer file is covered the same way. Names
// are compared as a case-insensitive file system would (and HFS+, which
// ignores some invisible code points, and Windows, which drops trailing
// dots and spaces): ".GIT" or ".git." is refused too. Nil when no
// component is such a name.
func gitDirError(verb, lexical, rel string) error {
	for _, p := range []string{lexical, rel} {
		for _, c := range strings.Split(filepath.ToSlash(p), "/") {
			if isDotGit(c) {
				return fmt.Errorf("cannot %s %q: it is inside a git directory (the component %q); the file tools never write git's own files, "+
					"because git runs commands named in them (hooks, core.fsmonitor, filters); write the project's files instead", verb, lexical, c)
			}
		}
	}
	return nil
}

// isDotGit reports whether the path component c names ".git" on some file
// system: case folded, invisible code points HFS+ ignores removed,
// trailing dots and spaces (which Windows drops) trimmed.
func isDotGit(c string) bool {
	if len(c) < 4 {
		return false
	}
	c = strings.Map(func(r rune) rune {
		switch {
		case r >= 0x200c && r <= 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x206a && r <= 0x206f, r == 0xfeff:
			return -1
		}
		return r
	}, c)
	return strings.EqualFold(strings.TrimRight(c, ". "), ".git")
}

func outsideError(arg string) error {
	return fmt.Errorf("path %q is outside the workspace root; use a path inside the workspace, relative to its root (for example \".\" or \"src/main.go\")", arg)
}

func symlinkError(arg string) error {
	return fmt.Errorf("path %q leads through a symbolic link to a location outside the workspace root, which is not accessible; use a path whose real location is inside the workspace", arg)
}

// isEscape reports whether err is os.Root refusing a path that escapes it.
// The os package does not export that error, so match its text.
func isEscape(err error) bool {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return err != nil && err.Error() == "path escapes from parent"
}

// fsError words a file system error about the path arg for the model. It
// never includes host paths: only arg and the bare system error text.
func fsError(verb, arg string, err error) error {
	switch {
	case isEscape(err):
		return symlinkError(arg)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("cannot %s %q: it does not exist in the workspace; use list_dir or search to find the right path", verb, arg)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("cannot %s %q: permission denied", verb, arg)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("cannot %s %q: a component of the path is a file, not a directory", verb, arg)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("cannot %s %q: too many levels of symbolic links", verb, arg)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return fmt.Errorf("cannot %s %q: the path is too long", verb, arg)
	}
	return fmt.Errorf("cannot %s %q: %s", verb, arg, bareError(err))
}

// bareError strips the path (which may be a host path) from err.
func bareError(err error) string {
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		return pe.Err.Error()
	case errors.As(err, &le):
		return le.Err.Error()
	}
	return err.Error()
}

// openRoot opens the real root for one call. Opening per call keeps the
// tools free of state that would need closing.
func (c *confinement) openRoot() (*os.Root, error) {
	r, err := os.OpenRoot(c.real)
	if err != nil {
		return nil, fmt.Errorf("the workspace root is not accessible: %s", bareError(err))
	}
	return r, nil
}
