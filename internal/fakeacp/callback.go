package fakeacp

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// callbackServer is the HTTP MCP server a session was given, if any.
type callbackServer struct {
	url     string
	headers map[string]string
}

func callbackOf(servers []acpsdk.McpServer) *callbackServer {
	for _, s := range servers {
		if h := s.Http; h != nil {
			cb := &callbackServer{url: h.Url, headers: map[string]string{}}
			for _, hd := range h.Headers {
				cb.headers[hd.Name] = hd.Value
			}
			return cb
		}
	}
	return nil
}

// callTool calls a tool on the session's callback server with mcp-go's
// client, as a real agent's MCP client would, and returns the result text.
func (cb *callbackServer) callTool(ctx context.Context, name string, args map[string]any) (string, bool, error) {
	c, err := client.NewStreamableHttpClient(cb.url, transport.WithHTTPHeaders(cb.headers))
	if err != nil {
		return "", false, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		return "", false, err
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "fake-acp", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		return "", false, fmt.Errorf("initialize: %w", err)
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		return "", false, err
	}
	var parts []string
	for _, ct := range res.Content {
		if tc, ok := ct.(mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n"), res.IsError, nil
}

// callbackScenario handles "report: X" and "delegate: P"; ok is false for
// other prompts.
func (f *fakeAgent) callbackScenario(ctx context.Context, sid acpsdk.SessionId, text string) (acpsdk.PromptResponse, bool) {
	var tool string
	var args map[string]any
	switch {
	case strings.HasPrefix(text, "report: "):
		tool, args = "report", map[string]any{"output": strings.TrimPrefix(text, "report: ")}
	case strings.HasPrefix(text, "delegate: "):
		provider := os.Getenv(EnvProvider)
		if provider == "" {
			provider = "acp"
		}
		tool, args = "subagent", map[string]any{"description": "nested delegation", "prompt": strings.TrimPrefix(text, "delegate: "), "provider": provider}
	default:
		return acpsdk.PromptResponse{}, false
	}
	f.mu.Lock()
	cb := f.callbacks[string(sid)]
	f.mu.Unlock()
	if cb == nil {
		f.send(sid, acpsdk.UpdateAgentMessageText("no callback server was given"))
		return acpsdk.PromptResponse{StopReason: acpsdk.StopReasonEndTurn}, true
	}
	out, isErr, err := cb.callTool(ctx, tool, args)
	f.record(Record{Method: "callback/" + tool, Session: string(sid), Text: fmt.Sprintf("isError=%v err=%v: %s", isErr, err, out)})
	switch {
	case err != nil:
		f.send(sid, acpsdk.UpdateAgentMessageText(tool+" failed: "+err.Error()))
	case tool == "report":
		f.send(sid, acpsdk.UpdateAgentMessageText("reported ("+out+")"))
	default:
		f.send(sid, acpsdk.UpdateAgentMessageText("delegated: "+out))
	}
	return acpsdk.PromptResponse{StopReason: acpsdk.StopReasonEndTurn}, true
}
