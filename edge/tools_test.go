package edge

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// plainProvider supports no start capability and answers every prompt
// with a fixed text. Calls may run concurrently (the fuzz target's do).
type plainProvider struct{ started atomic.Int32 }

func (p *plainProvider) Name() string                    { return "plain" }
func (p *plainProvider) Capabilities() seam.Capabilities { return seam.Capabilities{} }
func (p *plainProvider) InheritsParentContext() bool     { return false }
func (p *plainProvider) Prepare(context.Context, seam.StartRequest) (seam.CreationInputs, error) {
	p.started.Add(1)
	return seam.CreationInputs{}, nil
}
func (p *plainProvider) NewDriver(_ context.Context, req seam.DriverRequest) (seam.Driver, error) {
	return plainDriver{req.Journal}, nil
}

// plainDriver answers every turn at once.
type plainDriver struct{ j *agent.Journal }

func (plainDriver) RunTurn(context.Context, []agent.Input) agent.TurnResult {
	return agent.TurnResult{Output: "plain says hi", StopReason: agent.StopCompleted}
}
func (d plainDriver) Journal() *agent.Journal { return d.j }
func (plainDriver) Close() error              { return nil }

// serveHTTP serves the tools of a manager with p registered over real
// streamable HTTP, as principal "local", and returns a connected mcp-go
// client.
func serveHTTP(t *testing.T, p seam.Provider) *client.Client {
	t.Helper()
	return serveHTTPAs(t, p, func(ctx context.Context, _ *http.Request) context.Context { return WithPrincipal(ctx, "local") })
}

// serveHTTPAs is serveHTTP with the transport's context func; nil: one
// that establishes no caller.
func serveHTTPAs(t *testing.T, p seam.Provider, principal server.HTTPContextFunc) *client.Client {
	t.Helper()
	mgr := manager.New(manager.Options{})
	if err := mgr.Register(p); err != nil {
		t.Fatal(err)
	}
	ts, err := New(mgr, Options{Roots: []string{t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	ms := server.NewMCPServer("test", "1", server.WithToolCapabilities(false))
	ts.Register(ms)
	var opts []server.StreamableHTTPOption
	if principal != nil {
		opts = append(opts, server.WithHTTPContextFunc(principal))
	}
	hs := httptest.NewServer(server.NewStreamableHTTPServer(ms, opts...))
	t.Cleanup(hs.Close)
	c, err := client.NewStreamableHttpClient(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	return c
}

func callSubagent(t *testing.T, c *client.Client, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = "subagent"
	req.Params.Arguments = args
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestUnsupportedCapabilityOverHTTP(t *testing.T) {
	p := &plainProvider{}
	c := serveHTTP(t, p)
	cases := []struct {
		field string
		value any
	}{
		{"output_schema", map[string]any{"type": "object"}},
		{"max_depth", 2},
		{"tool_filter", map[string]any{"deny": []string{"x"}}},
		{"persona", "a pirate"},
	}
	for _, tc := range cases {
		t.Run(tc.field, func(t *testing.T) {
			res := callSubagent(t, c, map[string]any{"description": "d", "prompt": "p", tc.field: tc.value})
			got := ResultText(res)
			if !res.IsError || !strings.Contains(got, "UNSUPPORTED_CAPABILITY") || !strings.Contains(got, tc.field) || !strings.Contains(got, `"plain"`) {
				t.Errorf("result = %v %q, want UNSUPPORTED_CAPABILITY naming %s and the provider", res.IsError, got, tc.field)
			}
		})
	}
	if p.started.Load() != 0 {
		t.Errorf("the provider was started %d times for refused requests", p.started.Load())
	}
	res := callSubagent(t, c, map[string]any{"description": "d", "prompt": "p"})
	if res.IsError || ResultText(res) != "plain says hi" {
		t.Errorf("plain request = %v %q", res.IsError, ResultText(res))
	}
}

func TestToolListing(t *testing.T) {
	c := serveHTTP(t, &plainProvider{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lt, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(lt.Tools) != 1 || lt.Tools[0].Name != "subagent" {
		t.Fatalf("tools = %+v; only working tools may be published", lt.Tools)
	}
	tool := lt.Tools[0]
	// Hints are sent only where they differ from the spec's defaults:
	// subagent is not read-only (the default) and not destructive (not the
	// default, so it must be said).
	if a := tool.Annotations; (a.ReadOnlyHint != nil && *a.ReadOnlyHint) || a.DestructiveHint == nil || *a.DestructiveHint {
		t.Errorf("annotations = %+v", a)
	}
	if !strings.Contains(tool.Description, "plain") || !strings.Contains(tool.Description, "supports none") {
		t.Errorf("description does not list the provider and its capabilities: %s", tool.Description)
	}
	raw, _ := json.Marshal(tool.InputSchema)
	if tool.RawInputSchema != nil {
		raw = tool.RawInputSchema
	}
	if !strings.Contains(string(raw), `"enum":["plain"]`) {
		t.Errorf("input schema does not enumerate providers: %s", raw)
	}
}

func TestResolveCwd(t *testing.T) {
	root := t.TempDir()
	s := &Server{roots: []string{root}}
	child := seam.ParentRef{AgentID: "agent-1", Cwd: root + "/sub"}
	cases := []struct {
		name    string
		caller  seam.ParentRef
		cwd     string
		wantErr string
	}{
		{"root default", seam.ParentRef{Cwd: root}, "", ""},
		{"root outside", seam.ParentRef{Cwd: root}, "/", "outside the allowed roots"},
		{"root dotdot", seam.ParentRef{Cwd: root}, "..", "outside the allowed roots"},
		{"child wider than parent", child, root, "never wider than its parent's"},
	}
	if err := mkdir(root + "/sub"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.resolveCwd(context.Background(), tc.caller, tc.cwd)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func mkdir(p string) error { return os.MkdirAll(p, 0o755) }
