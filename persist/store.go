package persist

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/wake"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

var _ seam.Store = (*Store)(nil)

// FileName is the name of the database file inside the data directory.
const FileName = "mcp-subagent.db"

// FormatVersion is the layout version this build writes into the meta bucket
// and the only one it opens.
const FormatVersion = 1

// DefaultLockTimeout is how long Open waits for the file lock when
// Options.LockTimeout is zero.
const DefaultLockTimeout = 2 * time.Second

// Bucket and key names; see the package doc for the layout.
var (
	bucketMeta        = []byte("meta")
	bucketChildren    = []byte("children")
	bucketDescriptors = []byte("descriptors")
	bucketJournals    = []byte("journals")
	bucketByParent    = []byte("by_parent")
	bucketCheckpoints = []byte("checkpoints")
	bucketNotices     = []byte("notices")
	bucketActive      = []byte("active")
	bucketInboxes     = []byte("inboxes")
	bucketByAncestor  = []byte("by_ancestor")

	keyFormat = []byte("format")

	topBuckets = [][]byte{bucketMeta, bucketChildren, bucketDescriptors, bucketJournals,
		bucketByParent, bucketCheckpoints, bucketNotices, bucketActive, bucketInboxes, bucketByAncestor}
)

// ErrNotFound is returned (wrapped, naming the id) by every per-child method
// for an id the store does not hold. It is seam.ErrNotFound, never
// seam.ErrCorrupt.
var ErrNotFound = seam.ErrNotFound

// ErrExists is returned (wrapped) by WriteChild for a Create of an id
// already stored.
var ErrExists = errors.New("child already exists")

// ErrLocked is matched (errors.Is) by the error Open returns when another
// process, or another Store in this process, holds the data directory.
var ErrLocked = errors.New("data directory is locked")

// Options configures Open. Zero values mean the defaults given.
type Options struct {
	// LockTimeout bounds the wait for the database file's lock; zero:
	// DefaultLockTimeout. It is never unbounded: bbolt's zero waits forever.
	LockTimeout time.Duration
	// Logger receives the store's logs (corrupt records skipped while
	// listing or taking notices); nil: discarded.
	Logger *slog.Logger
}

// Store is the bbolt-backed seam.Store. It is safe for concurrent use.
type Store struct {
	// dbmu guards db itself: every transaction holds it for reading,
	// Compact for writing while it swaps the file.
	dbmu sync.RWMutex
	db   *bolt.DB
	dir  string
	path string
	log  *slog.Logger
	// lockTimeout is Options.LockTimeout, for Compact's new file.
	lockTimeout time.Duration

	// damaged is set by the first write that panicked; later writes
	// return it (see guard).
	damaged atomic.Pointer[DamagedError]

	// Group commit for WriteChild: queued writes, and whether a caller is
	// committing them.
	wmu      sync.Mutex
	wqueue   []*writeReq
	wleading bool

	// Owners that claimed or renewed through this opening: only they can
	// be alive (the file is locked), so a claim of any other owner is
	// stale whatever its expiry says (see claims.go).
	omu    sync.Mutex
	owners map[string]bool

	wake wake.Hub // Watch's watches (wake.go)
}

// LockedError is the error Open returns when the data directory is in use.
// errors.Is(err, ErrLocked) holds for it.
type LockedError struct {
	Dir     string
	Timeout time.Duration
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("data directory %s is in use by another mcp-subagent process (lock not acquired within %s); stop it or use --data-dir", e.Dir, e.Timeout)
}

