package edge

import (
	"context"
	"encoding/json"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// The permission prompt (seam.PromptTool): an external agent started with
// it as its permission check (Claude Code's --permission-prompt-tool)
// calls it before a tool use it may not make unasked. The server only
// relays: the child's driver registered how it answers (the question to
// the person, the answer in the agent's own format) through the
// callback's ServePrompts, and the call is held while it decides.

const promptDescription = "Your runtime's permission check: it asks the person whether a tool use may run. Not for you to call."

// servePrompts is the ServePrompts of the callback minted as tok: it
// registers f while tok is live (a revoked token's registration would
// never be dropped).
func (s *Server) servePrompts(tok string) func(seam.PromptFunc) {
	return func(f seam.PromptFunc) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, live := s.tokens.Child(tok); live {
			s.prompts[tok] = f
		}
	}
}

// childTools leaves the permission prompt out of a child's tools unless
// its driver serves one: a child whose agent never asks through it has
// no use for it.
func (s *Server) childTools(ctx context.Context, tools []mcp.Tool) []mcp.Tool {
	cc, _ := ctx.Value(childKey{}).(childCaller)
	s.mu.Lock()
	_, served := s.prompts[cc.token]
	s.mu.Unlock()
	if served {
		return tools
	}
	out := tools[:0:0]
	for _, t := range tools {
		if t.Name != seam.PromptTool {
			out = append(out, t)
		}
	}
	return out
}

func (s *Server) permissionPrompt(ctx context.Context, c call) *mcp.CallToolResult {
	var in struct {
		ToolName  string          `json:"tool_name"`
		Input     json.RawMessage `json:"input"`
		ToolUseID string          `json:"tool_use_id,omitempty"`
	}
	if bad := s.tool(seam.PromptTool).decode(c, &in); bad != nil {
		return bad
	}
	cc, _ := ctx.Value(childKey{}).(childCaller)
	s.mu.Lock()
	f := s.prompts[cc.token]
	s.mu.Unlock()
	if f == nil {
		return mcp.NewToolResultError("Error: INVALID_REQUEST: nobody is asked for subagent " + c.caller.AgentID + "'s permissions (its provider's permission is not \"ask\")")
	}
	args, err := json.Marshal(c.args)
	if err != nil {
		return mcp.NewToolResultError("Error: INVALID_REQUEST: arguments: " + err.Error())
	}
	return mcp.NewToolResultText(f(ctx, args))
}
