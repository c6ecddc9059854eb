package openai

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
)

// benchTools are tool definitions the size of a child's: the workspace
// tools and the delegation tools, schemas of a few hundred bytes to 2 KB.
func benchTools() []llm.ToolDef {
	var out []llm.ToolDef
	for i := range 10 {
		props := map[string]any{}
		for j := range 6 + i%4 {
			props[fmt.Sprintf("field_%d", j)] = map[string]any{"type": "string", "description": "A field that a model fills in, described in a sentence of ordinary length."}
		}
		raw, _ := json.Marshal(map[string]any{"type": "object", "properties": props, "required": []string{"field_0"}, "additionalProperties": false})
		out = append(out, llm.ToolDef{Name: fmt.Sprintf("tool_%d", i), Description: "Does one thing a child needs, described for the model in a couple of sentences so it knows when to call it.", Parameters: raw})
	}
	return out
}

// BenchmarkRequestBody is the client's work per model call before the
// HTTP round trip: encoding a request (a short conversation and a child's
// tools) as the body sent.
func BenchmarkRequestBody(b *testing.B) {
	c := New(transport.Config{Model: "m", APIKey: "k"})
	req := llm.Request{Messages: []llm.Message{{Role: llm.RoleSystem, Content: "You are a subagent."}, {Role: llm.RoleUser, Content: "Do the task."}}, Tools: benchTools()}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.body(req); err != nil {
			b.Fatal(err)
		}
	}
}

// The tools a request carries are the definitions given, whether encoded
// afresh or from the cache: name, description and parameters (an empty
// object schema when none), as the chat API takes them.
func TestRequestToolsAreTheDefinitionsGiven(t *testing.T) {
	c := New(transport.Config{Model: "m", APIKey: "k"})
	defs := append(benchTools(), llm.ToolDef{Name: "bare"}, llm.ToolDef{Name: "spaced", Parameters: json.RawMessage(" {\"type\": \"object\"} ")})
	for round := range 2 {
		body, err := c.body(llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}, Tools: defs})
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Tools []struct {
				Type     string `json:"type"`
				Function struct {
					Name        string          `json:"name"`
					Description *string         `json:"description"`
					Parameters  json.RawMessage `json:"parameters"`
				} `json:"function"`
			} `json:"tools"`
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("round %d: %v\n%s", round, err, body)
		}
		if len(got.Tools) != len(defs) {
			t.Fatalf("round %d: %d tools, want %d", round, len(got.Tools), len(defs))
		}
		for i, d := range defs {
			g := got.Tools[i]
			wantParams := string(d.Parameters)
			switch d.Name {
			case "bare":
				wantParams = `{"type":"object","properties":{}}`
			case "spaced":
				wantParams = `{"type": "object"}`
			}
			if g.Type != "function" || g.Function.Name != d.Name || !jsonEqual(t, g.Function.Parameters, []byte(wantParams)) {
				t.Errorf("round %d: tools[%d] = %+v, want %s with %s", round, i, g, d.Name, wantParams)
			}
			if (g.Function.Description == nil) != (d.Description == "") || (g.Function.Description != nil && *g.Function.Description != d.Description) {
				t.Errorf("round %d: tools[%d] description = %v, want %q", round, i, g.Function.Description, d.Description)
			}
		}
	}
	for _, bad := range []string{`[1]`, `{"type":`, `"x"`} {
		if _, err := c.body(llm.Request{Model: "m", Tools: []llm.ToolDef{{Name: "bad", Parameters: json.RawMessage(bad)}}}); err == nil {
			t.Errorf("parameters %s were accepted", bad)
		}
	}
	if _, err := c.body(llm.Request{Model: "m", Tools: []llm.ToolDef{{Parameters: json.RawMessage(`{}`)}}}); err == nil {
		t.Error("a tool without a name was accepted")
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// The cache tells definitions apart by all they hold: the same name with
// another description or schema, or the cache mark, is encoded afresh.
func TestToolCacheKeepsDefinitionsApart(t *testing.T) {
	tc := transport.ToolCache{Encode: func(t llm.ToolDef, mark bool) ([]byte, error) {
		return json.Marshal(struct {
			T    llm.ToolDef
			Mark bool
		}{t, mark})
	}}
	defs := []llm.ToolDef{
		{Name: "x", Description: "a", Parameters: json.RawMessage(`{"type":"object"}`)},
		{Name: "x", Description: "b", Parameters: json.RawMessage(`{"type":"object"}`)},
		{Name: "x", Description: "a", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)},
		{Name: "y", Description: "a", Parameters: json.RawMessage(`{"type":"object"}`)},
	}
	for round := range 2 {
		for _, mark := range []bool{false, true} {
			for i, d := range defs {
				got, err := tc.Encoded(d, mark)
				if err != nil {
					t.Fatal(err)
				}
				want, _ := tc.Encode(d, mark)
				if string(got) != string(want) {
					t.Errorf("round %d, mark %v, defs[%d]: got %s, want %s", round, mark, i, got, want)
				}
			}
		}
	}
}
