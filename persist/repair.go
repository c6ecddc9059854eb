package persist

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// RepairReport says what Repair did.
type RepairReport struct {
	Path   string // the store file: now the fresh copy
	Backup string // the original, kept as it was
	// Children is the number of children copied whole; Partial those
	// copied with a shortened journal or without their inbox.
	Children, Partial int
	Notices           int      // queued notices copied
	Lost              []string // what could not be read, one line each
}

// Repair copies every readable child of the store in dir — header,
// descriptor, journal, inbox, claim (active mark) — and every readable queued
// notice into a fresh store file that takes the original's place; the
// original is kept beside it as FileName.corrupt-<UTC time>. It reads
// the original through bbolt read-only and survives bbolt's panics on
// damaged pages, one child at a time: a damaged page costs the children
// whose data is on it, never the others. A journal is copied up to its
// first unreadable event. Checkpoints are not copied (a listing rebuilds
// them).
//
// Repair refuses to run while another process holds the store (a
// *LockedError). It returns an error only when it could not produce a
// fresh store; what it could not read is in the report.
func Repair(dir string, opts Options) (*RepairReport, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	path := filepath.Join(dir, FileName)
	lock, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("persist: repair: %w", err)
	}
	defer lock.Close()
	if err := lockFile(lock, opts.LockTimeout); err != nil {
		return nil, &LockedError{Dir: dir, Timeout: opts.LockTimeout}
	}
	rep := &RepairReport{Path: path, Backup: path + ".corrupt-" + time.Now().UTC().Format("20060102T150405Z")}
	if err := copyFile(lock, rep.Backup); err != nil {
		return nil, fmt.Errorf("persist: repair: keeping the original as %s: %w", rep.Backup, err)
	}
	tmp, err := os.MkdirTemp(dir, ".repair-")
	if err != nil {
		return nil, fmt.Errorf("persist: repair: %w", err)
	}
	defer os.RemoveAll(tmp)
	fresh, err := Open(tmp, Options{Logger: opts.Logger})
	if err != nil {
		return nil, fmt.Errorf("persist: repair: the fresh store: %w", err)
	}
	src, err := openBolt(rep.Backup, bolt.Options{ReadOnly: true, Timeout: opts.LockTimeout})
	if err != nil {
		rep.Lost = append(rep.Lost, fmt.Sprintf("everything: the file cannot be opened (%v)", err))
	} else {
		salvage(src, fresh, rep)
		_ = src.Close()
	}
	if err := fresh.Close(); err != nil {
		return nil, fmt.Errorf("persist: repair: closing the fresh store: %w", err)
	}
	if err := os.Rename(filepath.Join(tmp, FileName), path); err != nil {
		return nil, fmt.Errorf("persist: repair: putting the fresh store in place: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return rep, nil
}

// lockFile takes the exclusive lock bbolt takes, so a running server
// (or another repair) keeps its store.
func lockFile(f *os.File, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil || !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func copyFile(src *os.File, to string) error {
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, io.NewSectionReader(src, 0, 1<<62)); err != nil {
		dst.Close()
		return err
	}
	if err := dst.Sync(); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// readSafely runs a read transaction, turning a bbolt panic into an error.
func readSafely(db *bolt.DB, fn func(tx *bolt.Tx) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("damaged page: %s", clip(fmt.Sprint(r)))
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return db.View(fn)
}

// salvaged is one child as read from the damaged file.
type salvaged struct {
	h       seam.Header
	d       seam.Descriptor
	events  []agent.Event
	inbox   []seam.QueuedMessage
	active  bool
	partial bool
}

func salvage(src *bolt.DB, dst *Store, rep *RepairReport) {
	lost := func(format string, args ...any) { rep.Lost = append(rep.Lost, fmt.Sprintf(format, args...)) }
	// Every place an id is kept, each read on its own: a damaged index
	// does not hide the children the other buckets still name.
	ids := map[string]bool{}
	active := map[string]bool{}
	activeKnown := true
	keys := func(name []byte, nested bool, into map[string]bool) error {
		return readSafely(src, func(tx *bolt.Tx) error {
			b := tx.Bucket(name)
			if b == nil {
				return fmt.Errorf("bucket %s is missing", name)
			}
			c := b.Cursor()
			for k, v := c.First(); k != nil; k, v = c.Next() {
				if nested {
					// by_parent: each parent's bucket holds created_at ‖ id.
					if v != nil {
						continue
					}
					if idx := b.Bucket(k); idx != nil {
						ic := idx.Cursor()
						for ik, _ := ic.First(); ik != nil; ik, _ = ic.Next() {
							if len(ik) > 8 {
								into[string(ik[8:])] = true
							}
						}
					}
					continue
				}
				into[string(k)] = true
			}
			return nil
		})
	}
	for _, b := range [][]byte{bucketChildren, bucketDescriptors, bucketJournals} {
		if err := keys(b, false, ids); err != nil {
			lost("the list of children in bucket %s, in part or whole: %v", b, err)
		}
	}
	if err := keys(bucketByParent, true, ids); err != nil {
		lost("the index of children by parent, in part or whole: %v", err)
	}
	if err := keys(bucketActive, false, active); err != nil {
		activeKnown = false
		lost("the active marks (every copied child is marked active, so the next start announces it): %v", err)
	}
	var kids []salvaged
	sorted := make([]string, 0, len(ids))
	for id := range ids {
		sorted = append(sorted, id)
	}
	sort.Strings(sorted)
	for _, id := range sorted {
		c, err := salvageChild(src, id)
		var part partialErr
		if errors.As(err, &part) {
			lost("child %s: copied in part: %v", id, err)
		} else if err != nil {
			lost("child %s: not copied: %v", id, err)
			continue
		}
		c.active = !activeKnown || active[id]
		kids = append(kids, c)
	}
	sort.SliceStable(kids, func(i, j int) bool { return kids[i].h.CreatedAt.Before(kids[j].h.CreatedAt) })
	ctx := context.Background() // the doctor runs to the end; it has no caller to leave
	for _, c := range kids {
		w := seam.ChildWrite{Create: &seam.NewChild{Header: c.h, Descriptor: c.d}, Events: c.events, Enqueue: c.inbox}
		if c.active {
			// Whoever held it is gone (Repair holds the lock); the next
			// start finds the claim stale and announces the epoch.
			w.Claim = &seam.Owner{ID: repairOwner, Expires: time.Now()}
		}
		if err := dst.WriteChild(ctx, c.h.ID, w); err != nil {
			lost("child %s: writing it to the fresh store: %v", c.h.ID, err)
			continue
		}
		if c.partial {
			rep.Partial++
		} else {
			rep.Children++
		}
	}
	salvageNotices(ctx, src, dst, rep, lost)
}

// repairOwner owns the claims Repair copies: the active marks of children
// whose epoch the next start must close and announce.
const repairOwner = "mcp-subagent doctor"

// salvageChild reads one child. Its header and descriptor must be
// readable (without them it cannot be listed or resumed); its journal is
// kept up to the first event that cannot be read, and its inbox if it
// can be read.
func salvageChild(src *bolt.DB, id string) (salvaged, error) {
	var c salvaged
	var raw [][]byte
	err := readSafely(src, func(tx *bolt.Tx) error {
		children, descriptors := tx.Bucket(bucketChildren), tx.Bucket(bucketDescriptors)
		if children == nil || descriptors == nil {
			return errors.New("its header or descriptor bucket is unreadable")
		}
		h, err := headerOf(id, children.Get([]byte(id)))
		if err != nil {
			return err
		}
		db := descriptors.Get([]byte(id))
		if db == nil {
			return errors.New("its descriptor is missing")
		}
		d, err := decodeDescriptor(db)
		if err != nil {
			return corrupt(id, "descriptor", err)
		}
		c.h, c.d = h, d
		return nil
	})
	if err != nil {
		return c, err
	}
	// The journal in its own transaction: a panic halfway keeps what was
	// read before it.
	journalErr := readSafely(src, func(tx *bolt.Tx) error {
		js := tx.Bucket(bucketJournals)
		if js == nil {
			return errors.New("the journals bucket is unreadable")
		}
		j := js.Bucket([]byte(id))
		if j == nil {
			return errors.New("its journal is missing")
		}
		cur := j.Cursor()
		for k, v := cur.First(); k != nil; k, v = cur.Next() {
			if len(k) != 8 || v == nil || int64(len(raw)) != int64(beUint64(k)) {
				return fmt.Errorf("unexpected key %x", k)
			}
			raw = append(raw, bytes.Clone(v))
		}
		return nil
	})
	for i, b := range raw {
		e, err := decodeEvent(b)
		if err != nil || e.Seq != int64(i) {
			if journalErr == nil {
				journalErr = fmt.Errorf("event %d does not decode", i)
			}
			raw = raw[:i]
			break
		}
		c.events = append(c.events, e)
	}
	if journalErr != nil {
		c.partial = true
	}
	inboxErr := readSafely(src, func(tx *bolt.Tx) error {
		ib := tx.Bucket(bucketInboxes)
		if ib == nil {
			return nil
		}
		b := ib.Bucket([]byte(id))
		if b == nil {
			return nil
		}
		return b.ForEach(func(_, v []byte) error {
			var q seam.QueuedMessage
			if err := json.Unmarshal(v, &q); err != nil || q.ID == "" {
				return fmt.Errorf("an inbox entry does not decode")
			}
			c.inbox = append(c.inbox, q)
			return nil
		})
	})
	if inboxErr != nil {
		c.partial = true
		c.inbox = nil
	}
	if c.partial {
		return c, errPartial(id, len(c.events), journalErr, inboxErr)
	}
	return c, nil
}

func beUint64(b []byte) uint64 {
	var v uint64
	for _, x := range b {
		v = v<<8 | uint64(x)
	}
	return v
}

// partialErr is salvageChild's report of a child copied in part; salvage
// copies the child and reports the loss.
type partialErr struct{ msg string }

func (e partialErr) Error() string { return e.msg }

func errPartial(id string, kept int, journal, inbox error) error {
	msg := ""
	if journal != nil {
		msg = fmt.Sprintf("journal kept up to event %d (%v)", kept, journal)
	}
	if inbox != nil {
		if msg != "" {
			msg += "; "
		}
		msg += fmt.Sprintf("inbox lost (%v)", inbox)
	}
	return partialErr{msg}
}

func salvageNotices(ctx context.Context, src *bolt.DB, dst *Store, rep *RepairReport, lost func(string, ...any)) {
	type queued struct {
		to string
		n  seam.Notice
	}
	var all []queued
	err := readSafely(src, func(tx *bolt.Tx) error {
		ns := tx.Bucket(bucketNotices)
		if ns == nil {
			return errors.New("the notices bucket is unreadable")
		}
		return ns.ForEach(func(k, v []byte) error {
			if v != nil {
				return nil
			}
			q := ns.Bucket(k)
			if q == nil {
				return nil
			}
			to := string(k)
			return q.ForEach(func(_, v []byte) error {
				n, err := decodeNotice(v)
				if err != nil {
					lost("a notice for %s: %v", to, err)
					return nil
				}
				all = append(all, queued{to, n})
				return nil
			})
		})
	})
	if err != nil {
		lost("queued notices, in part or whole: %v", err)
	}
	for _, q := range all {
		if err := dst.AddNotice(ctx, q.to, q.n); err != nil {
			lost("a notice for %s: %v", q.to, err)
			continue
		}
		rep.Notices++
	}
}
