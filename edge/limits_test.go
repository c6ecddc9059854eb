package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// filterProvider honours tool filters over a fixed set of tool names, so
// the manager checks a filter's names against them.
type filterProvider struct{ plainProvider }

func (p *filterProvider) Name() string { return "filtered" }
func (p *filterProvider) Capabilities() seam.Capabilities {
	return seam.Capabilities{ToolFilter: true, Persona: true, OutputSchema: true, DepthLimit: true}
}
func (p *filterProvider) ToolNames() []string { return []string{"read_file", "list_dir", "write_file"} }

// storedServer is a Server over a real manager with an in-memory store
// (every tool published) and the filter-honouring provider.
func storedServer(t testing.TB, lim Limits) (*Server, *filterProvider) {
	t.Helper()
	p := &filterProvider{}
	mgr := manager.New(manager.Options{Store: memstore.New()})
	if err := mgr.Register(p); err != nil {
		t.Fatal(err)
	}
	s, err := New(mgr, Options{Roots: []string{t.TempDir()}, Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	return s, p
}

func rootCall(s *Server, args any) call {
	return call{caller: s.rootCaller(context.Background(), "local"), args: args}
}

// run calls a tool's handler as an MCP root caller would (arguments as a
// decoded map) and as an in-process child would (raw JSON).
func run(t *testing.T, s *Server, tool string, args map[string]any) []*mcp.CallToolResult {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	tt := s.tool(tool)
	ctx := context.Background()
	return []*mcp.CallToolResult{
		tt.handle(ctx, rootCall(s, args)),
		tt.handle(ctx, call{caller: seam.ParentRef{Principal: "local", AgentID: "agent-1", Depth: 1, Cwd: s.roots[0]}, args: json.RawMessage(raw)}),
	}
}

// Sizes were unbounded and errors echoed their input: a 1 MB agent_id came
// back as 1 MB, 100k unknown filter names gave an 889 KB error. Now every
// argument is bounded, and no error quotes more than a few hundred bytes.
func TestOversizeArgumentsAreRefusedWithShortErrors(t *testing.T) {
	s, p := storedServer(t, Limits{})
	big := strings.Repeat("x", 1<<20)
	many := make([]any, 100_000)
	for i := range many {
		many[i] = fmt.Sprintf("no_such_tool_%d", i)
	}
	some := make([]any, 200)
	for i := range some {
		some[i] = fmt.Sprintf("no_such_tool_with_a_long_name_%d_%s", i, strings.Repeat("y", 60))
	}
	cases := []struct {
		name, tool string
		args       map[string]any
		want       []string // in the error
	}{
		{"1 MB subagent_id", "send_message", map[string]any{"subagent_id": big, "message": "m"}, []string{`"subagent_id"`, "limits.agent_id_bytes"}},
		{"1 MB agent_id", "interrupt_agent", map[string]any{"agent_id": big}, []string{`"agent_id"`, "limits.agent_id_bytes"}},
		{"1 MB description", "subagent", map[string]any{"description": big, "prompt": "p"}, []string{`"description"`, "limits.label_bytes"}},
		{"2 MB prompt", "subagent", map[string]any{"description": "d", "prompt": big + big}, []string{`"prompt"`, "limits.prompt_bytes", "1048576"}},
		{"2 MB message", "send_message", map[string]any{"subagent_id": "agent-x", "message": big + big}, []string{`"message"`, "limits.message_bytes"}},
		{"1 MB persona", "subagent", map[string]any{"description": "d", "prompt": "p", "persona": big}, []string{`"persona"`, "limits.persona_bytes"}},
		{"1 MB output schema", "subagent", map[string]any{"description": "d", "prompt": "p", "output_schema": map[string]any{"type": "object", "description": big}}, []string{`"output_schema"`, "limits.output_schema_bytes"}},
		{"1 MB cwd", "subagent", map[string]any{"description": "d", "prompt": "p", "cwd": big}, []string{`"cwd"`, "limits.cwd_bytes"}},
		{"1 MB provider", "subagent", map[string]any{"description": "d", "prompt": "p", "provider": big}, []string{`"provider"`}},
		{"1 MB report", "report", map[string]any{"output": big + big}, []string{`"output"`, "limits.message_bytes"}},
		{"1 MB scope", "list_agents", map[string]any{"scope": big}, []string{`"scope"`}},
		{"1 MB unknown argument", "list_agents", map[string]any{"surprise": big}, []string{`"surprise"`}},
		{"1 MB argument name", "list_agents", map[string]any{big: 1}, []string{"argument name"}},
		{"100k unknown filter names", "subagent", map[string]any{"description": "d", "prompt": "p", "provider": "filtered", "tool_filter": map[string]any{"deny": many}}, []string{"tool_filter"}},
		{"200 long unknown filter names", "subagent", map[string]any{"description": "d", "prompt": "p", "provider": "filtered", "tool_filter": map[string]any{"allow": some}}, []string{"unknown tools"}},
		{"a 1 MB filter name", "subagent", map[string]any{"description": "d", "prompt": "p", "provider": "filtered", "tool_filter": map[string]any{"allow": []any{big}}}, []string{"tool_filter.allow[0]"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for i, res := range run(t, s, tc.tool, tc.args) {
				got := ResultText(res)
				if !res.IsError {
					t.Fatalf("call %d accepted: %.200q", i, got)
				}
				if len(got) > 1200 {
					t.Errorf("call %d: error of %d bytes: %.200q…", i, len(got), got)
				}
				for _, w := range tc.want {
					if !strings.Contains(got, w) {
						t.Errorf("call %d: error %.300q does not name %s", i, got, w)
					}
				}
			}
		})
	}
	if p.started.Load() != 0 {
		t.Errorf("%d children started for refused requests", p.started.Load())
	}
}

// A 100 MB prompt peaked at 1.9 GB RSS: it was marshalled, parsed and
// copied before anything looked at its size. It is refused at the size
// limit, allocating next to nothing.
func TestAHugePromptIsRefusedBeforeItIsCopied(t *testing.T) {
	s, _ := storedServer(t, Limits{})
	args := map[string]any{"description": "d", "prompt": strings.Repeat("x", 100<<20)}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res := s.tool("subagent").handle(context.Background(), rootCall(s, args))
	runtime.ReadMemStats(&after)
	if !res.IsError || !strings.Contains(ResultText(res), "limits.prompt_bytes") {
		t.Fatalf("100 MB prompt: %v %.200q", res.IsError, ResultText(res))
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("refusing a 100 MB prompt allocated %d KiB", alloc>>10)
	}
}

func TestLimitsAreConfigurable(t *testing.T) {
	s, p := storedServer(t, Limits{PromptBytes: 16, ToolFilterNames: 2})
	res := s.tool("subagent").handle(context.Background(), rootCall(s, map[string]any{"description": "d", "prompt": strings.Repeat("p", 17)}))
	if !res.IsError || !strings.Contains(ResultText(res), "at most 16") {
		t.Errorf("17-byte prompt over a 16-byte limit: %v %q", res.IsError, ResultText(res))
	}
	res = s.tool("subagent").handle(context.Background(), rootCall(s, map[string]any{"description": "d", "prompt": strings.Repeat("p", 16), "provider": "filtered",
		"tool_filter": map[string]any{"deny": []any{"read_file", "list_dir", "write_file"}}}))
	if !res.IsError || !strings.Contains(ResultText(res), "limits.tool_filter_names") {
		t.Errorf("3 filter names over a limit of 2: %v %q", res.IsError, ResultText(res))
	}
	res = s.tool("subagent").handle(context.Background(), rootCall(s, map[string]any{"description": "d", "prompt": strings.Repeat("p", 16), "provider": "filtered",
		"tool_filter": map[string]any{"deny": []any{"read_file", "list_dir"}}}))
	if res.IsError {
		t.Errorf("a prompt and a filter at their limits: %q", ResultText(res))
	}
	if p.started.Load() != 1 {
		t.Errorf("%d children started, want 1", p.started.Load())
	}
}

// Labels are shown in lists, logs and terminals: NUL, control characters,
// ANSI escapes and bidi overrides are refused (not stripped: what is shown
// is what was asked for); any other text is fine.
func TestLabelsMustBePlainText(t *testing.T) {
	s, p := storedServer(t, Limits{})
	for name, label := range map[string]string{
		"NUL":          "fix\x00 the bug",
		"ANSI escape":  "\x1b[31mred\x1b[0m",
		"C1 CSI":       "a\u009b31mb",
		"newline":      "line one\nline two",
		"tab":          "a\tb",
		"RLO override": "invoice \u202efdp.exe",
		"isolate":      "a\u2066b\u2069",
		"LRM":          "a\u200eb",
		"line sep":     "a\u2028b",
	} {
		for i, res := range run(t, s, "subagent", map[string]any{"description": label, "prompt": "p"}) {
			if got := ResultText(res); !res.IsError || !strings.Contains(got, `"description"`) || !strings.Contains(got, "plain text") {
				t.Errorf("%s (call %d): %v %q; want refused naming the field", name, i, res.IsError, got)
			}
		}
	}
	if p.started.Load() != 0 {
		t.Errorf("%d children started with bad labels", p.started.Load())
	}
	for _, label := range []string{"fix the parser", "café crème", "修复错误", "ship it 🚀", "family 👨‍👩‍👧"} {
		if res := s.tool("subagent").handle(context.Background(), rootCall(s, map[string]any{"description": label, "prompt": "p"})); res.IsError {
			t.Errorf("label %q refused: %s", label, ResultText(res))
		}
	}
}

// A label stored before labels were checked is shown escaped.
func TestAStoredLabelIsShownEscaped(t *testing.T) {
	for in, want := range map[string]string{
		"plain":              "plain",
		"\x1b[31mred":        `\u001b[31mred`,
		"a\u202eb":           `a\u202eb`,
		"nul\x00":            `nul\u0000`,
		"caf\xe9":            `caf\xe9`,
		"two\nlines, café 🚀": `two\u000alines, café 🚀`,
	} {
		if got := displayLabel(in); got != want {
			t.Errorf("displayLabel(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSeamErrorsAreClipped(t *testing.T) {
	res := errorResult(&seam.Error{Code: seam.CodeInvalidRequest, Message: strings.Repeat("é", 1<<20)})
	got := ResultText(res)
	if len(got) > maxErrorBytes+64 || !strings.Contains(got, "more bytes cut") || !strings.HasPrefix(got, "Error: INVALID_REQUEST") {
		t.Errorf("clipped error: %d bytes, %.100q…", len(got), got)
	}
	if !utf8Valid(got) {
		t.Error("clipping split a character")
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

var _ agent.Tool = (*agentTool)(nil)
