package schemas_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/schemas"
)

// FuzzOutputSchema compiles arbitrary schema bytes and validates arbitrary
// instance bytes against whatever compiles: neither may panic, overflow the
// stack (which would kill the fuzzer's process, not fail a test) or take
// long, and errors stay short.
func FuzzOutputSchema(f *testing.F) {
	seeds := [][2]string{
		{tree, `{"name":"a","children":[{"name":"b","children":[]}]}`},
		{`{"type":"object","properties":{"next":{"$ref":"#"}}}`, `{"next":{"next":{}}}`},
		{`{"type":"object","properties":{"a":{"type":"nonsense"}}}`, `{"a":1}`},
		{`{"type":"object","patternProperties":{"^x":{"type":"integer"}},"additionalProperties":false}`, `{"x1":1,"y":2}`},
		{`{"type":"object","properties":{"l":{"type":"array","prefixItems":[{"type":"string"}],"items":{"$ref":"#"},"contains":{"type":"object"}}}}`, `{"l":["s",{},{"l":[]}]}`},
		{`{"type":"object","$dynamicAnchor":"m","properties":{"x":{"$dynamicRef":"#m"}}}`, `{"x":{"x":{}}}`},
		{`{"type":"object","$ref":"#/$defs/x","$defs":{"x":{"anyOf":[{"$ref":"#/$defs/y"},{"$ref":"#/$defs/y"}]},"y":{"properties":{"a":{"$ref":"#/$defs/x"}}}}}`,
			strings.Repeat(`{"a":`, 40) + `{}` + strings.Repeat(`}`, 40)},
	}
	for _, raw := range cyclicSchemas {
		seeds = append(seeds, [2]string{raw, `{"a":{"b":[1,2,{"c":null}]}}`})
	}
	for _, s := range seeds {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, schema, instance []byte) {
		start := time.Now()
		o, err := schemas.CompileOutput(schema)
		if err != nil {
			if len(err.Error()) > 1200 {
				t.Fatalf("a compile error of %d bytes", len(err.Error()))
			}
			return
		}
		if _, err := o.ValidateJSON(instance); err != nil && len(err.Error()) > 1200 {
			t.Fatalf("a validation error of %d bytes", len(err.Error()))
		}
		// A value decoded elsewhere goes through the same bounds.
		var v any
		if json.Unmarshal(instance, &v) == nil {
			_ = o.Validate(v)
		}
		// Exhausting the work budget takes about 0.1 s, 1 s under -race;
		// an unbounded blow-up takes forever.
		if d := time.Since(start); d > 15*time.Second {
			t.Fatalf("compile and validate took %v", d)
		}
	})
}
