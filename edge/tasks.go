package edge

import (
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// ForegroundResult is the result a foreground subagent call gives for
// the child's finished run res: for a durable MCP task whose waiting call
// a restart cut off, rebuilt from the child's stored outcome.
func ForegroundResult(agentID string, res seam.Result) *mcp.CallToolResult {
	return foregroundResult(agentID, res)
}
