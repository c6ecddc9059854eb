package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
)

// subagentArgs is the subagent tool's input.
type subagentArgs struct {
	Description  string              `json:"description"`
	Prompt       string              `json:"prompt"`
	Provider     string              `json:"provider,omitempty"`
	OutputSchema json.RawMessage     `json:"output_schema,omitempty"`
	MaxDepth     *int                `json:"max_depth,omitempty"`
	ToolFilter   *manager.ToolFilter `json:"tool_filter,omitempty"`
	Persona      string              `json:"persona,omitempty"`
	Cwd          string              `json:"cwd,omitempty"`
}

// Foreground is the structuredContent of a finished foreground run.
type Foreground struct {
	Kind       string           `json:"kind"` // "foreground"
	AgentID    string           `json:"agent_id"`
	StopReason agent.StopReason `json:"stop_reason"`
	Output     string           `json:"output"`
	Structured json.RawMessage  `json:"structured,omitempty"`
	Diagnostic string           `json:"diagnostic,omitempty"`
	Usage      manager.Usage    `json:"usage"`
}

func (s *Server) handleSubagent(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var progress func(string)
	if req.Params.Meta != nil && req.Params.Meta.ProgressToken != nil {
		progress = s.progressSender(ctx, req.Params.Meta.ProgressToken)
	}
	return s.subagentCall(ctx, s.rootCaller(ctx), req.GetArguments(), progress), nil
}

// progressSender sends MCP progress notifications for token. Sending never
// blocks the run: a note the transport cannot take is dropped.
func (s *Server) progressSender(ctx context.Context, token mcp.ProgressToken) func(string) {
	var mu sync.Mutex
	n := 0
	return func(note string) {
		mu.Lock()
		n++
		step := n
		mu.Unlock()
		if s.mcp == nil {
			return
		}
		err := s.mcp.SendNotificationToClient(ctx, "notifications/progress", map[string]any{
			"progressToken": token,
			"progress":      step,
			"message":       note,
		})
		if err != nil {
			s.log.Debug("progress note dropped", "err", err)
		}
	}
}

// subagentCall runs one foreground delegation for caller.
func (s *Server) subagentCall(ctx context.Context, caller manager.ParentRef, rawArgs any, progress func(string)) *mcp.CallToolResult {
	var in subagentArgs
	if err := s.subagent.Decode(rawArgs, &in); err != nil {
		return mcp.NewToolResultError("Error: " + err.Error())
	}
	cwd, err := s.resolveCwd(caller, in.Cwd)
	if err != nil {
		return mcp.NewToolResultError("Error: INVALID_REQUEST: " + err.Error())
	}
	provider := in.Provider
	if provider == "" {
		provider = s.opts.DefaultProvider
	}
	sr := manager.StartRequest{
		Label: in.Description, Prompt: in.Prompt, Parent: caller, Cwd: cwd,
		OutputSchema: in.OutputSchema, MaxDepth: in.MaxDepth, ToolFilter: in.ToolFilter,
		Persona: in.Persona, Progress: progress,
	}
	run, err := s.mgr.Start(ctx, provider, sr)
	if err != nil {
		return errorResult(err)
	}
	defer run.Dispose()
	if progress != nil {
		progress("started " + run.ID())
	}
	<-run.Done()
	res, err := run.Result()
	if err != nil {
		s.log.Error("subagent run failed", "agent_id", run.ID(), "provider", provider, "err", err)
		return errorResult(err)
	}
	s.log.Info("subagent run ended", "agent_id", run.ID(), "provider", provider,
		"stop_reason", res.StopReason, "input_tokens", res.Usage.InputTokens, "output_tokens", res.Usage.OutputTokens)
	return foregroundResult(run.ID(), res)
}

// errorResult words a seam error for the model: code and sentence.
func errorResult(err error) *mcp.CallToolResult {
	var e *manager.Error
	if errors.As(err, &e) {
		return mcp.NewToolResultError(fmt.Sprintf("Error: %s: %s", e.Code, e.Message))
	}
	return mcp.NewToolResultError("Error: " + err.Error())
}

// foregroundResult maps a finished run: completed is a result with
// structuredContent; anything else is an error result with the diagnostic
// and the partial output.
func foregroundResult(id string, res manager.Result) *mcp.CallToolResult {
	fg := Foreground{Kind: "foreground", AgentID: id, StopReason: res.StopReason, Output: res.Output,
		Structured: res.Structured, Usage: res.Usage}
	if res.StopReason == agent.StopCompleted {
		text := res.Output
		if text == "" {
			text = "(the subagent finished without a closing message)"
		}
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(text)}, StructuredContent: fg}
	}
	fg.Structured = nil
	fg.Diagnostic = res.Diagnostic
	var b strings.Builder
	switch res.StopReason {
	case agent.StopAborted:
		b.WriteString("Error: subagent run was cancelled")
	case agent.StopMaxTokens:
		b.WriteString("Error: subagent hit its token limit before it finished")
	case agent.StopRefusal:
		b.WriteString("Error: subagent declined the task")
	default:
		b.WriteString("Error: subagent run failed")
	}
	fmt.Fprintf(&b, " (agent %s, stop reason %s)", id, res.StopReason)
	if res.Diagnostic != "" {
		b.WriteString("\nDiagnostic: " + res.Diagnostic)
	}
	if res.Output != "" {
		b.WriteString("\nPartial output before the run ended:\n" + res.Output)
	} else {
		b.WriteString("\nThe run left no output.")
	}
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(b.String())}, StructuredContent: fg, IsError: true}
}

// resolveCwd returns the child's cwd: inside the caller's own cwd for an
// agent caller, inside one of the allowed roots for a root caller, after
// resolving symlinks.
func (s *Server) resolveCwd(caller manager.ParentRef, cwd string) (string, error) {
	base := caller.Cwd
	if cwd == "" {
		return base, nil
	}
	p := cwd
	if !filepath.IsAbs(p) {
		p = filepath.Join(base, p)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("field \"cwd\": %q does not exist or cannot be resolved; give an existing directory", cwd)
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("field \"cwd\": %q is not a directory", cwd)
	}
	allowed := []string{caller.Cwd}
	if caller.AgentID == "" {
		allowed = s.roots
	}
	for _, r := range allowed {
		if within(r, real) {
			return real, nil
		}
	}
	if caller.AgentID == "" {
		return "", fmt.Errorf("field \"cwd\": %q lies outside the server's allowed roots; use a directory inside %s or add a root to the config", cwd, strings.Join(s.roots, ", "))
	}
	return "", fmt.Errorf("field \"cwd\": %q lies outside your own working directory; a child's cwd is never wider than its parent's", cwd)
}

func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}
