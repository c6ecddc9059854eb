package schemas_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/schemas"
)

// subagentValidator compiles the subagent input schema the way edge/server.go
// does: with the registered providers as an enum.
func subagentValidator(t testing.TB, providers ...string) *schemas.Validator {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(schemas.SubagentInput, &m); err != nil {
		t.Fatal(err)
	}
	if len(providers) > 0 {
		enum := make([]any, len(providers))
		for i, p := range providers {
			enum[i] = p
		}
		m["properties"].(map[string]any)["provider"].(map[string]any)["enum"] = enum
	}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	v, err := schemas.Compile("arguments for subagent", raw)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// subagentArgs mirrors the tool's argument struct.
type subagentArgs struct {
	Description  string          `json:"description"`
	Prompt       string          `json:"prompt"`
	Provider     string          `json:"provider,omitempty"`
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	MaxDepth     *int            `json:"max_depth,omitempty"`
	ToolFilter   *struct {
		Allow []string `json:"allow,omitempty"`
		Deny  []string `json:"deny,omitempty"`
	} `json:"tool_filter,omitempty"`
	Persona string `json:"persona,omitempty"`
	Cwd     string `json:"cwd,omitempty"`
}

const prefix = "invalid arguments for subagent: "

func TestSubagentInputMessagesNameTheField(t *testing.T) {
	v := subagentValidator(t, "spawn", "fork")
	base := `"description":"d","prompt":"p"`
	tests := []struct {
		name  string
		input string
		want  string // the whole message after the prefix
	}{
		{"a missing required field is named", `{"prompt":"p"}`, `missing required field "description"`},
		{"every missing required field is named", `{}`, `missing required fields "description", "prompt"`},
		{"an unknown field is named", `{` + base + `,"promt":"x"}`, `unknown field "promt"; did you mean "prompt"?`},
		{"an unknown field far from every known one", `{` + base + `,"colour":"x"}`, `unknown field "colour"; remove it`},
		{"every unknown field is named", `{` + base + `,"promt":"x","depth":1}`, `unknown fields "depth", "promt"; remove them or rename them (did you mean "prompt" for "promt"?)`},
		{"description of the wrong type", `{"description":7,"prompt":"p"}`, `field "description" must be of type string, not integer`},
		{"an empty description", `{"description":"","prompt":"p"}`, `field "description" must not be empty`},
		{"a description over its length", `{"description":"` + strings.Repeat("é", 121) + `","prompt":"p"}`,
			`field "description" must be at most 120 characters long`},
		{"prompt of the wrong type", `{"description":"d","prompt":["p"]}`, `field "prompt" must be of type string, not array`},
		{"an empty prompt", `{"description":"d","prompt":""}`, `field "prompt" must not be empty`},
		{"provider of the wrong type", `{` + base + `,"provider":1}`, `field "provider" must be of type string, not integer`},
		{"provider not registered", `{` + base + `,"provider":"codex"}`, `field "provider" must be one of the listed values: codex does not equal any of: [spawn fork]`},
		{"output_schema of the wrong type", `{` + base + `,"output_schema":"object"}`, `field "output_schema" must be of type object, not string`},
		{"max_depth of the wrong type", `{` + base + `,"max_depth":"2"}`, `field "max_depth" must be of type integer, not string`},
		{"a fractional max_depth", `{` + base + `,"max_depth":1.5}`, `field "max_depth" must be of type integer, not number`},
		{"a negative max_depth", `{` + base + `,"max_depth":-1}`, `field "max_depth" must be at least 0`},
		{"a max_depth no int holds", `{` + base + `,"max_depth":1e300}`, `field "max_depth" cannot hold number 1e300`},
		{"tool_filter of the wrong type", `{` + base + `,"tool_filter":["read_file"]}`, `field "tool_filter" must be of type object, not array`},
		{"tool_filter.allow of the wrong type", `{` + base + `,"tool_filter":{"allow":"read_file"}}`, `field "tool_filter.allow" must be of type array, not string`},
		{"a tool_filter.allow item of the wrong type", `{` + base + `,"tool_filter":{"allow":[1]}}`, `field "tool_filter.allow[]" must be of type string, not integer`},
		{"an empty tool_filter.deny item", `{` + base + `,"tool_filter":{"deny":[""]}}`, `field "tool_filter.deny[]" must not be empty`},
		{"an unknown tool_filter key", `{` + base + `,"tool_filter":{"block":["x"]}}`, `unknown field "block" in "tool_filter"; remove it`},
		{"tool_filter with both allow and deny", `{` + base + `,"tool_filter":{"allow":["a"],"deny":["b"]}}`, `field "tool_filter" needs exactly one of its properties`},
		{"an empty tool_filter", `{` + base + `,"tool_filter":{}}`, `field "tool_filter" needs exactly one of its properties`},
		{"persona of the wrong type", `{` + base + `,"persona":true}`, `field "persona" must be of type string, not boolean`},
		{"cwd of the wrong type", `{` + base + `,"cwd":null}`, `field "cwd" must be of type string, not null`},
		{"an empty cwd", `{` + base + `,"cwd":""}`, `field "cwd" must not be empty`},
		{"not an object", `["d","p"]`, `must be a JSON object`},
		{"a JSON string", `"hello"`, `must be a JSON object`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var dst subagentArgs
			err := v.Decode([]byte(tt.input), &dst)
			if err == nil {
				t.Fatalf("Decode(%s) accepted it", tt.input)
			}
			if got := strings.TrimPrefix(err.Error(), prefix); got != tt.want {
				t.Errorf("Decode(%s)\n got: %s\nwant: %s", tt.input, got, tt.want)
			}
		})
	}
}