// Is reports whether target is ErrLocked.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// Open creates dir (mode 0700) if needed and opens dir/FileName, waiting at
// most opts.LockTimeout for its lock. A directory held by another process
// (or another open Store) yields a *LockedError naming the directory.
func Open(dir string, opts Options) (*Store, error) {
	if dir == "" {
		return nil, errors.New("persist: data directory must not be empty")
	}
	if opts.LockTimeout < 0 {
		return nil, fmt.Errorf("persist: LockTimeout must not be negative, got %s", opts.LockTimeout)
	}
	if opts.LockTimeout == 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("persist: create data directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, FileName)
	db, err := openBolt(path, bolt.Options{Timeout: opts.LockTimeout})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, &LockedError{Dir: dir, Timeout: opts.LockTimeout}
	}
	var damaged *DamagedError
	if errors.As(err, &damaged) {
		return nil, err
	}
	if errors.Is(err, bolterrors.ErrInvalid) || errors.Is(err, bolterrors.ErrChecksum) || errors.Is(err, bolterrors.ErrVersionMismatch) {
		return nil, &DamagedError{Path: path, Op: "open", Cause: err.Error()}
	}
	if err != nil {
		return nil, fmt.Errorf("persist: open %s: %w", path, err)
	}
	s := &Store{db: db, dir: dir, path: path, log: log, lockTimeout: opts.LockTimeout, owners: map[string]bool{}}
	// A store already laid out is only read at open: no write, no disk sync
	// on the start path.
	if err := s.view(checkLayout); errors.Is(err, errNeedsLayout) {
		err = s.update(initLayout)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("persist: %s: %w", path, err)
		}
	} else if err != nil {
		s.Close()
		if !errors.As(err, &damaged) {
			err = &DamagedError{Path: path, Op: "open", Cause: err.Error()}
		}
		return nil, err
	}
	log.Debug("store opened", "path", path)
	return s, nil
}

var errNeedsLayout = errors.New("store needs its layout")

// checkLayout checks, read-only, that every top-level bucket exists and the
// format version is the one this build reads. Only an empty file, or one
// missing a bucket a later build added (inboxes, by_ancestor), is laid out: a file that
// has lost a bucket it was created with is damaged, and laying it out again
// would pass an empty store off as the real one.
func checkLayout(tx *bolt.Tx) error {
	missing, present := 0, 0
	for _, name := range topBuckets {
		if tx.Bucket(name) == nil {
			missing++
		} else {
			present++
		}
	}
	if present == 0 {
		return errNeedsLayout
	}
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return fmt.Errorf("the meta bucket is missing: %w", seam.ErrCorrupt)
	}
	want := fmt.Sprint(FormatVersion)
	switch got := meta.Get(keyFormat); {
	case got == nil:
		return fmt.Errorf("the format version is missing: %w", seam.ErrCorrupt)
	case string(got) != want:
		return fmt.Errorf("store format %q is not the format %s this build reads", got, want)
	}
	for _, name := range topBuckets {
		if tx.Bucket(name) == nil && string(name) != string(bucketInboxes) && string(name) != string(bucketByAncestor) {
			return fmt.Errorf("bucket %s is missing: %w", name, seam.ErrCorrupt)
		}
	}
	if missing > 0 {
		return errNeedsLayout
	}
	return nil
}

// initLayout creates the top-level buckets and checks the format version.
// A file from before by_ancestor has it built from by_parent, once.
func initLayout(tx *bolt.Tx) error {
	build := tx.Bucket(bucketByAncestor) == nil && tx.Bucket(bucketByParent) != nil
	for _, name := range topBuckets {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("create bucket %s: %w", name, err)
		}
	}
	meta := tx.Bucket(bucketMeta)
	want := []byte(fmt.Sprint(FormatVersion))
	switch got := meta.Get(keyFormat); {
	case got == nil:
		if err := meta.Put(keyFormat, want); err != nil {
			return err
		}
	case string(got) != string(want):
		return fmt.Errorf("store format %q is not the format %s this build reads", got, want)
	}
	if build {
		return buildAncestors(tx)
	}
	return nil
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// Close releases the database and its lock. Calling it again is a no-op.
// On a store a write panic left damaged it waits at most closeTimeout (and
// the lock is then released when the process exits).
func (s *Store) Close() error {
	s.dbmu.Lock() // waits for a Compact to finish its swap
	defer s.dbmu.Unlock()
	if s.damaged.Load() == nil {
		return s.db.Close()
	}
	done := make(chan error, 1)
	go func() { done <- s.db.Close() }() // may never return: bbolt's writer lock
	select {
	case err := <-done:
		return err
	case <-time.After(closeTimeout):
		return fmt.Errorf("persist: closing the damaged store %s timed out", s.path)
	}
}

