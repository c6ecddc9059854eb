package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// subagentArgs is the subagent tool's input.
type subagentArgs struct {
	Description     string           `json:"description"`
	Prompt          string           `json:"prompt"`
	Provider        string           `json:"provider,omitempty"`
	RunInBackground bool             `json:"run_in_background,omitempty"`
	WaitSeconds     float64          `json:"wait_seconds,omitempty"`
	OutputSchema    json.RawMessage  `json:"output_schema,omitempty"`
	MaxDepth        *int             `json:"max_depth,omitempty"`
	ToolFilter      *seam.ToolFilter `json:"tool_filter,omitempty"`
	Persona         string           `json:"persona,omitempty"`
	Cwd             string           `json:"cwd,omitempty"`
	Budget          *seam.Budget     `json:"budget,omitempty"`
	// Model and Effort: a configured model name (spawn, fork) or the CLI's
	// model id, and the reasoning effort; see withModelChoices.
	Model  string     `json:"model,omitempty"`
	Effort llm.Effort `json:"effort,omitempty"`
	// Isolation "worktree": the child works in its own git worktree.
	Isolation string `json:"isolation,omitempty"`
}

// Foreground is the structuredContent of a finished foreground run.
type Foreground struct {
	Kind       string           `json:"kind"` // "foreground"
	AgentID    string           `json:"agent_id"`
	StopReason agent.StopReason `json:"stop_reason"`
	Output     string           `json:"output"`
	Structured json.RawMessage  `json:"structured,omitempty"`
	Diagnostic string           `json:"diagnostic,omitempty"`
	Usage      seam.Usage       `json:"usage"`
	// Worktree and Changes: the child's own git worktree and what its
	// branch holds beyond its base, committed (isolation "worktree").
	Worktree *seam.Worktree `json:"worktree,omitempty"`
	Changes  *seam.Changes  `json:"changes,omitempty"`
	// TreeUsage adds what the child's own descendants used; present only
	// when it delegated.
	TreeUsage *seam.Usage `json:"tree_usage,omitempty"`
}

// Handle is the structuredContent of a child handed back before its answer.
type Handle struct {
	Kind      string `json:"kind"` // "continuable"
	AgentID   string `json:"agent_id"`
	MessageID string `json:"message_id,omitempty"`
	Status    string `json:"status,omitempty"` // "running" when a wait ran out
}

