package edge

import (
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// schemaProvider claims output schema support and counts its starts.
type schemaProvider struct{ plainProvider }

func (p *schemaProvider) Name() string { return "schemas" }
func (p *schemaProvider) Capabilities() seam.Capabilities {
	return seam.Capabilities{OutputSchema: true}
}

// A cyclic or invalid output_schema is an INVALID_REQUEST naming the field
// before any child starts: accepted, the cycle would overflow the stack at
// the child's first structured_output and kill the server.
func TestABadOutputSchemaIsAnInvalidRequestBeforeStart(t *testing.T) {
	p := &schemaProvider{}
	c := serveHTTP(t, p)
	for _, tc := range []struct {
		name   string
		schema map[string]any
		want   string
	}{
		{"the root refers to itself", map[string]any{"type": "object", "$ref": "#"}, "applies itself to the same value forever"},
		{"a $defs self-loop", map[string]any{"type": "object", "$defs": map[string]any{"a": map[string]any{"$ref": "#/$defs/a"}},
			"properties": map[string]any{"x": map[string]any{"$ref": "#/$defs/a"}}}, "applies itself to the same value forever"},
		{"a mutual loop", map[string]any{"type": "object", "$ref": "#/$defs/a", "$defs": map[string]any{
			"a": map[string]any{"$ref": "#/$defs/b"}, "b": map[string]any{"$ref": "#/$defs/a"}}}, "applies itself to the same value forever"},
		{"an unknown type", map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "nonsense"}}},
			`"type" at /properties/a is "nonsense"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := callSubagent(t, c, map[string]any{"description": "d", "prompt": "p", "output_schema": tc.schema})
			got := ResultText(res)
			if !res.IsError || !strings.Contains(got, "INVALID_REQUEST") || !strings.Contains(got, "output_schema") || !strings.Contains(got, tc.want) {
				t.Errorf("result = %v %q, want INVALID_REQUEST naming output_schema and %q", res.IsError, got, tc.want)
			}
		})
	}
	if p.started.Load() != 0 {
		t.Errorf("the provider was started %d times for refused schemas", p.started.Load())
	}
	tree := map[string]any{"type": "object", "$ref": "#/$defs/node", "$defs": map[string]any{"node": map[string]any{"type": "object",
		"properties": map[string]any{"children": map[string]any{"type": "array", "items": map[string]any{"$ref": "#/$defs/node"}}}}}}
	if res := callSubagent(t, c, map[string]any{"description": "d", "prompt": "p", "output_schema": tree}); res.IsError {
		t.Errorf("a recursive tree schema was refused: %q", ResultText(res))
	}
}