// top returns a top-level bucket; initLayout creates them all, so a missing
// one means the file was damaged.
func top(tx *bolt.Tx, name []byte) (*bolt.Bucket, error) {
	b := tx.Bucket(name)
	if b == nil {
		return nil, fmt.Errorf("persist: bucket %s is missing: %w", name, seam.ErrCorrupt)
	}
	return b, nil
}

// ctxErr refuses a call whose ctx is already done. It is checked only
// before a call starts: bbolt cannot abort a transaction midway.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("persist: %w", err)
	}
	return nil
}

func notFound(id string) error { return fmt.Errorf("persist: child %q: %w", id, ErrNotFound) }

func corrupt(id, part string, cause error) error {
	return fmt.Errorf("persist: child %q %s: %w: %w", id, part, seam.ErrCorrupt, cause)
}

// requireChild returns ErrNotFound unless the children bucket holds id.
func requireChild(tx *bolt.Tx, id string) error {
	children, err := top(tx, bucketChildren)
	if err != nil {
		return err
	}
	if id == "" || children.Get([]byte(id)) == nil {
		return notFound(id)
	}
	return nil
}

var (
	minCreatedAt = time.Unix(0, math.MinInt64)
	maxCreatedAt = time.Unix(0, math.MaxInt64)
)

// validateNew checks a new child's header and descriptor.
func validateNew(h seam.Header, d seam.Descriptor) error {
	switch {
	case h.ID == "":
		return errors.New("persist: header id must not be empty")
	case h.Parent == "":
		return fmt.Errorf("persist: child %q: header parent must not be empty", h.ID)
	case h.CreatedAt.IsZero():
		return fmt.Errorf("persist: child %q: header created_at must be set", h.ID)
	case h.CreatedAt.Before(minCreatedAt) || h.CreatedAt.After(maxCreatedAt):
		return fmt.Errorf("persist: child %q: header created_at %s is outside the years 1678-2262", h.ID, h.CreatedAt)
	case d.Version != seam.DescriptorVersion:
		return fmt.Errorf("persist: child %q: descriptor version %d is not %d", h.ID, d.Version, seam.DescriptorVersion)
	}
	return nil
}

// putChild writes one validated, encoded child into tx. Bulk loaders call it
// many times in one transaction.
func putChild(tx *bolt.Tx, h seam.Header, hb, db []byte) error {
	id := []byte(h.ID)
	children, err := top(tx, bucketChildren)
	if err != nil {
		return err
	}
	if children.Get(id) != nil {
		return fmt.Errorf("persist: child %q: %w", h.ID, ErrExists)
	}
	descriptors, err := top(tx, bucketDescriptors)
	if err != nil {
		return err
	}
	journals, err := top(tx, bucketJournals)
	if err != nil {
		return err
	}
	byParent, err := top(tx, bucketByParent)
	if err != nil {
		return err
	}
	if err := children.Put(id, hb); err != nil {
		return err
	}
	if err := descriptors.Put(id, db); err != nil {
		return err
	}
	// A leftover journal under an id with no header (only possible by
	// hand-editing the file) is replaced, never adopted.
	if journals.Bucket(id) != nil {
		if err := journals.DeleteBucket(id); err != nil {
			return err
		}
	}
	if _, err := journals.CreateBucket(id); err != nil {
		return fmt.Errorf("persist: child %q: create journal: %w", h.ID, err)
	}
	idx, err := byParent.CreateBucketIfNotExists([]byte(h.Parent))
	if err != nil {
		return fmt.Errorf("persist: child %q: index under parent %q: %w", h.ID, h.Parent, err)
	}
	key := parentKey(h.CreatedAt.UnixNano(), h.ID)
	if err := idx.Put(key, encodeIndexRecord(h, db)); err != nil {
		return err
	}
	return indexAncestors(tx, children, h.Parent, key)
}

// journal returns a stored child's journal bucket.
func journal(tx *bolt.Tx, id string) (*bolt.Bucket, error) {
	if err := requireChild(tx, id); err != nil {
		return nil, err
	}
	journals, err := top(tx, bucketJournals)
	if err != nil {
		return nil, err
	}
	j := journals.Bucket([]byte(id))
	if j == nil {
		return nil, corrupt(id, "journal", errors.New("journal bucket is missing"))
	}
	return j, nil
}

