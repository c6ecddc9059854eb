package persist

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Listing reads many children at once, so the two records it reads per
// child are binary, not JSON: the by_parent index entry's value (what a
// row shows, plus a checksum of the descriptor bytes) and the checkpoint.
// Both decoders refuse anything malformed and never panic.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

const indexRecordVersion = 1

// indexRecord is the value of a by_parent entry: enough of the header to
// list the child without decoding it, and the descriptor's checksum so a
// listing notices mangled descriptor bytes without decoding them.
type indexRecord struct {
	depth    int64
	mode     string
	provider string
	label    string
	cwd      string // optional: records written before it have none
	model    string // optional (after cwd, empty or not): likewise
	// wtPath, wtBranch, wtBase, wtRepo: the child's worktree, optional and
	// last (after model, empty or not), all four or none.
	wtPath, wtBranch, wtBase, wtRepo string
	descCRC                          uint32
	createdAt                        int64 // Unix nanoseconds
}

func encodeIndexRecord(h seam.Header, descriptor []byte) []byte {
	b := make([]byte, 0, 40+len(h.Mode)+len(h.Provider)+len(h.Label)+len(h.Cwd)+len(h.Model))
	b = append(b, indexRecordVersion)
	b = binary.AppendVarint(b, int64(h.Depth))
	b = binary.BigEndian.AppendUint32(b, checksum(descriptor))
	b = binary.BigEndian.AppendUint64(b, uint64(h.CreatedAt.UnixNano()))
	b = appendString(b, string(h.Mode))
	b = appendString(b, h.Provider)
	b = appendString(b, h.Label)
	wt := h.Worktree != nil
	if h.Cwd != "" || h.Model != "" || wt {
		b = appendString(b, h.Cwd)
	}
	if h.Model != "" || wt {
		b = appendString(b, h.Model)
	}
	if wt {
		b = appendString(b, h.Worktree.Path)
		b = appendString(b, h.Worktree.Branch)
		b = appendString(b, h.Worktree.Base)
		b = appendString(b, h.Worktree.Repo)
	}
	return b
}

var errMalformed = errors.New("malformed binary record")

func decodeIndexRecord(b []byte) (indexRecord, error) {
	var r indexRecord
	if len(b) < 1 || b[0] != indexRecordVersion {
		return r, errMalformed
	}
	b = b[1:]
	d, n := varint(b)
	if n <= 0 || d < 0 || d > math.MaxInt32 {
		return r, errMalformed
	}
	b = b[n:]
	if len(b) < 12 {
		return r, errMalformed
	}
	r.depth = d
	r.descCRC = binary.BigEndian.Uint32(b)
	r.createdAt = int64(binary.BigEndian.Uint64(b[4:]))
	b = b[12:]
	var err error
	if r.mode, b, err = readString(b); err != nil {
		return r, err
	}
	if r.provider, b, err = readString(b); err != nil {
		return r, err
	}
	if r.label, b, err = readString(b); err != nil {
		return r, err
	}
	if len(b) != 0 {
		if r.cwd, b, err = readString(b); err != nil {
			return r, err
		}
		if len(b) != 0 {
			if r.model, b, err = readString(b); err != nil {
				return r, err
			}
			if len(b) != 0 {
				for _, f := range []*string{&r.wtPath, &r.wtBranch, &r.wtBase, &r.wtRepo} {
					if *f, b, err = readString(b); err != nil {
						return r, err
					}
					if *f == "" {
						return r, errMalformed
					}
				}
			}
			if (r.model == "" && r.wtPath == "") || len(b) != 0 {
				return r, errMalformed // one encoding per value
			}
		} else if r.cwd == "" {
			return r, errMalformed // an empty cwd is written only before a model
		}
	}
	return r, nil
}

const checkpointVersion = 1

// encodeCheckpoint is the checkpoint's binary form.
func encodeCheckpoint(c seam.Checkpoint) []byte {
	b := make([]byte, 0, 52+len(c.Mode)+len(c.Label)+len(c.Stop)+len(c.Closing))
	b = append(b, checkpointVersion)
	b = binary.AppendVarint(b, c.Seq)
	b = binary.AppendVarint(b, c.Usage.InputTokens)
	b = binary.AppendVarint(b, c.Usage.OutputTokens)
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(c.Usage.CostUSD))
	b = appendString(b, string(c.Mode))
	b = appendString(b, c.Label)
	b = appendString(b, string(c.Stop))
	if c.Closing != "" {
		// Optional and last, so records written before it existed still
		// decode.
		b = appendString(b, c.Closing)
	}
	return b
}

// decodeCheckpoint decodes a projection checkpoint.
func decodeCheckpoint(b []byte) (seam.Checkpoint, error) {
	var c seam.Checkpoint
	if len(b) < 1 || b[0] != checkpointVersion {
		return c, errMalformed
	}
	b = b[1:]
	var vals [3]int64
	for i := range vals {
		v, n := varint(b)
		if n <= 0 || v < 0 {
			return seam.Checkpoint{}, errMalformed
		}
		vals[i], b = v, b[n:]
	}
	if len(b) < 8 {
		return seam.Checkpoint{}, errMalformed
	}
	cost := math.Float64frombits(binary.BigEndian.Uint64(b))
	if math.IsNaN(cost) || math.IsInf(cost, 0) || cost < 0 {
		return seam.Checkpoint{}, errMalformed
	}
	b = b[8:]
	var mode, label, stop string
	var err error
	if mode, b, err = readString(b); err != nil {
		return seam.Checkpoint{}, err
	}
	if label, b, err = readString(b); err != nil {
		return seam.Checkpoint{}, err
	}
	if stop, b, err = readString(b); err != nil {
		return seam.Checkpoint{}, err
	}
	if len(b) != 0 {
		if c.Closing, b, err = readString(b); err != nil {
			return seam.Checkpoint{}, err
		}
		if c.Closing == "" || len(b) != 0 {
			return seam.Checkpoint{}, errMalformed // one encoding per value
		}
	}
	c.Seq = vals[0]
	c.Usage = seam.Usage{InputTokens: vals[1], OutputTokens: vals[2], CostUSD: cost}
	c.Mode, c.Label, c.Stop = seam.Mode(mode), label, agent.StopReason(stop)
	return c, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// varint and uvarint accept only the minimal encoding, so every accepted
// record has one byte form (what the fuzz tests check).
func varint(b []byte) (int64, int) {
	v, n := binary.Varint(b)
	if n > 0 && len(binary.AppendVarint(nil, v)) != n {
		return 0, -1
	}
	return v, n
}

func uvarint(b []byte) (uint64, int) {
	v, n := binary.Uvarint(b)
	if n > 0 && len(binary.AppendUvarint(nil, v)) != n {
		return 0, -1
	}
	return v, n
}

func readString(b []byte) (string, []byte, error) {
	n, k := uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return "", nil, errMalformed
	}
	return string(b[k : k+int(n)]), b[k+int(n):], nil
}

func unixTime(nanos int64) time.Time { return time.Unix(0, nanos).UTC() }
