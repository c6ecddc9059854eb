package schemas_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// toolArgs is the subagent tool's argument struct, with the real filter
// type, so the fuzzer also checks that what is accepted survives the round
// trip through the types the server uses.
type toolArgs struct {
	Description  string           `json:"description"`
	Prompt       string           `json:"prompt"`
	Provider     string           `json:"provider,omitempty"`
	OutputSchema json.RawMessage  `json:"output_schema,omitempty"`
	MaxDepth     *int             `json:"max_depth,omitempty"`
	ToolFilter   *seam.ToolFilter `json:"tool_filter,omitempty"`
	Persona      string           `json:"persona,omitempty"`
	Cwd          string           `json:"cwd,omitempty"`
}

// FuzzDecode feeds arbitrary bytes to the subagent input validator: it must
// not panic, must refuse with a worded error, and whatever it accepts must
// meet the schema's promises and validate again once re-encoded.
func FuzzDecode(f *testing.F) {
	v := subagentValidator(f, "spawn", "fork")
	for _, s := range []string{
		`{"description":"d","prompt":"p"}`,
		`{"description":"Find TODOs","prompt":"Search","provider":"fork","output_schema":{"type":"object"},"max_depth":2,"tool_filter":{"allow":[]},"persona":"","cwd":"sub"}`,
		`{"description":"d","prompt":"p","max_depth":2.0}`,
		`{"description":"d","prompt":"p","tool_filter":{"deny":["run_shell"]}}`,
		`{"description":"d","prompt":"p","max_depth":-1}`,
		`{"description":"d","description":"","prompt":"p"}`,
		`[]`, `null`, `{`, ``, `"x"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m map[string]any
		err := v.Decode(data, &m)
		var args toolArgs
		errArgs := v.Decode(data, &args) // must not panic either
		if err != nil {
			if !strings.HasPrefix(err.Error(), prefix) {
				t.Fatalf("error %q lacks the prefix", err)
			}
			if !utf8.ValidString(strings.TrimPrefix(err.Error(), prefix)) && utf8.Valid(data) {
				t.Fatalf("error %q is not valid UTF-8 for valid UTF-8 input", err)
			}
			return
		}
		for _, k := range []string{"description", "prompt"} {
			if s, ok := m[k].(string); !ok || s == "" {
				t.Fatalf("accepted %q with %s = %#v", data, k, m[k])
			}
		}
		if p, ok := m["provider"]; ok && p != "spawn" && p != "fork" {
			t.Fatalf("accepted provider %#v", p)
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("re-encoding an accepted value: %v", err)
		}
		if err := v.Decode(b, &map[string]any{}); err != nil {
			t.Fatalf("accepted %q but not its re-encoding %s: %v", data, b, err)
		}
		if errArgs != nil {
			// Only a number no int holds may pass the schema and not the struct.
			if !strings.Contains(errArgs.Error(), `field "max_depth" cannot hold number`) {
				t.Fatalf("accepted %q as a map but not as the tool's arguments: %v", data, errArgs)
			}
			return
		}
		b, err = json.Marshal(args)
		if err != nil {
			t.Fatalf("re-encoding accepted arguments: %v", err)
		}
		if err := v.Decode(b, &toolArgs{}); err != nil {
			t.Fatalf("accepted %q but not its arguments re-encoded as %s: %v", data, b, err)
		}
	})
}