// journalLen reads the journal length from its last key.
func journalLen(id string, j *bolt.Bucket) (int64, error) {
	k, _ := j.Cursor().Last()
	if k == nil {
		return 0, nil
	}
	if len(k) != 8 {
		return 0, corrupt(id, "journal", fmt.Errorf("key of %d bytes", len(k)))
	}
	last := binary.BigEndian.Uint64(k)
	if last >= math.MaxInt64 {
		return 0, corrupt(id, "journal", fmt.Errorf("sequence %d out of range", last))
	}
	return int64(last) + 1, nil
}

func encodeEvents(childID string, events []agent.Event) ([][]byte, error) {
	encoded := make([][]byte, len(events))
	for i, e := range events {
		b, err := agent.EncodeEvent(e)
		if err != nil {
			return nil, fmt.Errorf("persist: child %q: encode event %d: %w", childID, e.Seq, err)
		}
		encoded[i] = b
	}
	return encoded, nil
}

func appendEvents(tx *bolt.Tx, childID string, events []agent.Event, encoded [][]byte) error {
	j, err := journal(tx, childID)
	if err != nil {
		return err
	}
	n, err := journalLen(childID, j)
	if err != nil {
		return err
	}
	for i, e := range events {
		if want := n + int64(i); e.Seq != want {
			return fmt.Errorf("persist: child %q: event sequence %d does not continue the journal (next is %d)", childID, e.Seq, want)
		}
		if e.Kind == "" {
			return fmt.Errorf("persist: child %q: event %d has no kind", childID, e.Seq)
		}
		if err := j.Put(seqKey(uint64(e.Seq)), encoded[i]); err != nil {
			return err
		}
	}
	if len(events) == 0 {
		return nil
	}
	// A checkpoint is current only while the journal has not grown: an
	// append drops it, so a stored checkpoint always passes the sequence
	// gate and a listing never opens a journal to check it.
	checkpoints, err := top(tx, bucketCheckpoints)
	if err != nil {
		return err
	}
	return checkpoints.Delete([]byte(childID))
}

// Header returns the child's header.
func (s *Store) Header(ctx context.Context, childID string) (seam.Header, error) {
	var h seam.Header
	err := s.readChild(ctx, childID, bucketChildren, func(b []byte) (err error) {
		h, err = headerOf(childID, b)
		return err
	})
	return h, err
}

// headerOf decodes a stored header and checks it belongs to id.
func headerOf(id string, b []byte) (seam.Header, error) {
	h, err := decodeHeader(b)
	if err != nil {
		return seam.Header{}, corrupt(id, "header", err)
	}
	if h.ID != id {
		return seam.Header{}, corrupt(id, "header", fmt.Errorf("header names child %q", h.ID))
	}
	return h, nil
}

// Descriptor returns the child's descriptor. Unknown fields or an unknown
// version make it corrupt.
func (s *Store) Descriptor(ctx context.Context, childID string) (seam.Descriptor, error) {
	var d seam.Descriptor
	err := s.readChild(ctx, childID, bucketDescriptors, func(b []byte) (err error) {
		if b == nil {
			return corrupt(childID, "descriptor", errors.New("descriptor is missing"))
		}
		if d, err = decodeDescriptor(b); err != nil {
			return corrupt(childID, "descriptor", err)
		}
		return nil
	})
	return d, err
}

// Events returns the child's whole journal. A key that is not the next
// sequence, or an event whose Seq differs from its key, makes it corrupt.
func (s *Store) Events(ctx context.Context, childID string) ([]agent.Event, error) {
	return s.EventsFrom(ctx, childID, 0)
}

