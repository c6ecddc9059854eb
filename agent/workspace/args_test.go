package workspace

import "testing"

// schema's memo gives each parameter list its own schema: lists that
// differ in any field (here a description and a flag) do not share one.
func TestSchemaMemoKeepsListsApart(t *testing.T) {
	a := []param{{name: "path", kind: kindString, required: true, desc: "one"}}
	b := []param{{name: "path", kind: kindString, required: true, desc: "two"}}
	c := []param{{name: "path", kind: kindString, desc: "one"}}
	for range 2 {
		ra, rb, rc := string(schema(a)), string(schema(b)), string(schema(c))
		if ra != string(encodeSchema(a)) || rb != string(encodeSchema(b)) || rc != string(encodeSchema(c)) {
			t.Fatalf("memoized schemas differ from fresh ones:\n%s\n%s\n%s", ra, rb, rc)
		}
		if ra == rb || ra == rc {
			t.Fatalf("distinct lists share a schema: %s / %s / %s", ra, rb, rc)
		}
	}
}
