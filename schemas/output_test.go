package schemas_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/mcp-subagent/mcp-subagent/schemas"
)

// cyclicSchemas apply a schema to the same value forever; jsonschema-go
// resolves each of them and then overflows the stack on the first Validate.
var cyclicSchemas = map[string]string{
	"the root refers to itself":       `{"type":"object","$ref":"#"}`,
	"a $defs entry refers to itself":  `{"type":"object","$defs":{"a":{"$ref":"#/$defs/a"}},"properties":{"x":{"$ref":"#/$defs/a"}}}`,
	"two $defs refer to each other":   `{"type":"object","$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`,
	"a loop through allOf":            `{"type":"object","allOf":[{"$ref":"#"}]}`,
	"a loop through anyOf and not":    `{"type":"object","anyOf":[{"type":"object"},{"not":{"$ref":"#"}}]}`,
	"a loop through if":               `{"type":"object","if":{"$ref":"#"}}`,
	"a loop through dependentSchemas": `{"type":"object","dependentSchemas":{"k":{"$ref":"#"}}}`,
	"a loop through an $anchor":       `{"type":"object","properties":{"x":{"$ref":"#a"}},"$defs":{"a":{"$anchor":"a","oneOf":[{"$ref":"#a"}]}}}`,
	"a loop through nested $ids":      `{"$id":"https://example.com/root","type":"object","$defs":{"a":{"$id":"a","allOf":[{"$ref":"https://example.com/a"}]}}}`,
	"a $dynamicRef loop":              `{"type":"object","$dynamicAnchor":"m","properties":{"x":{"$dynamicRef":"#m"}},"$defs":{"d":{"$dynamicAnchor":"m","$dynamicRef":"#m"}}}`,
	"a draft-07 definitions loop":     `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","definitions":{"a":{"$ref":"#/definitions/a"}},"properties":{"x":{"$ref":"#/definitions/a"}}}`,
	"an escaped pointer loop":         `{"type":"object","$defs":{"a/b~c":{"$ref":"#/$defs/a~1b~0c"}}}`,
}

func TestACyclicOutputSchemaIsRefusedAtCompile(t *testing.T) {
	for name, raw := range cyclicSchemas {
		t.Run(name, func(t *testing.T) {
			// The library itself takes it, which is the danger.
			var s jsonschema.Schema
			if err := json.Unmarshal([]byte(raw), &s); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Resolve(nil); err != nil {
				t.Fatalf("jsonschema-go no longer resolves it (%v); the case tests nothing", err)
			}
			_, err := schemas.CompileOutput([]byte(raw))
			if err == nil || !strings.Contains(err.Error(), "applies itself to the same value forever") {
				t.Fatalf("CompileOutput(%s) = %v, want the loop refused", raw, err)
			}
		})
	}
}

// tree is a legitimate recursive schema: each level descends into the value.
const tree = `{"$defs":{"node":{"type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["name"]}},"type":"object","$ref":"#/$defs/node"}`

func nestedTree(depth int) any {
	var v any = map[string]any{"name": "leaf"}
	for i := 0; i < depth; i++ {
		v = map[string]any{"name": fmt.Sprint(i), "children": []any{v}}
	}
	return v
}

