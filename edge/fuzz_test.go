package edge

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// FuzzToolInputs feeds arbitrary JSON arguments to each tool's handler, as
// an MCP root client sends them (decoded, through the MCP handler and its
// caller resolution) and as an in-process child does (raw JSON), on a real
// Server over a manager with an in-memory store. No input may panic, and
// no error result may be longer than the bound on error texts, whatever
// the input quotes.
func FuzzToolInputs(f *testing.F) {
	seeds := []struct {
		tool byte
		args string
	}{
		{0, `{"description":"fix the bug","prompt":"please"}`},
		{0, `{"description":"d","prompt":"p","provider":"filtered","tool_filter":{"deny":["read_file"]},"persona":"terse","max_depth":2,"cwd":"."}`},
		{0, `{"description":"d","prompt":"p","output_schema":{"type":"object","properties":{"a":{"type":"string"}}}}`},
		{0, `{"description":"\u001b[31mred","prompt":"p"}`},
		{0, `{"description":"d","prompt":"p","tool_filter":{"allow":["x","y"],"deny":[]}}`},
		{1, `{"subagent_id":"agent-1","message":"more","wait_seconds":1}`},
		{2, `{"agent_id":"agent-1"}`},
		{3, `{"scope":"descendants","wait_seconds":0.01,"all_projects":true}`},
		{4, `{"output":"halfway","delivery":"quiet"}`},
		{0, `[]`},
		{1, `null`},
		{2, `{"agent_id":12}`},
		{3, `{"scope":"` + string(make([]byte, 2000)) + `"}`},
	}
	for _, s := range seeds {
		f.Add(s.tool, []byte(s.args))
	}
	s, _ := storedServer(f, Limits{PromptBytes: 4096, MessageBytes: 4096})
	names := []string{"subagent", "send_message", "interrupt_agent", "list_agents", "report"}
	tools := map[string]*tool{}
	for _, n := range names {
		if tools[n] = s.tool(n); tools[n] == nil {
			f.Fatalf("tool %s is not published", n)
		}
	}
	child := seam.ParentRef{Principal: "local", AgentID: "agent-fuzz", Depth: 1, Cwd: s.roots[0]}
	f.Fuzz(func(t *testing.T, which byte, raw []byte) {
		t.Parallel()
		name := names[int(which)%len(names)]
		tt := tools[name]
		ctx, cancel := context.WithTimeout(WithPrincipal(context.Background(), "local"), 200*time.Millisecond)
		defer cancel()
		check := func(how string, res *mcp.CallToolResult) {
			if res == nil {
				t.Fatalf("%s %s: nil result", name, how)
			}
			if txt := ResultText(res); res.IsError && len(txt) > maxErrorBytes+64 {
				t.Fatalf("%s %s: error of %d bytes: %.200q…", name, how, len(txt), txt)
			}
		}
		var args any
		if json.Unmarshal(raw, &args) == nil {
			req := mcp.CallToolRequest{}
			req.Params.Name = name
			req.Params.Arguments = args
			res, err := s.mcpHandler(tt)(ctx, req)
			if err != nil {
				t.Fatalf("%s over MCP: Go error %v; failures must be tool results", name, err)
			}
			check("over MCP", res)
		}
		check("from a child", tt.handle(ctx, call{caller: child, args: json.RawMessage(raw)}))
	})
}
