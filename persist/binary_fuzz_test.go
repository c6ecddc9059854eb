package persist

import (
	"bytes"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// The listing's binary records come from disk too: any bytes must decode
// or be refused without a panic, and what decodes must re-encode to the
// same bytes.

func FuzzDecodeCheckpoint(f *testing.F) {
	f.Add(encodeCheckpoint(seam.Checkpoint{Seq: 12, Mode: seam.ModeContinuable, Label: "fix the build",
		Usage: seam.Usage{InputTokens: 100, OutputTokens: 7, CostUSD: 0.25}, Stop: agent.StopAborted}))
	f.Add(encodeCheckpoint(seam.Checkpoint{Seq: 3, Stop: agent.StopCompleted, Closing: "the report is written"}))
	f.Add(encodeCheckpoint(seam.Checkpoint{}))
	f.Add([]byte{})
	f.Add([]byte{1, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeCheckpoint(b)
		if err != nil {
			return
		}
		if again := encodeCheckpoint(c); !bytes.Equal(again, b) {
			t.Fatalf("accepted %x but it re-encodes as %x", b, again)
		}
	})
}

func FuzzDecodeIndexRecord(f *testing.F) {
	h := seam.Header{ID: "agent-1", Parent: "principal:local", Depth: 2, Mode: seam.ModeContinuable,
		Provider: "spawn", Label: "read the logs", CreatedAt: time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)}
	f.Add(encodeIndexRecord(h, []byte(`{"version":1}`)))
	h.Cwd = "/home/u/project"
	f.Add(encodeIndexRecord(h, []byte(`{"version":1}`)))
	h.Model = "fast"
	f.Add(encodeIndexRecord(h, []byte(`{"version":1}`)))
	h.Cwd = ""
	f.Add(encodeIndexRecord(h, []byte(`{"version":1}`)))
	h.Model = ""
	h.Worktree = &seam.Worktree{Path: "/d/worktrees/agent-1", Branch: "subagent/agent-1", Base: "abc", Repo: "/src/p"}
	f.Add(encodeIndexRecord(h, []byte(`{"version":1}`)))
	f.Add(encodeIndexRecord(seam.Header{CreatedAt: time.Unix(0, 0)}, nil))
	f.Add([]byte{})
	f.Add([]byte{1, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeIndexRecord(b)
		if err != nil {
			return
		}
		if r.depth < 0 {
			t.Fatalf("accepted a negative depth from %x", b)
		}
		// Rebuild the bytes from the record and compare.
		var again []byte
		again = append(again, indexRecordVersion)
		again = appendVarintForTest(again, r.depth)
		again = append(again, byte(r.descCRC>>24), byte(r.descCRC>>16), byte(r.descCRC>>8), byte(r.descCRC))
		for i := 7; i >= 0; i-- {
			again = append(again, byte(uint64(r.createdAt)>>(8*i)))
		}
		again = appendString(again, r.mode)
		again = appendString(again, r.provider)
		again = appendString(again, r.label)
		wt := r.wtPath != ""
		if r.cwd != "" || r.model != "" || wt {
			again = appendString(again, r.cwd)
		}
		if r.model != "" || wt {
			again = appendString(again, r.model)
		}
		if wt {
			again = appendString(again, r.wtPath)
			again = appendString(again, r.wtBranch)
			again = appendString(again, r.wtBase)
			again = appendString(again, r.wtRepo)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("accepted %x but it re-encodes as %x", b, again)
		}
	})
}

func appendVarintForTest(b []byte, v int64) []byte {
	ux := uint64(v) << 1
	if v < 0 {
		ux = ^ux
	}
	for ux >= 0x80 {
		b = append(b, byte(ux)|0x80)
		ux >>= 7
	}
	return append(b, byte(ux))
}

func FuzzDecodeClaim(f *testing.F) {
	f.Add(encodeClaim(seam.Owner{ID: "manager-0123456789abcdef", Expires: time.Date(2027, 1, 2, 3, 4, 5, 6, time.UTC)}))
	f.Add(encodeClaim(seam.Owner{ID: "x", Expires: time.Unix(0, 0)}))
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := decodeClaim(b)
		if err != nil || len(b) == 0 { // empty: an old active mark, the zero Owner
			return
		}
		if o.ID == "" {
			t.Fatalf("accepted a claim without an owner from %x", b)
		}
		if again := encodeClaim(o); !bytes.Equal(again, b) {
			t.Fatalf("accepted %x but it re-encodes as %x", b, again)
		}
	})
}
