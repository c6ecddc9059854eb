package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/schemas"
)

// Manager is what the tools need of the manager.
type Manager interface {
	Providers() []manager.ProviderInfo
	MaxDepth() int
	Start(ctx context.Context, provider string, req manager.StartRequest) (manager.Run, error)
}

// Options configures a Server. Zero values mean the defaults given.
type Options struct {
	// Roots are the directories a root caller's cwd may lie in; the first is
	// the default cwd. Zero: the process's working directory.
	Roots []string
	// DefaultProvider is used when a call names none; zero: the first
	// registered provider.
	DefaultProvider string
	Logger          *slog.Logger
}

// Server holds the tool handlers. Build it after the providers are
// registered: the subagent tool's schema lists them.
type Server struct {
	mgr      Manager
	opts     Options
	log      *slog.Logger
	roots    []string // absolute, symlinks resolved
	subagent *schemas.Validator
	schema   json.RawMessage // subagent input schema with the provider enum
	mcp      *server.MCPServer
}

// New builds the tool handlers over mgr.
func New(mgr Manager, opts Options) (*Server, error) {
	s := &Server{mgr: mgr, opts: opts, log: opts.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	roots := opts.Roots
	if len(roots) == 0 {
		wd, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		roots = []string{wd}
	}
	for _, r := range roots {
		abs, err := filepath.Abs(r)
		if err != nil {
			return nil, fmt.Errorf("root %q: %w", r, err)
		}
		real, err := filepath.EvalSymlinks(abs)
		if err != nil {
			return nil, fmt.Errorf("root %q: %w", r, err)
		}
		s.roots = append(s.roots, real)
	}
	providers := mgr.Providers()
	if len(providers) == 0 {
		return nil, fmt.Errorf("no providers are registered")
	}
	if s.opts.DefaultProvider == "" {
		s.opts.DefaultProvider = providers[0].Name
	}
	found := false
	for _, p := range providers {
		found = found || p.Name == s.opts.DefaultProvider
	}
	if !found {
		return nil, fmt.Errorf("default provider %q is not registered", s.opts.DefaultProvider)
	}
	schema, err := subagentSchema(providers)
	if err != nil {
		return nil, err
	}
	s.schema = schema
	if s.subagent, err = schemas.Compile("arguments for subagent", schema); err != nil {
		return nil, err
	}
	return s, nil
}

// subagentSchema is the embedded input schema with the providers as an enum.
func subagentSchema(providers []manager.ProviderInfo) (json.RawMessage, error) {
	var m map[string]any
	if err := json.Unmarshal(schemas.SubagentInput, &m); err != nil {
		return nil, err
	}
	names := make([]any, len(providers))
	for i, p := range providers {
		names[i] = p.Name
	}
	m["properties"].(map[string]any)["provider"].(map[string]any)["enum"] = names
	delete(m, "$schema")
	return json.Marshal(m)
}

// Register adds the tools to an MCP server.
func (s *Server) Register(ms *server.MCPServer) {
	s.mcp = ms
	tool := mcp.NewToolWithRawSchema("subagent", s.subagentDescription(), s.schema)
	tool.Annotations = mcp.ToolAnnotation{
		Title:           "Delegate to a subagent",
		ReadOnlyHint:    mcp.ToBoolPtr(false),
		DestructiveHint: mcp.ToBoolPtr(false),
		IdempotentHint:  mcp.ToBoolPtr(false),
		OpenWorldHint:   mcp.ToBoolPtr(true),
	}
	ms.AddTool(tool, s.handleSubagent)
}

func (s *Server) subagentDescription() string {
	var b strings.Builder
	b.WriteString("Delegate a task to a child agent and wait for its final answer. The child works on its own with its own tools in a working directory inside yours, and does not see your conversation unless its provider says so; put everything it needs in `prompt`. ")
	b.WriteString("The call returns the child's last message (and `structured` when you gave an `output_schema` and the child met it). A child that did not complete (cancelled, out of tokens, declined, failed) is an error result with a diagnostic and its partial output, never a half answer. ")
	b.WriteString("Children may delegate further, up to the depth cap (" + fmt.Sprint(s.mgr.MaxDepth()) + " by default). Several calls may run at once.\n\nProviders:")
	for _, p := range s.mgr.Providers() {
		fmt.Fprintf(&b, "\n- %s", p.Name)
		if p.Name == s.opts.DefaultProvider {
			b.WriteString(" (default)")
		}
		if p.Description != "" {
			b.WriteString(": " + p.Description)
		}
		var caps []string
		c := p.Capabilities
		for _, f := range []struct {
			on   bool
			name string
		}{{c.OutputSchema, "output_schema"}, {c.DepthLimit, "max_depth"}, {c.ToolFilter, "tool_filter"}, {c.Persona, "persona"}} {
			if f.on {
				caps = append(caps, f.name)
			}
		}
		if len(caps) > 0 {
			b.WriteString(" [supports " + strings.Join(caps, ", ") + "]")
		} else {
			b.WriteString(" [supports none of output_schema, max_depth, tool_filter, persona]")
		}
		if p.InheritsParentContext {
			b.WriteString(" The child sees your completed turns; only agents with a conversation (not an MCP client) can use it.")
		}
	}
	return b.String()
}

// AgentTools returns the delegation tools for an in-process child that
// calls them as self. They run the same handlers as MCP calls.
func (s *Server) AgentTools(self manager.ParentRef) []agent.Tool {
	return []agent.Tool{&agentTool{s: s, self: self}}
}

type agentTool struct {
	s    *Server
	self manager.ParentRef
}

func (t *agentTool) Def() llm.ToolDef {
	return llm.ToolDef{Name: "subagent", Description: t.s.subagentDescription(), Parameters: t.s.schema}
}

func (t *agentTool) Call(ctx context.Context, args json.RawMessage) (string, error) {
	var v any
	if err := json.Unmarshal(args, &v); err != nil {
		return "", fmt.Errorf("invalid arguments for subagent: %v", err)
	}
	res := t.s.subagentCall(ctx, t.self, v, nil)
	return resultText(res), nil
}

// resultText flattens a tool result's text content.
func resultText(r *mcp.CallToolResult) string {
	var parts []string
	for _, c := range r.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}