// EventsFrom returns the journal from sequence number from on, reading
// only those events (a cursor seek), checked as Events checks them.
func (s *Store) EventsFrom(ctx context.Context, childID string, from int64) ([]agent.Event, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	if from < 0 {
		return nil, fmt.Errorf("persist: child %q: events from %d: the sequence must not be negative", childID, from)
	}
	// The bytes are copied out in the transaction and decoded after it, on
	// every core: decoding is nearly all of a cold resume's cost.
	var raw [][]byte
	err := s.view(func(tx *bolt.Tx) error {
		j, err := journal(tx, childID)
		if err != nil {
			return err
		}
		n, err := journalLen(childID, j)
		if err != nil {
			return err
		}
		if from >= n {
			return nil
		}
		raw = make([][]byte, 0, n-from)
		c := j.Cursor()
		for k, v := c.Seek(binary.BigEndian.AppendUint64(nil, uint64(from))); k != nil; k, v = c.Next() {
			want := from + int64(len(raw))
			if len(k) != 8 || int64(binary.BigEndian.Uint64(k)) != want {
				return corrupt(childID, "journal", fmt.Errorf("expected sequence %d, found key %x", want, k))
			}
			if v == nil {
				return corrupt(childID, "journal", fmt.Errorf("sequence %d is a bucket, not an event", want))
			}
			raw = append(raw, bytes.Clone(v))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return decodeEvents(childID, raw, from)
}

// decodeEvents decodes a journal's events in parallel chunks and checks
// each holds its own sequence number.
// raw[0] is the event of sequence from.
func decodeEvents(childID string, raw [][]byte, from int64) ([]agent.Event, error) {
	events := make([]agent.Event, len(raw))
	workers := runtime.GOMAXPROCS(0)
	if len(raw) < 256 {
		workers = 1
	}
	chunk := (len(raw) + workers - 1) / max(workers, 1)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		lo, hi := w*chunk, min((w+1)*chunk, len(raw))
		if lo >= hi {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := lo; i < hi; i++ {
				e, err := decodeEvent(raw[i])
				if err != nil {
					errs[w] = corrupt(childID, fmt.Sprintf("journal event %d", from+int64(i)), err)
					return
				}
				if e.Seq != from+int64(i) {
					errs[w] = corrupt(childID, "journal", fmt.Errorf("key %d holds event with sequence %d", from+int64(i), e.Seq))
					return
				}
				events[i] = e
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return events, nil
}

// JournalLen returns the number of stored events without decoding them.
func (s *Store) JournalLen(ctx context.Context, childID string) (int64, error) {
	if err := ctxErr(ctx); err != nil {
		return 0, err
	}
	var n int64
	err := s.view(func(tx *bolt.Tx) error {
		j, err := journal(tx, childID)
		if err != nil {
			return err
		}
		n, err = journalLen(childID, j)
		return err
	})
	return n, err
}

// Checkpoint returns the child's projection checkpoint, if one is stored. A
// checkpoint is a cache: one that does not decode is logged and reported as
// absent, so the caller recomputes it from the journal.
func (s *Store) Checkpoint(ctx context.Context, childID string) (seam.Checkpoint, bool, error) {
	var (
		cp seam.Checkpoint
		ok bool
	)
	err := s.readChild(ctx, childID, bucketCheckpoints, func(b []byte) error {
		if b == nil {
			return nil
		}
		c, err := decodeCheckpoint(b)
		if err != nil {
			s.log.Warn("ignoring a corrupt checkpoint", "child", childID, "err", err)
			return nil
		}
		cp, ok = c, true
		return nil
	})
	return cp, ok, err
}

// readChild reads a known child's value in one top-level bucket (nil when
// absent) inside a read transaction; fn must not keep b.
func (s *Store) readChild(ctx context.Context, childID string, bucket []byte, fn func(b []byte) error) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	return s.view(func(tx *bolt.Tx) error {
		if err := requireChild(tx, childID); err != nil {
			return err
		}
		bk, err := top(tx, bucket)
		if err != nil {
			return err
		}
		return fn(bk.Get([]byte(childID)))
	})
}

// SetCheckpoint replaces the child's projection checkpoint.
func (s *Store) SetCheckpoint(ctx context.Context, childID string, c seam.Checkpoint) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	b := encodeCheckpoint(c)
	return s.update(func(tx *bolt.Tx) error { return putCheckpoint(tx, childID, c, b) })
}

// AddNotice queues n for principal. The store assigns n.Seq (per principal,
// increasing, never reused, whatever the caller set) and n.Time when zero.
func (s *Store) AddNotice(ctx context.Context, principal string, n seam.Notice) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	if principal == "" {
		return errors.New("persist: notice principal must not be empty")
	}
	if n.Time.IsZero() {
		n.Time = time.Now().UTC()
	}
	if err := s.update(func(tx *bolt.Tx) error { return putNotice(tx, principal, n) }); err != nil {
		return err
	}
	s.wake.Signal(principal) // wake.go
	return nil
}

// putNotice queues n under principal (an address) with the next sequence.
func putNotice(tx *bolt.Tx, principal string, n seam.Notice) error {
	notices, err := top(tx, bucketNotices)
	if err != nil {
		return err
	}
	q, err := notices.CreateBucketIfNotExists([]byte(principal))
	if err != nil {
		return fmt.Errorf("persist: notices of %q: %w", principal, err)
	}
	seq, err := q.NextSequence()
	if err != nil {
		return err
	}
	if seq > math.MaxInt64 {
		return fmt.Errorf("persist: notices of %q: sequence exhausted", principal)
	}
	n.Seq = int64(seq)
	b, err := json.Marshal(n)
	if err != nil {
		return fmt.Errorf("persist: notices of %q: encode: %w", principal, err)
	}
	return q.Put(seqKey(seq), b)
}

// TakeNotices removes and returns the notices queued for principal that
// take accepts (every one when take is nil), in the order they were added,
// in one transaction: a notice is returned once; the rest stay queued. A
// queued notice that does not decode is logged and dropped.
func (s *Store) TakeNotices(ctx context.Context, principal string, take func(seam.Notice) bool) ([]seam.Notice, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	// Every root tool call asks; most find nothing. Look in a read
	// transaction first, so those cost no write commit (two disk syncs).
	if !s.anyNotice(principal, take) {
		return nil, nil
	}
	var out []seam.Notice
	err := s.update(func(tx *bolt.Tx) error {
		out = out[:0] // a retried transaction starts over
		notices, err := top(tx, bucketNotices)
		if err != nil {
			return err
		}
		if principal == "" {
			return nil
		}
		q := notices.Bucket([]byte(principal))
		if q == nil {
			return nil
		}
		var keys [][]byte
		c := q.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if v == nil {
				keys = append(keys, append([]byte(nil), k...))
				continue
			}
			n, err := decodeNotice(v)
			if err != nil {
				s.log.Error("dropping a corrupt notice", "principal", principal, "key", fmt.Sprintf("%x", k), "err", err)
				keys = append(keys, append([]byte(nil), k...))
				continue
			}
			if take != nil && !take(n) {
				continue
			}
			keys = append(keys, append([]byte(nil), k...))
			out = append(out, n)
		}
		// Keep the bucket (and with it the sequence) so Seq is never reused.
		for _, k := range keys {
			if err := q.Delete(k); err != nil && !errors.Is(err, bolterrors.ErrIncompatibleValue) {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// anyNotice reports whether principal has a queued notice that take
// accepts, or one that does not decode (the write transaction drops it).
// A read error says yes: the write transaction reports it.
func (s *Store) anyNotice(principal string, take func(seam.Notice) bool) bool {
	found := false
	err := s.view(func(tx *bolt.Tx) error {
		notices := tx.Bucket(bucketNotices)
		if notices == nil { // the write transaction reports it
			found = true
			return nil
		}
		if principal == "" {
			return nil
		}
		q := notices.Bucket([]byte(principal))
		if q == nil {
			return nil
		}
		c := q.Cursor()
		for k, v := c.First(); k != nil && !found; k, v = c.Next() {
			n, err := decodeNotice(v)
			found = v == nil || err != nil || take == nil || take(n)
		}
		return nil
	})
	return found || err != nil
}

// putCheckpoint stores a checkpoint only if it is current: its Seq equals
// the journal's length (a stale one is a cache miss, silently dropped).
func putCheckpoint(tx *bolt.Tx, childID string, c seam.Checkpoint, b []byte) error {
	j, err := journal(tx, childID)
	if err != nil {
		return err
	}
	n, err := journalLen(childID, j)
	if err != nil {
		return err
	}
	if c.Seq != n {
		return nil
	}
	checkpoints, err := top(tx, bucketCheckpoints)
	if err != nil {
		return err
	}
	return checkpoints.Put([]byte(childID), b)
}
