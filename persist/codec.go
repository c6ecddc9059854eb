package persist

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// The decoders below read bytes from disk. They never panic, accept exactly
// one JSON object (no trailing data, no bare null), and return an error for
// anything else; the store wraps that error with seam.ErrCorrupt.

// decodeObject decodes exactly one JSON object from b into v.
func decodeObject(b []byte, v any, strict bool) error {
	trimmed := bytes.TrimLeft(b, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return errors.New("not a JSON object")
	}
	if !strict {
		// Unmarshal already refuses anything after the one value.
		return json.Unmarshal(b, v)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// decodeEvent decodes one journal event with the journal's own codec
// (agent.DecodeEvent): unknown fields are tolerated, a record of a kind or
// version this build does not know folds to agent.EventUnknown, and bytes
// that are not a record are an error.
func decodeEvent(b []byte) (agent.Event, error) {
	return agent.DecodeEvent(b)
}

// decodeHeader decodes a child's header. Unknown fields are tolerated; a
// header without an id is not a header.
func decodeHeader(b []byte) (seam.Header, error) {
	var h seam.Header
	if err := decodeObject(b, &h, false); err != nil {
		return seam.Header{}, err
	}
	if h.ID == "" {
		return seam.Header{}, errors.New("header has no id")
	}
	return h, nil
}

// decodeDescriptor decodes a descriptor strictly: unknown fields and any
// version but seam.DescriptorVersion are refused, because a descriptor is
// the only input of a cold resume and must not be half understood.
func decodeDescriptor(b []byte) (seam.Descriptor, error) {
	var d seam.Descriptor
	if err := decodeObject(b, &d, true); err != nil {
		return seam.Descriptor{}, err
	}
	if d.Version != seam.DescriptorVersion {
		return seam.Descriptor{}, fmt.Errorf("descriptor version %d is unknown (this build reads %d)", d.Version, seam.DescriptorVersion)
	}
	return d, nil
}

// decodeNotice decodes a principal's queued notice.
func decodeNotice(b []byte) (seam.Notice, error) {
	var n seam.Notice
	if err := decodeObject(b, &n, false); err != nil {
		return seam.Notice{}, err
	}
	return n, nil
}

// seqKey is the 8-byte big-endian key of a journal event or notice, so that
// bbolt's byte order is numeric order.
func seqKey(seq uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], seq)
	return k[:]
}

// parentKey is an index key under by_parent: created-at as 8-byte big-endian
// Unix nanoseconds with the sign bit flipped (so times before 1970 still sort
// first), followed by the child id.
func parentKey(createdAtNanos int64, id string) []byte {
	k := make([]byte, 8, 8+len(id))
	binary.BigEndian.PutUint64(k, uint64(createdAtNanos)^(1<<63))
	return append(k, id...)
}
