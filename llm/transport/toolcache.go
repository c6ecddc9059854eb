package transport

// The tool-definition cache and check both vendor clients share.

import (
	"bytes"
	"encoding/json"
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/mcp-subagent/mcp-subagent/llm"
)

// toolCache holds encoded tool definitions by their content (and whether
// they carry the backend's cache mark). Lookups take no lock and copy
// nothing: every model call of every child makes one per tool, and 10,000
// children calling at once queued on a mutex here. An entry is found by a
// hash of the definition and used only if the definition is equal. It is
// bounded: a deployment has a few dozen distinct tools; past
// maxCachedTools it starts over rather than grow.
type ToolCache struct {
	Encode func(t llm.ToolDef, mark bool) ([]byte, error)
	m      sync.Map // uint64 -> *toolEntry
	n      atomic.Int64
}

type toolEntry struct {
	def  llm.ToolDef
	mark bool
	raw  []byte
}

var toolSeed = maphash.MakeSeed()

const maxCachedTools = 1024

func (tc *ToolCache) Encoded(t llm.ToolDef, mark bool) ([]byte, error) {
	var h maphash.Hash
	h.SetSeed(toolSeed)
	h.WriteString(t.Name)
	h.WriteByte(0)
	h.WriteString(t.Description)
	h.WriteByte(0)
	h.Write(t.Parameters)
	if mark {
		h.WriteByte(1)
	}
	k := h.Sum64()
	if v, ok := tc.m.Load(k); ok {
		if e := v.(*toolEntry); e.mark == mark && e.def.Name == t.Name && e.def.Description == t.Description && bytes.Equal(e.def.Parameters, t.Parameters) {
			return e.raw, nil
		}
	}
	raw, err := tc.Encode(t, mark)
	if err != nil {
		return nil, err
	}
	if tc.n.Add(1) > maxCachedTools {
		tc.m.Clear()
		tc.n.Store(1)
	}
	t.Parameters = bytes.Clone(t.Parameters)
	tc.m.Store(k, &toolEntry{def: t, mark: mark, raw: raw})
	return raw, nil
}

// toolSchema checks a tool definition and returns its parameters schema,
// which must be a JSON object (an empty one when none is given).
func ToolSchema(t llm.ToolDef) (json.RawMessage, error) {
	if t.Name == "" {
		return nil, errors.New("tool without a name")
	}
	params := json.RawMessage(`{"type":"object","properties":{}}`)
	if trimmed := bytes.TrimSpace(t.Parameters); len(trimmed) > 0 {
		if trimmed[0] != '{' || !json.Valid(trimmed) {
			return nil, errors.New("parameters are not a JSON object")
		}
		params = trimmed
	}
	return params, nil
}
