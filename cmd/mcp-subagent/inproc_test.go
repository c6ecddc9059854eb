//go:build e2e

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/edge"
)

// The in-process tests of package main's HTTP layer and internals; the
// built-binary tests are in ./e2e.

func TestMain(m *testing.M) {
	// Re-executed as another local user probing serve --http.
	if os.Getenv(envHTTPProbe) != "" {
		os.Exit(httpProbeMain())
	}
	os.Exit(m.Run())
}

// initBody is a raw initialize request.
const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// waitFor polls cond until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cond()
}

// envHTTPProbe re-executes the test binary as httpProbeMain: JSON of a
// probeTarget, the serve --http it attacks.
const envHTTPProbe = "MCP_SUBAGENT_TEST_HTTP_PROBE"

// httpProbeMain is another local user's attempt on serve --http: read the
// token file, then list, read and send to the stdio principal's child over
// MCP, and ask for the web view's URL; with the token when it could read
// it, without otherwise.
func httpProbeMain() int {
	var tg probeTarget
	_ = json.Unmarshal([]byte(os.Getenv(envHTTPProbe)), &tg)
	res := probeResult{Uid: os.Getuid()}
	defer func() { _ = json.NewEncoder(os.Stdout).Encode(res) }()
	headers := map[string]string{}
	if b, err := os.ReadFile(tg.TokenFile); err == nil {
		res.TokenRead = true
		headers["Authorization"] = "Bearer " + strings.TrimSpace(string(b))
	}
	req, _ := http.NewRequest(http.MethodGet, tg.Base+"/view/url", nil)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	if r, err := http.DefaultClient.Do(req); err == nil {
		res.ViewURL = r.StatusCode
		r.Body.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.NewStreamableHttpClient(tg.Base+"/mcp", transport.WithHTTPHeaders(headers))
	if err == nil {
		err = c.Start(ctx)
	}
	if err != nil {
		res.Err = err.Error()
		return 0
	}
	defer c.Close()
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	if _, err := c.Initialize(ctx, init); err != nil {
		res.Err = err.Error()
		return 0
	}
	res.Initialized = true
	call := mcp.CallToolRequest{}
	call.Params.Name, call.Params.Arguments = "list_agents", map[string]any{"all_projects": true}
	if r, err := c.CallTool(ctx, call); err == nil && !r.IsError {
		b, _ := json.Marshal(r.StructuredContent)
		res.Listed = strings.Contains(string(b), tg.Child)
	}
	read := mcp.ReadResourceRequest{}
	read.Params.URI = edge.TranscriptURI(tg.Child)
	if r, err := c.ReadResource(ctx, read); err == nil {
		b, _ := json.Marshal(r.Contents)
		res.Read = strings.Contains(string(b), tg.Secret)
	}
	call.Params.Name, call.Params.Arguments = "send_message", map[string]any{"subagent_id": tg.Child, "message": "from another user"}
	if r, err := c.CallTool(ctx, call); err == nil {
		res.Sent = !r.IsError
	}
	return 0
}

// probeTarget is the serve --http the probe attacks.
type probeTarget struct {
	Base      string `json:"base"`       // http://127.0.0.1:PORT
	TokenFile string `json:"token_file"` // where the minted token lies
	Child     string `json:"child"`      // a child of the stdio principal local
	Secret    string `json:"secret"`     // a text in its transcript
}

// probeResult is what the other user got.
type probeResult struct {
	Uid         int    `json:"uid"`
	TokenRead   bool   `json:"token_read"`
	Initialized bool   `json:"initialized"`
	Listed      bool   `json:"listed"`
	Read        bool   `json:"read"`
	Sent        bool   `json:"sent"`
	ViewURL     int    `json:"view_url"` // GET /view/url's status
	Err         string `json:"err,omitempty"`
}
