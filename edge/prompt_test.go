package edge

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// The permission prompt relays a child's call to the PromptFunc its
// driver registered through its callback, and answers with what it
// returns; a child whose driver registered none neither sees the tool nor
// may call it, nor may a root caller see it, and a revoked callback's
// registration is gone.
func TestPermissionPromptRelaysToTheChildsDriver(t *testing.T) {
	mgr := manager.New(manager.Options{Store: memstore.New()})
	if err := mgr.Register(&plainProvider{}); err != nil {
		t.Fatal(err)
	}
	ts, err := New(mgr, Options{Roots: []string{t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	asking, revoke := ts.MintCallback(seam.ParentRef{Principal: "local", AgentID: "agent-a", Depth: 1})
	plain, _ := ts.MintCallback(seam.ParentRef{Principal: "local", AgentID: "agent-b", Depth: 1})
	var got json.RawMessage
	asking.ServePrompts(func(_ context.Context, args json.RawMessage) string {
		got = args
		return `{"behavior":"allow","updatedInput":{}}`
	})
	actx, _ := ts.ChildContext(context.Background(), asking.Token)
	pctx, _ := ts.ChildContext(context.Background(), plain.Token)
	var all []mcp.Tool
	for _, t := range ts.tools {
		all = append(all, mcp.Tool{Name: t.name})
	}
	names := func(tools []mcp.Tool) []string {
		var out []string
		for _, t := range tools {
			out = append(out, t.Name)
		}
		return out
	}
	if n := names(ts.Filter(actx, all)); !slices.Contains(n, seam.PromptTool) {
		t.Errorf("the asking child's tools %v lack %s", n, seam.PromptTool)
	}
	if n := names(ts.Filter(pctx, all)); slices.Contains(n, seam.PromptTool) || !slices.Contains(n, "report") {
		t.Errorf("a child with no prompt served lists %v", n)
	}
	if n := names(ts.Filter(WithPrincipal(context.Background(), "local"), all)); slices.Contains(n, seam.PromptTool) {
		t.Errorf("a root caller lists %v", n)
	}
	args := map[string]any{"tool_name": "Write", "input": map[string]any{"file_path": "x"}, "tool_use_id": "toolu_1"}
	res := ts.permissionPrompt(actx, call{caller: seam.ParentRef{AgentID: "agent-a"}, args: args})
	if res.IsError || ResultText(res) != `{"behavior":"allow","updatedInput":{}}` || !strings.Contains(string(got), `"tool_name":"Write"`) {
		t.Errorf("relayed: %v %q, the driver got %s", res.IsError, ResultText(res), got)
	}
	if res := ts.permissionPrompt(pctx, call{caller: seam.ParentRef{AgentID: "agent-b"}, args: args}); !res.IsError || !strings.Contains(ResultText(res), "nobody is asked") {
		t.Errorf("a child with no prompt served: %v %q", res.IsError, ResultText(res))
	}
	if res := ts.permissionPrompt(actx, call{caller: seam.ParentRef{AgentID: "agent-a"}, args: map[string]any{"input": map[string]any{}}}); !res.IsError || !strings.Contains(ResultText(res), "tool_name") {
		t.Errorf("no tool_name: %v %q", res.IsError, ResultText(res))
	}
	revoke()
	asking.ServePrompts(func(context.Context, json.RawMessage) string { return "" })
	ts.mu.Lock()
	n := len(ts.prompts)
	ts.mu.Unlock()
	if n != 0 {
		t.Errorf("%d prompts registered after the revocation", n)
	}
}