func TestARecursiveSchemaThatDescendsIsAcceptedAndValidates(t *testing.T) {
	for name, raw := range map[string]string{
		"a tree through $defs":    tree,
		"a list through the root": `{"type":"object","properties":{"next":{"$ref":"#"},"v":{"type":"integer"}}}`,
		"a draft-07 tree":         `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","definitions":{"n":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/definitions/n"}}}}},"properties":{"root":{"$ref":"#/definitions/n"}}}`,
		"shared $defs, no loop":   `{"type":"object","$defs":{"a":{"type":"string"},"b":{"allOf":[{"$ref":"#/$defs/a"},{"$ref":"#/$defs/a"}]}},"properties":{"x":{"$ref":"#/$defs/b"},"y":{"$ref":"#/$defs/b"}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := schemas.CompileOutput([]byte(raw)); err != nil {
				t.Fatalf("CompileOutput: %v", err)
			}
		})
	}
	o, err := schemas.CompileOutput([]byte(tree))
	if err != nil {
		t.Fatal(err)
	}
	// 60 levels of tree are 120 of nesting: inside MaxOutputDepth.
	if err := o.Validate(nestedTree(60)); err != nil {
		t.Errorf("a tree 60 levels deep: %v", err)
	}
	bad := nestedTree(30)
	bad.(map[string]any)["children"].([]any)[0].(map[string]any)["name"] = 7
	if err := o.Validate(bad); err == nil || !strings.Contains(err.Error(), `"name"`) {
		t.Errorf("a tree with a number for a name: %v, want the field named", err)
	}
}

func TestAValueNestedTooDeepIsRefusedNotCrashed(t *testing.T) {
	o, err := schemas.CompileOutput([]byte(tree))
	if err != nil {
		t.Fatal(err)
	}
	// 100k levels would overflow any recursive validator's budget of
	// patience if not its stack; it is refused before validation.
	deep := nestedTree(100_000)
	if err := o.Validate(deep); err == nil || !strings.Contains(err.Error(), "deeper than") {
		t.Errorf("Validate of a 100k-deep tree = %v, want it refused for its depth", err)
	}
	raw := strings.Repeat(`{"name":"x","children":[`, 100_000) + `{"name":"leaf"}` + strings.Repeat(`]}`, 100_000)
	if _, err := o.ValidateJSON([]byte(raw)); err == nil || !strings.Contains(err.Error(), "deeper than") {
		t.Errorf("ValidateJSON of a 100k-deep tree = %v, want it refused for its depth", err)
	}
	// Brackets inside strings are not nesting.
	if _, err := o.ValidateJSON([]byte(`{"name":"` + strings.Repeat(`[{\"`, 1000) + `"}`)); err != nil {
		t.Errorf("brackets in a string: %v", err)
	}
	at := func(levels int) string { // levels of objects and arrays in all
		n := (levels - 1) / 2
		s := strings.Repeat(`{"name":"x","children":[`, n) + `{"name":"leaf"}` + strings.Repeat(`]}`, n)
		return s
	}
	if _, err := o.ValidateJSON([]byte(at(schemas.MaxOutputDepth - 1))); err != nil {
		t.Errorf("a value at the depth limit: %v", err)
	}
	if _, err := o.ValidateJSON([]byte(at(schemas.MaxOutputDepth + 2))); err == nil {
		t.Errorf("a value past the depth limit was accepted")
	}
}

func TestAnInvalidOutputSchemaIsRefusedNamingTheField(t *testing.T) {
	for _, tc := range []struct{ schema, want string }{
		{`{"type":"object","properties":{"a":{"type":"nonsense"}}}`, `"type" at /properties/a is "nonsense"; use one of array, boolean`},
		{`{"type":"object","properties":{"a":{"type":["string","nonsense"]}}}`, `"type" at /properties/a is "nonsense"`},
		{`{"type":"object","properties":{"a":{"type":["string","string"]}}}`, `lists "string" twice`},
		{`{"type":"object","properties":{"a":{"type":[]}}}`, `empty list`},
		{`{"type":"object","$defs":{"x":{"items":{"minLength":-1}}}}`, `"minLength" at /$defs/x/items is -1`},
		{`{"type":"object","properties":{"n":{"multipleOf":0}}}`, `"multipleOf" at /properties/n is 0`},
		{`{"type":"object","required":["a","a"]}`, `"required" at the root lists "a" twice`},
		{`{"type":"object","$schema":"https://example.com/mine"}`, `"$schema" "https://example.com/mine" is not supported`},
		{`{"type":"object","properties":{"a":{"$ref":"#/$defs/missing"}}}`, "does not resolve"},
		{`{"type":"object","properties":{"a":{"pattern":"("}}}`, "does not resolve"},
		{`{"type":"array"}`, `"type": "object"`},
		{`{"type":`, "not a JSON Schema"},
	} {
		_, err := schemas.CompileOutput([]byte(tc.schema))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CompileOutput(%s) = %v, want %q", tc.schema, err, tc.want)
		}
	}
}

func TestAnOutputSchemaErrorQuotesLittle(t *testing.T) {
	long := strings.Repeat("x", 100_000)
	for _, raw := range []string{
		`{"type":"object","properties":{"` + long + `":{"type":"` + long + `"}}}`,
		`{"type":"object","$ref":"#/$defs/` + long + `"}`,
		`{"type":"object","$defs":{"` + long + `":{"$ref":"#/$defs/` + long + `"}}}`,
	} {
		_, err := schemas.CompileOutput([]byte(raw))
		if err == nil || len(err.Error()) > 1000 {
			t.Errorf("error of %d bytes: %.200v", len(fmt.Sprint(err)), err)
		}
	}
}

func TestAnOutputSchemaThatFansOutIsRefused(t *testing.T) {
	// Each level is anyOf over the next level twice: 2^40 applications.
	var b strings.Builder
	b.WriteString(`{"type":"object","$ref":"#/$defs/d0","$defs":{`)
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&b, `"d%d":{"anyOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]},`, i, i+1, i+1)
	}
	b.WriteString(`"d40":{"type":"object"}}}`)
	if _, err := schemas.CompileOutput([]byte(b.String())); err == nil || !strings.Contains(err.Error(), "applies more than") {
		t.Errorf("CompileOutput of a doubling anyOf chain = %v, want it refused", err)
	}
	// A long chain of $refs is refused for its length.
	b.Reset()
	b.WriteString(`{"type":"object","$ref":"#/$defs/d0","$defs":{`)
	for i := 0; i < 100; i++ {
		fmt.Fprintf(&b, `"d%d":{"$ref":"#/$defs/d%d"},`, i, i+1)
	}
	b.WriteString(`"d100":{}}}`)
	if _, err := schemas.CompileOutput([]byte(b.String())); err == nil || !strings.Contains(err.Error(), "a chain of more than") {
		t.Errorf("CompileOutput of a 100-long $ref chain = %v, want it refused", err)
	}
}

func TestAValueTooCostlyToCheckIsRefused(t *testing.T) {
	// Each property level applies the next twice: validating a value n deep
	// costs 2^n, though the schema is small and loop-free.
	o, err := schemas.CompileOutput([]byte(`{"type":"object","$ref":"#/$defs/x","$defs":{"x":{"anyOf":[{"$ref":"#/$defs/y"},{"$ref":"#/$defs/y"}]},"y":{"properties":{"a":{"$ref":"#/$defs/x"}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	var v any = map[string]any{}
	for i := 0; i < 60; i++ {
		v = map[string]any{"a": v}
	}
	if err := o.Validate(v); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("Validate = %v, want the value refused as too costly", err)
	}
	if err := o.Validate(map[string]any{"a": map[string]any{}}); err != nil {
		t.Errorf("a shallow value: %v", err)
	}
}

// TestEverySubschemaFieldIsClassified fails when jsonschema-go grows a
// subschema keyword the loop check does not know: a new in-place keyword
// would be a loop it misses.
func TestEverySubschemaFieldIsClassified(t *testing.T) {
	known := map[string]bool{
		"Defs": true, "Definitions": true, "ContentSchema": true, // never applied
		"AllOf": true, "AnyOf": true, "OneOf": true, "Not": true, "If": true, "Then": true, "Else": true,
		"DependentSchemas": true, "DependencySchemas": true, // in place
		"Properties": true, "PatternProperties": true, "AdditionalProperties": true, "PropertyNames": true,
		"UnevaluatedProperties": true, "PrefixItems": true, "Items": true, "ItemsArray": true,
		"AdditionalItems": true, "Contains": true, "UnevaluatedItems": true, // descend
	}
	st := reflect.TypeFor[*jsonschema.Schema]()
	for _, f := range reflect.VisibleFields(st.Elem()) {
		switch f.Type {
		case st, reflect.TypeFor[[]*jsonschema.Schema](), reflect.TypeFor[map[string]*jsonschema.Schema]():
			if !known[f.Name] {
				t.Errorf("jsonschema.Schema.%s holds subschemas the output checks do not classify", f.Name)
			}
		}
	}
}
