package persist

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Claims live in the active bucket, which older builds filled with child
// id → empty (an active mark). A claim's value is a binary owner record;
// an empty value is an old mark: a claim of an unknown earlier owner,
// expired. So a store written before owners existed opens as it is, with
// nothing to migrate.

const claimVersion = 1

// encodeClaim is an owner record: version, expiry (Unix nanoseconds,
// 8-byte big-endian), owner id.
func encodeClaim(o seam.Owner) []byte {
	b := make([]byte, 0, 9+len(o.ID))
	b = append(b, claimVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(o.Expires.UnixNano()))
	return append(b, o.ID...)
}

// decodeClaim decodes an owner record. An empty value (an old active mark)
// is the zero Owner.
func decodeClaim(b []byte) (seam.Owner, error) {
	if len(b) == 0 {
		return seam.Owner{}, nil
	}
	if len(b) < 10 || b[0] != claimVersion {
		return seam.Owner{}, errMalformed
	}
	return seam.Owner{ID: string(b[9:]), Expires: unixTime(int64(binary.BigEndian.Uint64(b[1:9])))}, nil
}

// known reports whether owner claimed or renewed through this opening.
func (s *Store) known(owner string) bool {
	s.omu.Lock()
	defer s.omu.Unlock()
	return s.owners[owner]
}

// know records that owner is active through this opening. It is called
// inside the write that claims, before the commit, so a later write in
// the same group commit sees the claim as live.
func (s *Store) know(owner string) {
	s.omu.Lock()
	s.owners[owner] = true
	s.omu.Unlock()
}

// checkClaim refuses to claim id for owner while another owner holds an
// unexpired claim on it. A claim of an owner unknown to this opening is
// stale (its process is gone: the file is locked), and so is a record
// that does not decode.
func (s *Store) checkClaim(tx *bolt.Tx, id string, owner seam.Owner) error {
	marks, err := top(tx, bucketActive)
	if err != nil {
		return err
	}
	v := marks.Get([]byte(id))
	if v == nil {
		return nil
	}
	held, err := decodeClaim(v)
	if err != nil {
		s.log.Warn("taking over a claim that does not decode", "child", id)
		return nil
	}
	if held.ID == "" || held.ID == owner.ID || !s.known(held.ID) || !time.Now().Before(held.Expires) {
		return nil
	}
	return fmt.Errorf("persist: child %q is claimed by owner %q until %s: %w", id, held.ID, held.Expires.UTC().Format(time.RFC3339), seam.ErrOwned)
}

// bucketEpochs holds each child's last claim epoch (child id → 8-byte
// big-endian), which outlives the claim. It is made by the first claim
// granted, so a store from before epochs opens unchanged (it is not one of
// topBuckets, which checkLayout requires); a child it lacks is at epoch 0.
var bucketEpochs = []byte("epochs")

// epochOf is the child's last claim epoch.
func epochOf(tx *bolt.Tx, id string) int64 {
	if b := tx.Bucket(bucketEpochs); b != nil {
		if v := b.Get([]byte(id)); len(v) == 8 {
			return int64(binary.BigEndian.Uint64(v))
		}
	}
	return 0
}

// heldBy returns the owner id of the child's claim, "" when unclaimed or
// the record does not decode.
func heldBy(tx *bolt.Tx, id string) (string, error) {
	marks, err := top(tx, bucketActive)
	if err != nil {
		return "", err
	}
	v := marks.Get([]byte(id))
	if v == nil {
		return "", nil
	}
	o, err := decodeClaim(v)
	if err != nil {
		return "", nil
	}
	return o.ID, nil
}

// checkFence refuses a write whose writer no longer holds the child's
// claim at its epoch.
func checkFence(tx *bolt.Tx, id string, f seam.Fence) error {
	holder, err := heldBy(tx, id)
	if err != nil {
		return err
	}
	epoch := epochOf(tx, id)
	if holder != "" && holder == f.Owner && epoch == f.Epoch {
		return nil
	}
	return fmt.Errorf("persist: child %q: the write is fenced to owner %q at epoch %d, and the child's claim is no longer that (owner %q, epoch %d): %w",
		id, f.Owner, f.Epoch, holder, epoch, seam.ErrOwned)
}

