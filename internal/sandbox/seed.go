package sandbox

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// SeedCache fills dst, which must not exist, with a copy of the tree seed:
// a build cache the server filled (never a command), so that a child's
// first build does not compile what every build needs (Go's standard
// library: minutes on a busy machine). A copy, not links: a command can
// write its own cache, and through a hard link it would write the seed
// every other child copies (file modes do not stop it: it may chmod what
// it owns). Each file is cloned where the file system can (reflink: no
// data copied), else copied. The tree is made beside dst and renamed into
// place, so that dst is whole or absent; when dst appeared meanwhile (a
// second command of the same child), that one is kept.
func SeedCache(dst, seed string) error {
	if _, err := os.Stat(seed); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".seeding-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	err = filepath.WalkDir(seed, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(seed, path)
		if err != nil {
			return err
		}
		to := filepath.Join(tmp, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o700)
		case d.Type().IsRegular():
			return cloneFile(to, path)
		}
		return nil // links and the rest: a build cache has none
	})
	if err != nil {
		return fmt.Errorf("seeding %s from %s: %w", dst, seed, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		if _, serr := os.Stat(dst); serr == nil {
			return nil
		}
		return err
	}
	return nil
}

// cloneFile makes to a copy of from (mode 0600).
func cloneFile(to, from string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if reflink(out, in) == nil {
		return out.Close()
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}

// RemoveAll is os.RemoveAll, also where a command took away its own write
// permission from directories in dir (chmod -w; Go's module cache is
// read-only): a command's temp dir, a pruned child's caches.
func RemoveAll(dir string) error {
	if os.RemoveAll(dir) == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