func (s *Server) tool(name string) *tool {
	for _, t := range s.tools {
		if t.name == name {
			return t
		}
	}
	return nil
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

// subagent starts a child: in the foreground it waits for the answer (or
// for wait_seconds, then hands back a handle); in the background it hands
// back the handle at once.
func (s *Server) subagent(ctx context.Context, c call) *mcp.CallToolResult {
	var in subagentArgs
	if bad := s.tool("subagent").decode(c, &in); bad != nil {
		return bad
	}
	if err := checkLabel("description", in.Description); err != nil {
		return mcp.NewToolResultError("Error: INVALID_REQUEST: " + err.Error())
	}
	cwd, err := s.resolveCwd(ctx, c.caller, in.Cwd)
	if err != nil {
		return mcp.NewToolResultError("Error: INVALID_REQUEST: " + err.Error())
	}
	provider := in.Provider
	if provider == "" {
		provider = s.opts.DefaultProvider
	}
	sr := seam.StartRequest{
		Label: in.Description, Prompt: in.Prompt, Parent: c.caller, Cwd: cwd,
		OutputSchema: in.OutputSchema, MaxDepth: in.MaxDepth, ToolFilter: in.ToolFilter,
		Persona: in.Persona, Progress: c.progress, Budget: in.Budget,
		Model: in.Model, Effort: seam.Effort(in.Effort), Isolation: in.Isolation,
	}
	continuable := s.catalog.Persistent() && s.providerInfo(provider).Continuable
	if in.RunInBackground && !continuable {
		if !s.catalog.Persistent() {
			return mcp.NewToolResultError("Error: PERSISTENCE_UNAVAILABLE: background children need the session store, which this server runs without; run in the foreground")
		}
		if s.providerInfo(provider).Name != "" {
			return mcp.NewToolResultError(fmt.Sprintf("Error: INVALID_REQUEST: field \"run_in_background\": provider %q runs only foreground children", provider))
		}
	}
	if !continuable {
		return s.oneShot(ctx, provider, sr)
	}
	if in.RunInBackground {
		sr.Progress = nil
	}
	st, err := s.startContinuable(ctx, c.task, provider, sr, !in.RunInBackground)
	if err != nil {
		return errorResult(err)
	}
	if in.RunInBackground {
		s.log.Info("subagent started in the background", "agent_id", st.ChildID, "provider", provider)
		return handleResult(Handle{Kind: "continuable", AgentID: st.ChildID, MessageID: st.MessageID},
			fmt.Sprintf("started subagent %s in the background. You will get a notice with its outcome when it settles (with a later tool result; list_agents with wait_seconds waits for it); use send_message to give it more work.", st.ChildID))
	}
	wait := in.WaitSeconds
	if wait == 0 {
		wait = s.opts.DefaultWaitSeconds
	}
	wait = s.boundWait(ctx, wait)
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if wait > 0 {
		wctx, cancel = context.WithTimeout(ctx, time.Duration(wait*float64(time.Second)))
	}
	defer cancel()
	res, ok, asking := s.waitTurn(ctx, wctx, c, "subagent", manager.Sent{ChildID: st.ChildID, MessageID: st.MessageID, Turn: st.Turn})
	if asking != nil {
		return asking
	}
	if !ok {
		if ctx.Err() != nil {
			// The client cancelled: stop the child's turn, answer aborted.
			_ = s.interrupter.Interrupt(c.caller, st.ChildID)
			s.log.Info("subagent run ended", "agent_id", st.ChildID, "provider", provider, "stop_reason", agent.StopAborted, "why", "the client cancelled the call")
			return foregroundResult(st.ChildID, seam.Result{StopReason: agent.StopAborted, Diagnostic: "the client cancelled the call"})
		}
		if err := st.Committed(); err != nil {
			return errorResult(err)
		}
		return handleResult(Handle{Kind: "continuable", AgentID: st.ChildID, MessageID: st.MessageID, Status: "running"},
			fmt.Sprintf("subagent %s is still running after %gs; it goes on in the background. You will get a notice when it settles: call list_agents with wait_seconds to wait for it.", st.ChildID, wait))
	}
	if err := st.Committed(); err != nil {
		return errorResult(err)
	}
	s.log.Info("subagent run ended", "agent_id", st.ChildID, "provider", provider,
		"stop_reason", res.StopReason, "input_tokens", res.Usage.InputTokens, "output_tokens", res.Usage.OutputTokens)
	r := foregroundResult(st.ChildID, res)
	if below, err := s.delegate.TreeUsage(st.ChildID); err == nil && below != (seam.Usage{}) {
		fg := r.StructuredContent.(Foreground)
		t := seam.Usage{InputTokens: res.Usage.InputTokens + below.InputTokens, OutputTokens: res.Usage.OutputTokens + below.OutputTokens,
			CostUSD: res.Usage.CostUSD + below.CostUSD}
		fg.TreeUsage = &t
		r.StructuredContent = fg
	}
	return r
}

// withModelChoices shows the model names a call may choose in the
// published subagent schema: as an enum when every provider takes a
// configured name (spawn and fork share the deployment's models), else in
// the description beside the providers that take their CLI's own ids.
// The validating schema has no enum: an unknown name is refused by the
// provider, as INVALID_REQUEST naming the field and listing the choices.
func withModelChoices(raw json.RawMessage, providers []manager.ProviderInfo) (json.RawMessage, error) {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	model, _ := m["properties"].(map[string]any)["model"].(map[string]any)
	if model == nil {
		return nil, errors.New("the schema has no model property")
	}
	var named, ids, users []string
	for _, p := range providers {
		if p.Models == nil {
			ids = append(ids, p.Name)
			continue
		}
		users = append(users, p.Name)
		for _, n := range p.Models {
			if !slices.Contains(named, n) {
				named = append(named, n)
			}
		}
	}
	switch {
	case len(named) == 0:
		model["description"] = "The provider's model id."
	case len(ids) == 0 && len(named) == 1:
		// Nothing to choose: not published (every model request pays for
		// the surface), still accepted.
		delete(m["properties"].(map[string]any), "model")
	case len(ids) == 0:
		model["enum"] = named
	default:
		model["description"] = fmt.Sprintf("%s: one of %s (default %s; fork: the parent's); %s: its own model id.",
			strings.Join(users, ", "), strings.Join(named, ", "), named[0], strings.Join(ids, ", "))
	}
	return json.Marshal(m)
}

func (s *Server) providerInfo(name string) manager.ProviderInfo {
	for _, p := range s.catalog.Providers() {
		if p.Name == name {
			return p
		}
	}
	return manager.ProviderInfo{}
}

// oneShot runs a child on a provider without continuable support: one
// turn, then disposed.
func (s *Server) oneShot(ctx context.Context, provider string, sr seam.StartRequest) *mcp.CallToolResult {
	run, err := s.delegate.Start(ctx, provider, sr)
	if err != nil {
		return errorResult(err)
	}
	defer run.Dispose()
	if sr.Progress != nil {
		sr.Progress("started " + run.ID())
	}
	<-run.Done()
	res := run.Result()
	s.log.Info("subagent run ended", "agent_id", run.ID(), "provider", provider,
		"stop_reason", res.StopReason, "input_tokens", res.Usage.InputTokens, "output_tokens", res.Usage.OutputTokens)
	return foregroundResult(run.ID(), res)
}

func handleResult(h Handle, text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(text)}, StructuredContent: h}
}

