package edge

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-subagent/mcp-subagent/edge/tokens"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// permission_prompt from the outside, over HTTP as an attacker would call
// it: another child (by its own callback token) and a root caller (on the
// principals' endpoint, or with its token on the callback endpoint) never
// reach the driver that registered for the asking child.
func TestPermissionPromptOverHTTPIsOnlyTheAskingChilds(t *testing.T) {
	mgr := manager.New(manager.Options{Store: memstore.New()})
	if err := mgr.Register(&plainProvider{}); err != nil {
		t.Fatal(err)
	}
	ts, err := New(mgr, Options{Roots: []string{t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	ms := server.NewMCPServer("test", "1", server.WithToolCapabilities(false))
	ts.Register(ms)
	asking, _ := ts.MintCallback(seam.ParentRef{Principal: "local", AgentID: "agent-a", Depth: 1})
	other, _ := ts.MintCallback(seam.ParentRef{Principal: "local", AgentID: "agent-b", Depth: 1})
	var relayed atomic.Int32
	asking.ServePrompts(func(context.Context, json.RawMessage) string {
		relayed.Add(1)
		return `{"behavior":"allow","updatedInput":{}}`
	})
	const rootTok = "root-secret-token-0123456789abcdef"
	if err := ts.tokens.Add(tokens.HTTP, rootTok, "local"); err != nil {
		t.Fatal(err)
	}
	callback := httptest.NewServer(ts.CallbackGuard(server.NewStreamableHTTPServer(ms)))
	t.Cleanup(callback.Close)
	root := httptest.NewServer(server.NewStreamableHTTPServer(ms, server.WithHTTPContextFunc(func(ctx context.Context, _ *http.Request) context.Context {
		return WithPrincipal(ctx, "local")
	})))
	t.Cleanup(root.Close)
	args := map[string]any{"tool_name": "Write", "input": map[string]any{"file_path": "x"}, "tool_use_id": "toolu_1"}
	call := func(url, tok string) (*mcp.CallToolResult, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := client.NewStreamableHttpClient(url, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + tok}))
		if err != nil {
			return nil, err
		}
		defer c.Close()
		if err := c.Start(ctx); err != nil {
			return nil, err
		}
		init := mcp.InitializeRequest{}
		init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
		if _, err := c.Initialize(ctx, init); err != nil {
			return nil, err
		}
		req := mcp.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = seam.PromptTool, args
		return c.CallTool(ctx, req)
	}
	if res, err := call(callback.URL, other.Token); err != nil || !res.IsError || !strings.Contains(ResultText(res), "nobody is asked") {
		t.Errorf("another child's token: %v, %v; want refused", res, err)
	}
	if res, err := call(root.URL, rootTok); err != nil || !res.IsError || !strings.Contains(ResultText(res), "nobody is asked") {
		t.Errorf("a root caller: %v, %v; want refused", res, err)
	}
	if res, err := call(callback.URL, rootTok); err == nil {
		t.Errorf("a root's token on the callback endpoint: %v; want 401", ResultText(res))
	}
	if n := relayed.Load(); n != 0 {
		t.Fatalf("the asking child's driver was reached %d times by other callers", n)
	}
	if res, err := call(callback.URL, asking.Token); err != nil || res.IsError || relayed.Load() != 1 {
		t.Fatalf("the asking child: %v, %v; want relayed once", res, err)
	}
}
