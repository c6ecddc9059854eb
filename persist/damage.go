package persist

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// ErrDamaged is matched (errors.Is) by every error that reports damage
// below the value level: bbolt's page structure, which bbolt does not
// check and answers with a panic.
var ErrDamaged = errors.New("the session store file is damaged")

// DamagedError reports a damaged store file. errors.Is(err, ErrDamaged)
// and errors.Is(err, seam.ErrCorrupt) hold for it.
type DamagedError struct {
	Path  string
	Op    string // what was being done: "open", "read", "write"
	Cause string // bbolt's panic or error, clipped
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("the session store %s is damaged (%s: %s); stop the server and run `mcp-subagent doctor --data-dir %s` to copy every readable child into a fresh store",
		e.Path, e.Op, e.Cause, dirOf(e.Path))
}

// Is reports whether target is ErrDamaged or seam.ErrCorrupt.
func (e *DamagedError) Is(target error) bool {
	return target == ErrDamaged || target == seam.ErrCorrupt
}

func dirOf(path string) string {
	for i := len(path) - 1; i >= 0; i-- {
		if os.IsPathSeparator(path[i]) {
			return path[:i]
		}
	}
	return "."
}

// clip bounds a cause quoted in a DamagedError or a log.
func clip(s string) string { return truncate.Head(s, 300) }

// guard runs fn at the store boundary: a panic inside bbolt (its
// assertions on a damaged page, or a fault reading a page the file does
// not hold, which SetPanicOnFault turns into a panic) becomes a
// *DamagedError naming the file; no panic from the store reaches a
// caller's goroutine. After a panic in a write the store refuses every
// later write: bbolt may have been left holding its writer lock, and a
// write into a damaged tree could spread the damage.
func (s *Store) guard(op string, write bool, fn func() error) (err error) {
	if write {
		if d := s.damaged.Load(); d != nil {
			return d
		}
	}
	defer func() {
		if r := recover(); r != nil {
			d := &DamagedError{Path: s.path, Op: op, Cause: clip(fmt.Sprint(r))}
			s.log.Error("the session store panicked; it is damaged", "path", s.path, "op", op, "panic", d.Cause)
			if write {
				s.damaged.CompareAndSwap(nil, d)
			}
			err = d
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return fn()
}

// view and update hold dbmu for reading: only Compact, which swaps the
// file underneath, takes it for writing.
func (s *Store) view(fn func(*bolt.Tx) error) error {
	s.dbmu.RLock()
	defer s.dbmu.RUnlock()
	return s.guard("read", false, func() error { return s.db.View(fn) })
}

func (s *Store) update(fn func(*bolt.Tx) error) error {
	s.dbmu.RLock()
	defer s.dbmu.RUnlock()
	return s.guard("write", true, func() error { return s.db.Update(fn) })
}

// openBolt opens path with bbolt, turning a panic (a damaged meta or
// freelist page) into a *DamagedError. The file bbolt opened is closed on
// that path, so its lock does not outlive the failed open.
func openBolt(path string, opts bolt.Options) (db *bolt.DB, err error) {
	var file *os.File
	opts.OpenFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := os.OpenFile(name, flag, perm)
		file = f
		return f, err
	}
	defer func() {
		if r := recover(); r != nil {
			if file != nil {
				_ = file.Close()
			}
			db, err = nil, &DamagedError{Path: path, Op: "open", Cause: clip(fmt.Sprint(r))}
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return bolt.Open(path, 0o600, &opts)
}

// closeTimeout bounds Close on a store a write panic left damaged: bbolt's
// Close waits for the writer lock the panicked write may still hold.
const closeTimeout = 2 * time.Second
