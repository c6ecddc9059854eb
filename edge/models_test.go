package edge

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/manager"
)

// The published subagent schema lists the configured model names: as an
// enum when every provider takes them, in the description when some take
// their CLI's own ids (an enum would refuse those).
func TestTheSubagentSchemaListsTheModels(t *testing.T) {
	spawn := manager.ProviderInfo{Name: "spawn", Models: []string{"main", "fast"}}
	fork := manager.ProviderInfo{Name: "fork", Models: []string{"main", "fast"}}
	codex := manager.ProviderInfo{Name: "codex"}
	model := func(ps ...manager.ProviderInfo) map[string]any {
		t.Helper()
		raw, err := subagentSchema(ps)
		if err == nil {
			raw, err = withModelChoices(raw, ps)
		}
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Properties map[string]map[string]any `json:"properties"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		return m.Properties["model"]
	}
	in := model(spawn, fork)
	enum, _ := in["enum"].([]any)
	if !slices.Equal(enum, []any{"main", "fast"}) {
		t.Errorf("spawn and fork only: enum %v, want [main fast]", in["enum"])
	}
	one := manager.ProviderInfo{Name: "spawn", Models: []string{"default"}}
	if m := model(one); m != nil {
		t.Errorf("one model and nothing else to choose: published %v, want no model parameter", m)
	}
	mixed := model(spawn, fork, codex)
	desc, _ := mixed["description"].(string)
	if mixed["enum"] != nil || !strings.Contains(desc, "spawn, fork: one of main, fast (default main") || !strings.Contains(desc, "codex: its own model id") {
		t.Errorf("with codex: %v", mixed)
	}
}