func TestSubagentInputAcceptsValidArguments(t *testing.T) {
	v := subagentValidator(t, "spawn", "fork")
	tests := []struct {
		name  string
		value any
		check func(t *testing.T, got subagentArgs)
	}{
		{"the minimum", []byte(`{"description":"d","prompt":"p"}`), func(t *testing.T, got subagentArgs) {
			if got.Description != "d" || got.Prompt != "p" || got.MaxDepth != nil || got.ToolFilter != nil {
				t.Errorf("decoded %+v", got)
			}
		}},
		{"every field", json.RawMessage(`{"description":"Find TODOs","prompt":"Search for TODO","provider":"fork",
			"output_schema":{"type":"object"},"max_depth":0,"tool_filter":{"deny":["run_shell"]},"persona":"terse","cwd":"sub"}`),
			func(t *testing.T, got subagentArgs) {
				if got.Provider != "fork" || got.MaxDepth == nil || *got.MaxDepth != 0 || got.ToolFilter == nil ||
					len(got.ToolFilter.Deny) != 1 || got.Persona != "terse" || got.Cwd != "sub" ||
					string(got.OutputSchema) != `{"type":"object"}` {
					t.Errorf("decoded %+v", got)
				}
			}},
		{"a Go value", map[string]any{"description": "d", "prompt": "p", "max_depth": 2}, func(t *testing.T, got subagentArgs) {
			if got.MaxDepth == nil || *got.MaxDepth != 2 {
				t.Errorf("decoded %+v", got)
			}
		}},
		{"an integer written as a float", []byte(`{"description":"d","prompt":"p","max_depth":2.0}`), func(t *testing.T, got subagentArgs) {
			if got.MaxDepth == nil || *got.MaxDepth != 2 {
				t.Errorf("decoded %+v", got)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got subagentArgs
			if err := v.Decode(tt.value, &got); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			tt.check(t, got)
		})
	}
}

func TestDecodeInputs(t *testing.T) {
	v := subagentValidator(t)
	t.Run("nil counts as an empty object", func(t *testing.T) {
		err := v.Decode(nil, &subagentArgs{})
		if err == nil || err.Error() != prefix+`missing required fields "description", "prompt"` {
			t.Errorf("Decode(nil) = %v", err)
		}
	})
	t.Run("bytes that are not JSON say so", func(t *testing.T) {
		err := v.Decode([]byte(`{"description":`), &subagentArgs{})
		if err == nil || !strings.HasPrefix(err.Error(), prefix+"not valid JSON") {
			t.Errorf("Decode = %v", err)
		}
	})
	t.Run("a value that cannot be marshalled is refused", func(t *testing.T) {
		if err := v.Decode(map[string]any{"f": func() {}}, &subagentArgs{}); err == nil || !strings.HasPrefix(err.Error(), prefix) {
			t.Errorf("Decode = %v", err)
		}
	})
	t.Run("without the enum any provider name passes the schema", func(t *testing.T) {
		if err := v.Decode([]byte(`{"description":"d","prompt":"p","provider":"anything"}`), &subagentArgs{}); err != nil {
			t.Errorf("Decode = %v", err)
		}
	})
	t.Run("a valid value that does not fit the destination is refused", func(t *testing.T) {
		var dst struct {
			MaxDepth *int8 `json:"max_depth"`
		}
		err := v.Decode([]byte(`{"description":"d","prompt":"p","max_depth":1000}`), &dst)
		if err == nil || err.Error() != prefix+`field "max_depth" cannot hold number 1000` {
			t.Errorf("Decode = %v", err)
		}
	})
}

func TestConfigSchema(t *testing.T) {
	v, err := schemas.Compile("config", schemas.Config)
	if err != nil {
		t.Fatal(err)
	}
	full := `{
		"max_depth": 4,
		"persona": "Answer in English.",
		"roots": ["/srv/repos", "/tmp/scratch"],
		"default_provider": "spawn",
		"shell": true,
		"llm": {"base_url": "http://localhost:11434/v1", "api_key_env": "OLLAMA_KEY", "model": "qwen3",
			"max_retries": 0, "max_tokens": 4096, "max_steps": 30},
		"http": {
			"tokens": [{"principal": "ci", "token_env": "CI_TOKEN"}, {"principal": "alice", "token": "0123456789abcdef"}],
			"allowed_origins": ["https://example.com"]
		}
	}`
	t.Run("a full valid example is accepted", func(t *testing.T) {
		var got map[string]any
		if err := v.Decode([]byte(full), &got); err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if got["llm"].(map[string]any)["model"] != "qwen3" {
			t.Errorf("decoded %v", got)
		}
	})
	t.Run("an empty config is accepted", func(t *testing.T) {
		if err := v.Decode([]byte(`{}`), &map[string]any{}); err != nil {
			t.Fatalf("Decode: %v", err)
		}
	})
	tests := []struct {
		name  string
		input string
		want  string
	}{
		{"max_depth below 1", `{"max_depth":0}`, `field "max_depth" must be at least 1`},
		{"max_depth above 64", `{"max_depth":65}`, `field "max_depth" must be at most 64`},
		{"a huge max_depth", `{"max_depth":1e300}`, `field "max_depth" must be at most 64`},
		{"max_depth as a string", `{"max_depth":"3"}`, `field "max_depth" must be of type integer, not string`},
		{"shell as a number", `{"shell":3}`, `field "shell" must be of type one of boolean, string, object, not integer`},
		{"an empty root", `{"roots":["/a",""]}`, `field "roots[]" must not be empty`},
		{"roots as a string", `{"roots":"/a"}`, `field "roots" must be of type array, not string`},
		{"a misspelt top-level field", `{"max_dept":3}`, `unknown field "max_dept"; did you mean "max_depth"?`},
		{"a misspelt llm field", `{"llm":{"modle":"m"}}`, `unknown field "modle" in "llm"; did you mean "model"?`},
		{"a JSON syntax error", "{\n  \"max_depth\": 3,\n  \"shell\": tru\n}", `not valid JSON at line 3, column 15: invalid character '\n' in literal true (expecting 'e')`},
		{"an unknown llm field", `{"llm":{"api_key":"sk-123"}}`, `unknown field "api_key" in "llm"; remove it`},
		{"llm.max_retries above 10", `{"llm":{"max_retries":11}}`, `field "llm.max_retries" must be at most 10`},
		{"llm.max_retries negative", `{"llm":{"max_retries":-1}}`, `field "llm.max_retries" must be at least 0`},
		{"llm.max_steps zero", `{"llm":{"max_steps":0}}`, `field "llm.max_steps" must be at least 1`},
		{"an empty llm.model", `{"llm":{"model":""}}`, `field "llm.model" must not be empty`},
		{"a token without a principal", `{"http":{"tokens":[{"token_env":"T"}]}}`, `missing required field "principal" in "http.tokens[]"`},
		{"a short token", `{"http":{"tokens":[{"principal":"ci","token":"short"}]}}`, `field "http.tokens[].token" must be at least 16 characters long`},
		{"an unknown token field", `{"http":{"tokens":[{"principal":"ci","secret":"x"}]}}`, `unknown field "secret" in "http.tokens[]"; remove it`},
		{"a token that is not an object", `{"http":{"tokens":["abc"]}}`, `field "http.tokens[]" must be of type object, not string`},
		{"an empty allowed origin", `{"http":{"allowed_origins":[""]}}`, `field "http.allowed_origins[]" must not be empty`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := v.Decode([]byte(tt.input), &map[string]any{})
			if err == nil {
				t.Fatalf("Decode(%s) accepted it", tt.input)
			}
			if got := strings.TrimPrefix(err.Error(), "invalid config: "); got != tt.want {
				t.Errorf("Decode(%s)\n got: %s\nwant: %s", tt.input, got, tt.want)
			}
		})
	}
}

func TestCompileRefusesBrokenSchemas(t *testing.T) {
	for _, raw := range []string{`{"type":`, `{"$ref":"#/$defs/nope"}`} {
		if _, err := schemas.Compile("thing", []byte(raw)); err == nil || !strings.Contains(err.Error(), "schema for thing") {
			t.Errorf("Compile(%s) = %v", raw, err)
		}
	}
}
