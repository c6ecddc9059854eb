package persist

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// CompactStats is what Compact did: the file's size before and after.
type CompactStats struct {
	Path   string `json:"path"`
	Before int64  `json:"before_bytes"`
	After  int64  `json:"after_bytes"`
}

// compactTxBytes bounds one transaction of the copy, so a large store is
// not held in memory at once.
const compactTxBytes = 16 << 20

// Compact rewrites the store's file in place to give back the space bbolt
// keeps for reuse (the file never shrinks by itself): it copies every
// bucket, key, value and bucket sequence into FileName.compact beside it
// with bbolt's Compact, checks the copy holds exactly what the original
// does (a SHA-256 over every bucket path, key, value and sequence of
// each), renames it over the original and switches to it. Transactions
// wait while it runs; none sees a half-made file. The new file is locked
// (bbolt's flock) from the moment it is created, before it takes the
// original's name, so no other process can open the directory in between.
// On any failure the original stays in place and in use, and the copy is
// removed. It refuses a damaged store: run `mcp-subagent doctor`.
func (s *Store) Compact(ctx context.Context) (CompactStats, error) {
	st := CompactStats{Path: s.path}
	if err := ctxErr(ctx); err != nil {
		return st, err
	}
	s.dbmu.Lock()
	defer s.dbmu.Unlock()
	if d := s.damaged.Load(); d != nil {
		return st, d
	}
	fi, err := os.Stat(s.path)
	if err != nil {
		return st, fmt.Errorf("persist: compact: %w", err)
	}
	st.Before = fi.Size()
	tmp := s.path + ".compact"
	// A copy left by a compaction that crashed is not the store: drop it.
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return st, fmt.Errorf("persist: compact: %w", err)
	}
	dst, err := openBolt(tmp, bolt.Options{Timeout: s.lockTimeout})
	if err != nil {
		return st, fmt.Errorf("persist: compact: open %s: %w", tmp, err)
	}
	fail := func(err error) (CompactStats, error) {
		_ = dst.Close()
		_ = os.Remove(tmp)
		return st, fmt.Errorf("persist: compact %s: %w", s.path, err)
	}
	if err := s.guard("compact", false, func() error { return bolt.Compact(dst, s.db, compactTxBytes) }); err != nil {
		return fail(err)
	}
	var want, got []byte
	if err := s.guard("compact", false, func() (err error) { want, err = digest(s.db); return err }); err != nil {
		return fail(err)
	}
	if got, err = digest(dst); err != nil {
		return fail(err)
	}
	if string(want) != string(got) {
		return fail(errors.New("the copy does not hold what the original does; the original is kept"))
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return fail(err)
	}
	syncDir(filepath.Dir(s.path))
	old := s.db
	s.db = dst
	if err := old.Close(); err != nil {
		s.log.Warn("closing the store file compaction replaced", "path", s.path, "err", err)
	}
	if fi, err := os.Stat(s.path); err == nil {
		st.After = fi.Size()
	}
	s.log.Info("store compacted", "path", s.path, "before_bytes", st.Before, "after_bytes", st.After)
	return st, nil
}

// digest hashes every bucket path, key, value and bucket sequence of db,
// in bbolt's key order.
func digest(db *bolt.DB) ([]byte, error) {
	h := sha256.New()
	err := db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			return digestBucket(h, [][]byte{name}, b)
		})
	})
	return h.Sum(nil), err
}

func digestBucket(h hash.Hash, path [][]byte, b *bolt.Bucket) error {
	field := func(p []byte) {
		var n [binary.MaxVarintLen64]byte
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(p)))])
		h.Write(p)
	}
	field([]byte{'B'})
	for _, p := range path {
		field(p)
	}
	field(binary.BigEndian.AppendUint64(nil, b.Sequence()))
	return b.ForEach(func(k, v []byte) error {
		if v == nil {
			return digestBucket(h, append(path[:len(path):len(path)], k), b.Bucket(k))
		}
		field([]byte{'K'})
		field(k)
		field(v)
		return nil
	})
}

// syncDir makes a rename in dir durable; a failure only risks the rename
// being undone by a crash, which leaves the original, whole.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}