// errorResult words a seam error for the model: code and sentence.
func errorResult(err error) *mcp.CallToolResult {
	var e *seam.Error
	if errors.As(err, &e) {
		return mcp.NewToolResultError(clip(fmt.Sprintf("Error: %s: %s", e.Code, e.Message)))
	}
	return mcp.NewToolResultError(clip("Error: " + err.Error()))
}

// foregroundResult maps a finished run: completed is a result with
// structuredContent; anything else is an error result with the diagnostic
// and the partial output.
func foregroundResult(id string, res seam.Result) *mcp.CallToolResult {
	fg := Foreground{Kind: "foreground", AgentID: id, StopReason: res.StopReason, Output: res.Output,
		Structured: res.Structured, Usage: res.Usage, Worktree: res.Worktree, Changes: res.Changes}
	if res.StopReason == agent.StopCompleted {
		fg.Diagnostic = res.Diagnostic // what was refused along the way (a permission denied or declined)
		text := res.Output
		if text == "" {
			text = "(the subagent finished without a closing message)"
		}
		text += worktreeLine(res)
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
	case agent.StopBudget:
		b.WriteString("Error: subagent ran out of its budget before it finished")
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
	b.WriteString(worktreeLine(res))
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(b.String())}, StructuredContent: fg, IsError: true}
}

// worktreeLine is the text result's word on the child's worktree: the
// structured result has it all.
func worktreeLine(res seam.Result) string {
	w, c := res.Worktree, res.Changes
	switch {
	case w == nil:
		return ""
	case c == nil:
		return fmt.Sprintf("\n\nWorktree %s, branch %s.", w.Path, w.Branch)
	case c.Empty():
		return fmt.Sprintf("\n\nNo changes in worktree %s (branch %s).", w.Path, w.Branch)
	}
	return fmt.Sprintf("\n\nChanges committed on branch %s (worktree %s, base %s): %s.", w.Branch, w.Path, w.Base, c.Diffstat)
}

// resolveCwd returns the child's cwd: inside the caller's own cwd for an
// agent caller; for a root caller, inside one of the allowed roots (the
// server's, the config's, and the client's MCP roots where it offers
// them); after resolving symlinks.
func (s *Server) resolveCwd(ctx context.Context, caller seam.ParentRef, cwd string) (string, error) {
	base := caller.Cwd
	if cwd == "" {
		if base == "" {
			return "", fmt.Errorf("field \"cwd\": this session told no working directory; give an absolute directory")
		}
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
	if caller.AgentID != "" {
		if within(caller.Cwd, real) {
			return real, nil
		}
		return "", fmt.Errorf("field \"cwd\": %q lies outside your own working directory; a child's cwd is never wider than its parent's", cwd)
	}
	// A root session's own working directory is one of its roots.
	for _, r := range append([]string{caller.Cwd}, s.roots...) {
		if r != "" && within(r, real) {
			return real, nil
		}
	}
	// Only then ask the client (a round trip) for the roots it offers.
	for _, r := range s.clientRoots(ctx) {
		if within(r, real) {
			return real, nil
		}
	}
	allowed := strings.Join(append([]string{caller.Cwd}, s.roots...), ", ")
	return "", fmt.Errorf("field \"cwd\": %q lies outside the allowed roots; use a directory inside %s or add a root to the config (or offer it as an MCP root)", cwd, allowed)
}

// clientRoots returns the file roots a root caller's MCP client offers, if
// it declared the roots capability; nil otherwise (or on any failure).
func (s *Server) clientRoots(ctx context.Context) []string {
	if s.mcp == nil {
		return nil
	}
	cs, ok := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo)
	if !ok || cs.GetClientCapabilities().Roots == nil {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := s.mcp.RequestRoots(rctx, mcp.ListRootsRequest{})
	if err != nil {
		s.log.Debug("asking the client for its roots failed", "err", err)
		return nil
	}
	var out []string
	for _, r := range res.Roots {
		u, err := url.Parse(r.URI)
		if err != nil || u.Scheme != "file" {
			continue
		}
		if real, err := filepath.EvalSymlinks(u.Path); err == nil {
			out = append(out, real)
		}
	}
	return out
}

func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}
