package workspace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// kind is the JSON type of a tool parameter.
type kind int

const (
	kindString kind = iota
	kindInteger
)

// param describes one tool parameter. The JSON Schema a tool advertises and
// the strict decoder that checks its arguments are both built from the same
// params, so they cannot disagree.
type param struct {
	name     string
	kind     kind
	required bool
	nonEmpty bool // strings only: "" is refused
	min      int  // integers only: smallest allowed value
	desc     string
}

// args are decoded, checked tool arguments: string or int values by name.
// A field that was absent (or null) is not in the map.
type args map[string]any

func (a args) str(name, def string) string {
	if v, ok := a[name].(string); ok {
		return v
	}
	return def
}

func (a args) integer(name string, def int) int {
	if v, ok := a[name].(int); ok {
		return v
	}
	return def
}

type schemaProp struct {
	Type        string `json:"type"`
	Description string `json:"description"`
	Minimum     *int   `json:"minimum,omitempty"`
	MinLength   *int   `json:"minLength,omitempty"`
}

type schemaObject struct {
	Type                 string                `json:"type"`
	Properties           map[string]schemaProp `json:"properties"`
	Required             []string              `json:"required,omitempty"`
	AdditionalProperties bool                  `json:"additionalProperties"`
}

// schemas memoizes schema: every child builds its tool set afresh, from
// the same few parameter lists. An entry is found by a hash of the list and
// used only when the list it was made from is equal, so the map holds one
// entry per distinct list (a deployment has a handful).
var (
	schemas    sync.Map // uint64 -> schemaEntry
	schemaSeed = maphash.MakeSeed()
)

type schemaEntry struct {
	params []param
	raw    json.RawMessage
}

// schema returns the JSON Schema object for params. The caller must not
// modify it.
func schema(params []param) json.RawMessage {
	var h maphash.Hash
	h.SetSeed(schemaSeed)
	for _, p := range params {
		h.WriteString(p.name)
		h.WriteString(p.desc)
		h.WriteByte(byte(p.kind))
	}
	k := h.Sum64()
	if e, ok := schemas.Load(k); ok && slices.Equal(e.(schemaEntry).params, params) {
		return e.(schemaEntry).raw
	}
	raw := encodeSchema(params)
	schemas.Store(k, schemaEntry{slices.Clone(params), raw})
	return raw
}

func encodeSchema(params []param) json.RawMessage {
	s := schemaObject{Type: "object", Properties: map[string]schemaProp{}}
	for _, p := range params {
		sp := schemaProp{Description: p.desc}
		switch p.kind {
		case kindString:
			sp.Type = "string"
			if p.nonEmpty {
				one := 1
				sp.MinLength = &one
			}
		case kindInteger:
			sp.Type = "integer"
			m := p.min
			sp.Minimum = &m
		}
		s.Properties[p.name] = sp
		if p.required {
			s.Required = append(s.Required, p.name)
		}
	}
	raw, err := json.Marshal(s)
	if err != nil {
		panic(err) // static data; cannot happen
	}
	return raw
}

// decodeArgs checks raw against params strictly: it must be a JSON object
// (empty input and null count as {}), every field must be a known parameter
// of the right type, and required fields must be present. Errors name the
// tool and the field and say what is expected.
func decodeArgs(tool string, params []param, raw json.RawMessage) (args, error) {
	fail := func(format string, a ...any) (args, error) {
		return nil, fmt.Errorf("invalid arguments for %s: %s", tool, fmt.Sprintf(format, a...))
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage("{}")
	}
	if raw[0] != '{' {
		return fail("arguments must be a JSON object such as %s", example(params))
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return fail("arguments are not valid JSON (%v); send a JSON object such as %s", err, example(params))
	}
	byName := make(map[string]param, len(params))
	names := make([]string, 0, len(params))
	for _, p := range params {
		byName[p.name] = p
		names = append(names, p.name)
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := args{}
	for _, k := range keys {
		p, ok := byName[k]
		if !ok {
			if len(names) == 0 {
				return fail("unknown field %q; %s takes no arguments", k, tool)
			}
			return fail("unknown field %q; the allowed fields are %s", k, strings.Join(names, ", "))
		}
		v := bytes.TrimSpace(fields[k])
		if string(v) == "null" {
			continue // same as absent
		}
		switch p.kind {
		case kindString:
			var s string
			if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &s) != nil {
				return fail("field %q must be a string", k)
			}
			if p.nonEmpty && s == "" {
				return fail("field %q must not be empty", k)
			}
			out[k] = s
		case kindInteger:
			n, ok := parseInteger(v)
			if !ok {
				return fail("field %q must be an integer", k)
			}
			if n < p.min {
				return fail("field %q must be at least %d", k, p.min)
			}
			out[k] = n
		}
	}
	for _, p := range params {
		if _, ok := out[p.name]; p.required && !ok {
			return fail("field %q is required", p.name)
		}
	}
	return out, nil
}

// parseInteger accepts a JSON number with an integral value (models
// sometimes write 10.0 for 10) that fits in an int; it refuses strings.
func parseInteger(v []byte) (int, bool) {
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return 0, false
	}
	if n, err := strconv.Atoi(string(v)); err == nil {
		return n, true
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || f != math.Trunc(f) || f > math.MaxInt32 || f < math.MinInt32 {
		return 0, false
	}
	return int(f), true
}

// example renders a sample argument object naming the required fields.
func example(params []param) string {
	var parts []string
	for _, p := range params {
		if !p.required {
			continue
		}
		switch p.kind {
		case kindString:
			parts = append(parts, fmt.Sprintf("%q: \"...\"", p.name))
		case kindInteger:
			parts = append(parts, fmt.Sprintf("%q: %d", p.name, p.min))
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