// grantClaim starts a new epoch when the claim changes hands (or the
// child was unclaimed); the holder claiming again keeps its epoch.
func grantClaim(tx *bolt.Tx, id string, owner seam.Owner) error {
	holder, err := heldBy(tx, id)
	if err != nil || holder == owner.ID {
		return err
	}
	b, err := tx.CreateBucketIfNotExists(bucketEpochs)
	if err != nil {
		return err
	}
	return b.Put([]byte(id), binary.BigEndian.AppendUint64(nil, uint64(epochOf(tx, id)+1)))
}

func putClaim(tx *bolt.Tx, id string, owner seam.Owner) error {
	marks, err := top(tx, bucketActive)
	if err != nil {
		return err
	}
	return marks.Put([]byte(id), encodeClaim(owner))
}

func revokeClaim(tx *bolt.Tx, id string) error {
	marks, err := top(tx, bucketActive)
	if err != nil {
		return err
	}
	return marks.Delete([]byte(id))
}

// Renew sets the expiry of every claim owner.ID holds to owner.Expires, in
// one transaction. An owner with no claim costs a read, not a commit.
func (s *Store) Renew(ctx context.Context, owner seam.Owner) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	if owner.ID == "" {
		return fmt.Errorf("persist: renew: the owner has no id")
	}
	s.know(owner.ID)
	held := func(tx *bolt.Tx) ([][]byte, error) {
		marks, err := top(tx, bucketActive)
		if err != nil {
			return nil, err
		}
		var ids [][]byte
		err = marks.ForEach(func(k, v []byte) error {
			if o, err := decodeClaim(v); err == nil && o.ID == owner.ID {
				ids = append(ids, append([]byte(nil), k...))
			}
			return nil
		})
		return ids, err
	}
	var any bool
	if err := s.view(func(tx *bolt.Tx) error {
		ids, err := held(tx)
		any = len(ids) > 0
		return err
	}); err != nil || !any {
		return err
	}
	rec := encodeClaim(owner)
	return s.update(func(tx *bolt.Tx) error {
		ids, err := held(tx)
		if err != nil {
			return err
		}
		marks, err := top(tx, bucketActive)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if err := marks.Put(id, rec); err != nil {
				return err
			}
		}
		return nil
	})
}

// Shared is false: one process holds the file (Open's lock), and its
// handle serves one instance (one manager), which admits every message
// to its children's inboxes itself.
func (s *Store) Shared() bool { return false }

// Residents lists every claim by child id. A claim of an owner that has
// not claimed or renewed through this opening, and an old active mark,
// read with a zero Expires: stale.
func (s *Store) Residents(ctx context.Context) ([]seam.Claim, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	var out []seam.Claim
	err := s.view(func(tx *bolt.Tx) error {
		marks, err := top(tx, bucketActive)
		if err != nil {
			return err
		}
		return marks.ForEach(func(k, v []byte) error {
			o, err := decodeClaim(v)
			if err != nil {
				s.log.Warn("a claim does not decode; listing it as stale", "child", string(k))
				o = seam.Owner{}
			}
			if !s.known(o.ID) {
				o.Expires = time.Time{}
			}
			out = append(out, seam.Claim{ChildID: string(k), Owner: o, Epoch: epochOf(tx, string(k))})
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil // bbolt's key order is the ids' order
}

// ClaimOf returns the child's claim, as Residents reports it, if it is
// claimed.
func (s *Store) ClaimOf(ctx context.Context, childID string) (seam.Claim, bool, error) {
	if err := ctxErr(ctx); err != nil {
		return seam.Claim{}, false, err
	}
	var cl seam.Claim
	var ok bool
	err := s.view(func(tx *bolt.Tx) error {
		if err := requireChild(tx, childID); err != nil {
			return err
		}
		marks, err := top(tx, bucketActive)
		if err != nil {
			return err
		}
		v := marks.Get([]byte(childID))
		if v == nil {
			return nil
		}
		o, err := decodeClaim(v)
		if err != nil {
			s.log.Warn("a claim does not decode; reporting it as stale", "child", childID)
			o = seam.Owner{}
		}
		if !s.known(o.ID) {
			o.Expires = time.Time{}
		}
		cl, ok = seam.Claim{ChildID: childID, Owner: o, Epoch: epochOf(tx, childID)}, true
		return nil
	})
	return cl, ok, err
}
