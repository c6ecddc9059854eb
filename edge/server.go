package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/edge/tokens"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/schemas"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// The tools use the manager through one small interface per use, so a
// handler's test fakes only what that handler calls. *manager.Manager
// implements all of them; Manager is their union, what New takes.
type (
	// Catalog is what the tool descriptions and the subagent tool read of
	// the deployment.
	Catalog interface {
		Providers() []manager.ProviderInfo
		MaxDepth() int
		Persistent() bool
	}
	// Delegator starts children (subagent).
	Delegator interface {
		Start(ctx context.Context, provider string, req seam.StartRequest) (seam.Run, error)
		StartContinuable(ctx context.Context, provider string, req seam.StartRequest, wait bool) (*manager.Started, error)
		TreeUsage(agentID string) (seam.Usage, error)
	}
	// Messenger sends a child its next message (send_message).
	Messenger interface {
		FollowupBudget(ctx context.Context, caller seam.ParentRef, childID, content string, wait bool, budget *seam.Budget) (*manager.Sent, error)
		// Answer answers a child's question (send_message's answer_to, or
		// the one question a child waits on); nil, nil: none waits.
		Answer(ctx context.Context, caller seam.ParentRef, childID, questionID, text string) (*seam.Question, error)
	}
	// Interrupter stops a child's turn (interrupt_agent, and subagent when
	// its client cancels a foreground call).
	Interrupter interface {
		Interrupt(caller seam.ParentRef, childID string) error
	}
	// Lister lists a caller's children and waits for news of them
	// (list_agents).
	Lister interface {
		List(caller seam.ParentRef, q manager.ListQuery) (manager.ListPage, error)
		WaitSignal(ctx context.Context, addr string)
	}
	// Reporter delivers a child's report to its parent (report).
	Reporter interface {
		ReportFrom(caller seam.ParentRef, content string, delivery manager.Delivery) (string, error)
	}
	// Notices hands root callers what is pending for them, and hears of
	// their sessions' calls and departures (shared with other instances
	// through the store).
	Notices interface {
		TakeNotices(principal, session string) []seam.Notice
		WaitNotices(ctx context.Context, principal, session string) []seam.Notice
		SessionOpened(principal, session string)
		SessionGone(session string)
	}
)

// Manager is every use at once: what the server is built over.
type Manager interface {
	Catalog
	Delegator
	Messenger
	Interrupter
	Lister
	Reporter
	Notices
}

var _ Manager = (*manager.Manager)(nil)

// Options configures a Server. Zero values mean the defaults given.
type Options struct {
	// Roots are directories a root caller's cwd may lie in, beside its
	// session's working directory and MCP roots, and beside the process's
	// working directory unless NoWorkingDirRoot (a daemon, whose working
	// directory is nobody's project). The first allowed root (the working
	// directory, else Roots[0]) is the default cwd of a session that tells
	// none.
	Roots            []string
	NoWorkingDirRoot bool
	// DefaultProvider is used when a call names none; zero: the first
	// registered provider.
	DefaultProvider string
	// DefaultWaitSeconds bounds a foreground wait when the call gives no
	// wait_seconds; zero: no bound.
	DefaultWaitSeconds float64
	// ClientWaitSeconds bounds every wait (a foreground subagent call,
	// send_message and list_agents with wait_seconds) for clients by their
	// clientInfo.name: a client that cancels tool calls after a fixed time
	// gets a handle before that instead of a cancelled child.
	ClientWaitSeconds map[string]float64
	// Limits bounds argument sizes; zero fields: the defaults.
	Limits Limits
	// ModelNamesFor names the models a root session's children choose
	// from when the session has settings of its own (its config's models:
	// seam.Settings); nil, or a nil result: the deployment's. The subagent
	// tool that session lists shows those names.
	ModelNamesFor func(principal string, s *seam.Settings) []string
	// Tasks is the durable tasks layer in front of the MCP server; nil:
	// none (no call is ever in task mode).
	Tasks *TaskLayer
	// Tokens is the token registry the callback tokens are minted in,
	// shared with the HTTP guard and the web view; nil: one of its own.
	Tokens *tokens.Registry
	Logger *slog.Logger
}

// Server holds the tool handlers. Build it after the providers are
// registered: the subagent tool's schema lists them.
type Server struct {
	idBytes int // the longest id a transcript URI may name (limits.agent_id_bytes)
	// One field per use of the manager (see Catalog): what a handler
	// reads tells what it depends on.
	catalog     Catalog
	delegate    Delegator
	messenger   Messenger
	interrupter Interrupter
	lister      Lister
	reporter    Reporter
	notices     Notices
	opts        Options
	log         *slog.Logger
	roots       []string // absolute, symlinks resolved
	tools       []*tool
	mcp         *server.MCPServer
	transcripts Transcripts   // nil: no transcript resources
	asking      *asking       // nil: questions go as notices (elicit.go)
	subs        subscriptions // transcript resource subscriptions

	mu           sync.Mutex
	sessionsByID map[string]*session        // root sessions known, by MCP session id
	lastPrune    time.Time                  // when sessionsByID was last pruned
	tokens       *tokens.Registry           // the callback tokens (and the HTTP and view tokens beside them)
	prompts      map[string]seam.PromptFunc // callback token → its driver's permission prompts (prompt.go)
	cbURL        string

	// subBase is the subagent tool's published schema before the model
	// choices; sessionSchemas caches it with a session's choices, by the
	// names joined (few distinct configs: it stays small).
	subBase        json.RawMessage
	sessionSchemas map[string]json.RawMessage
}

// tool is one tool: its definition and its handler, shared by MCP callers
// and in-process agents.
type tool struct {
	name        string
	description string
	schema      json.RawMessage
	validator   *schemas.Validator
	annotations mcp.ToolAnnotation
	limits      Limits
	rootToo     bool // published to root MCP clients (report is child-only)
	handle      func(ctx context.Context, c call) *mcp.CallToolResult
}

// call is one invocation: who calls, with what, and how to report progress.
type call struct {
	caller   seam.ParentRef
	args     any
	progress func(string) // nil without a progress token
	// task is the call's task mode: not nil when the tasks layer runs it
	// and it may become a durable task (a child it starts in the
	// foreground is started through it: startContinuable, followup).
	task *taskMode
}

// New builds the tool handlers over mgr.
func New(mgr Manager, opts Options) (*Server, error) {
	s := &Server{catalog: mgr, delegate: mgr, messenger: mgr, interrupter: mgr, lister: mgr, reporter: mgr, notices: mgr, opts: opts, log: opts.Logger, sessionsByID: map[string]*session{}, tokens: opts.Tokens, prompts: map[string]seam.PromptFunc{}}
	if s.tokens == nil {
		s.tokens = tokens.New()
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.transcripts, _ = mgr.(Transcripts)
	var err error
	if s.asking, err = newAsking(mgr); err != nil {
		return nil, err
	}
	// The configured roots add to the working directory, never replace it
	// (the README's promise); it stays first, the default cwd.
	var roots []string
	if !opts.NoWorkingDirRoot {
		wd, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		roots = append(roots, wd)
	}
	roots = append(roots, opts.Roots...)
	for _, r := range roots {
		abs, err := filepath.Abs(r)
		if err != nil {
			return nil, fmt.Errorf("root %q: %w", r, err)
		}
		real, err := filepath.EvalSymlinks(abs)
		if err != nil {
			return nil, fmt.Errorf("root %q: %w", r, err)
		}
		if !slices.Contains(s.roots, real) {
			s.roots = append(s.roots, real)
		}
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
	subSchema, err := subagentSchema(providers)
	if err != nil {
		return nil, err
	}
	defs := []struct {
		name, desc string
		schema     []byte
		readOnly   bool
		rootToo    bool
		handle     func(context.Context, call) *mcp.CallToolResult
	}{
		{"subagent", s.subagentDescription(), subSchema, false, true, s.subagent},
		{"send_message", sendMessageDescription, schemas.SendMessageInput, false, true, s.sendMessage},
		{"interrupt_agent", interruptDescription, schemas.InterruptAgentInput, false, true, s.interrupt},
		{"list_agents", listAgentsDescription, schemas.ListAgentsInput, true, true, s.listAgents},
		{"report", reportDescription, schemas.ReportInput, false, false, s.report},
		{seam.PromptTool, promptDescription, schemas.PermissionPromptInput, false, false, s.permissionPrompt},
	}
	limits := opts.Limits.withDefaults()
	s.idBytes = limits.AgentIDBytes
	for _, d := range defs {
		if !mgr.Persistent() && d.name != "subagent" {
			continue // control tools need the session store: publish only tools that work
		}
		raw, err := publishedSchema(d.schema)
		if err == nil && d.name == "subagent" {
			s.subBase = raw
			raw, err = withModelChoices(raw, providers)
		}
		if err != nil {
			return nil, fmt.Errorf("%s schema: %w", d.name, err)
		}
		v, err := schemas.Compile("arguments for "+d.name, d.schema)
		if err != nil {
			return nil, err
		}
		s.tools = append(s.tools, &tool{name: d.name, description: d.desc, schema: raw, validator: v, limits: limits, rootToo: d.rootToo,
			handle: d.handle, annotations: annotations(d.readOnly, d.name == "subagent")})
	}
	return s, nil
}

// annotations are the tool's hints, each sent only where it differs from
// the spec's default (readOnly false, destructive true, idempotent false,
// openWorld true): every tools/list carries them to the model.
func annotations(readOnly, openWorld bool) mcp.ToolAnnotation {
	a := mcp.ToolAnnotation{DestructiveHint: mcp.ToBoolPtr(false)}
	if readOnly {
		a.ReadOnlyHint, a.IdempotentHint = mcp.ToBoolPtr(true), mcp.ToBoolPtr(true)
	}
	if !openWorld {
		a.OpenWorldHint = mcp.ToBoolPtr(false)
	}
	return a
}

// publishedSchema is the input schema as tools/list shows it: without
// $schema, and without the bounds the server checks itself (lengths,
// ranges, property counts), which cost every request bytes and tell a
// model nothing it needs; a value out of bounds gets an error naming the
// field and the bound. Types, enums, required fields, descriptions and
// additionalProperties stay.
func publishedSchema(raw []byte) (json.RawMessage, error) {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	delete(m, "$schema")
	leanSchema(m)
	return json.Marshal(m)
}

// boundKeywords are the validation-only keywords publishedSchema drops.
var boundKeywords = []string{"minLength", "maxLength", "minimum", "maximum", "minProperties", "maxProperties", "minItems", "maxItems"}

// leanSchema drops boundKeywords from a schema node and the schemas under
// it, walking only schema positions (a property may be named "minimum").
func leanSchema(node map[string]any) {
	for _, k := range boundKeywords {
		delete(node, k)
	}
	// A closed object is enforced when the arguments are validated; models
	// do not invent keys for being told less.
	if node["additionalProperties"] == false {
		delete(node, "additionalProperties")
	}
	if props, ok := node["properties"].(map[string]any); ok {
		for _, p := range props {
			if sub, ok := p.(map[string]any); ok {
				leanSchema(sub)
			}
		}
	}
	for _, k := range []string{"items", "additionalProperties"} {
		if sub, ok := node[k].(map[string]any); ok {
			leanSchema(sub)
		}
	}
}

// subagentSchema is the embedded input schema with the providers as an enum.
func subagentSchema(providers []manager.ProviderInfo) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(schemas.SubagentInput, &m); err != nil {
		return nil, err
	}
	names := make([]any, len(providers))
	for i, p := range providers {
		names[i] = p.Name
	}
	m["properties"].(map[string]any)["provider"].(map[string]any)["enum"] = names
	return json.Marshal(m)
}

// Register adds the tools to an MCP server built with Filter as its tool
// filter: report is listed (and callable) only for child callers.
func (s *Server) Register(ms *server.MCPServer) {
	s.mcp = ms
	for _, t := range s.tools {
		def := mcp.NewToolWithRawSchema(t.name, t.description, t.schema)
		def.Annotations = t.annotations
		ms.AddTool(def, s.mcpHandler(t))
	}
	s.registerResources(ms)
}

// Filter is the MCP server's tool filter: root callers do not see the
// child-only tools (report), a child sees the permission prompt only when
// its driver serves one (prompt.go), and a root session with settings of
// its own sees its own model names in the subagent tool.
func (s *Server) Filter(ctx context.Context, tools []mcp.Tool) []mcp.Tool {
	if isChild(ctx) {
		return s.childTools(ctx, tools)
	}
	out := tools[:0:0]
	for _, t := range tools {
		if tt := s.tool(t.Name); tt == nil || tt.rootToo {
			if t.Name == "subagent" {
				if raw := s.sessionSubagentSchema(ctx); raw != nil {
					t.RawInputSchema = raw
				}
			}
			out = append(out, t)
		}
	}
	return out
}

// sessionSubagentSchema is the subagent tool's published schema for the
// calling root session when its settings name other models than the
// deployment's (the models of spawn and fork, which share them); nil:
// the deployment's schema. Calls are validated by the provider, not by
// this list: it only tells the model what it may choose.
func (s *Server) sessionSubagentSchema(ctx context.Context) json.RawMessage {
	p := Principal(ctx)
	if s.opts.ModelNamesFor == nil || s.subBase == nil || p == "" {
		return nil
	}
	ref := s.rootCaller(ctx, p)
	if ref.Settings == nil {
		return nil
	}
	names := s.opts.ModelNamesFor(p, ref.Settings)
	if names == nil {
		return nil
	}
	providers := s.catalog.Providers()
	same := true
	for i, pi := range providers {
		if pi.Models != nil {
			same = same && slices.Equal(pi.Models, names)
			providers[i].Models = names
		}
	}
	if same {
		return nil
	}
	key := strings.Join(names, "\x00")
	s.mu.Lock()
	raw, ok := s.sessionSchemas[key]
	s.mu.Unlock()
	if ok {
		return raw
	}
	raw, err := withModelChoices(s.subBase, providers)
	if err != nil {
		s.log.Warn("the subagent schema with a session's models", "err", err)
		return nil
	}
	s.mu.Lock()
	if s.sessionSchemas == nil {
		s.sessionSchemas = map[string]json.RawMessage{}
	}
	s.sessionSchemas[key] = raw
	s.mu.Unlock()
	return raw
}

// SetCallbackURL sets where external children reach the server back (the
// callback listener's /mcp URL).
func (s *Server) SetCallbackURL(url string) {
	s.mu.Lock()
	s.cbURL = url
	s.mu.Unlock()
}

// MintCallback issues a bearer token bound to an external child; revoke
// ends it (at the child's settlement). It is the manager's CallbackFunc.
func (s *Server) MintCallback(self seam.ParentRef) (seam.Callback, func()) {
	self.CompletedTurns = nil // an external child has no in-process conversation to fork
	tok, revoke := s.tokens.MintCallback(self)
	s.mu.Lock()
	url := s.cbURL
	s.mu.Unlock()
	return seam.Callback{URL: url, Token: tok, ServePrompts: s.servePrompts(tok)}, func() {
		revoke()
		s.mu.Lock()
		delete(s.prompts, tok)
		s.mu.Unlock()
	}
}

// Tokens is the registry the server mints callback tokens in.
func (s *Server) Tokens() *tokens.Registry { return s.tokens }

// ChildContext resolves a callback bearer token into a context marking
// the call as that child's; ok is false for an unknown or revoked token.
// Resolve once and pass the context on: a call made with it is refused
// if the token is revoked before it runs.
func (s *Server) ChildContext(ctx context.Context, token string) (context.Context, bool) {
	self, ok := s.tokens.Child(token)
	if !ok {
		return ctx, false
	}
	return withChild(ctx, self, token), true
}

// mcpHandler adapts a tool for an MCP caller: the caller comes from the
// transport (a root principal's session, or an external child by its
// callback token); a root session's pending notices ride along with the
// result.
func (s *Server) mcpHandler(t *tool) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		caller, err := s.caller(ctx)
		if err != nil {
			s.log.Warn("tool call refused", "tool", t.name, "err", err)
			return mcp.NewToolResultError("Error: " + err.Error()), nil
		}
		root := caller.AgentID == ""
		if root && !s.seen(ctx, caller.Principal) {
			return mcp.NewToolResultError("Error: UNAUTHORIZED: this MCP session belongs to another principal; start a session of your own"), nil
		}
		if root && caller.Session != "" {
			// Before the call starts any child: its notices wait for this
			// session wherever the principal calls.
			s.notices.SessionOpened(caller.Principal, caller.Session)
		}
		c := call{caller: caller, args: req.GetArguments(), task: s.taskMode(req)}
		if req.Params.Meta != nil && req.Params.Meta.ProgressToken != nil {
			c.progress = s.progressSender(ctx, req.Params.Meta.ProgressToken)
		}
		if rt := req.Params.MultiRoundTripParams; rt.RequestState != "" || len(rt.InputResponses) > 0 {
			var refused *mcp.CallToolResult
			if ctx, refused = s.resume(ctx, t.name, c, rt); refused != nil {
				return refused, nil
			}
		}
		res := t.handle(ctx, c)
		if root && !s.observer(ctx) && !res.NeedsInput() {
			withNotices(res, s.notices.TakeNotices(caller.Principal, caller.Session))
		}
		return res, nil
	}
}

// StructuredNotice is a notice as a result's structuredContent carries it.
type StructuredNotice struct {
	SourceKind string           `json:"source_kind"` // subagent-settled or subagent-report
	AgentID    string           `json:"agent_id"`
	StopReason agent.StopReason `json:"stop_reason,omitempty"`
	Text       string           `json:"text"`
}

// withNotices delivers a root session's pending notices in band: in the
// text, each under a heading naming its source kind, and in
// structuredContent as "notices", since Claude Code and Codex hand their
// model only the structured result. A result without structured content
// gets {"message": <its text>, "notices": [...]}, so the text is not lost
// to those clients.
func withNotices(res *mcp.CallToolResult, ns []seam.Notice) {
	if len(ns) == 0 {
		return
	}
	sn := make([]StructuredNotice, len(ns))
	for i, n := range ns {
		sn[i] = StructuredNotice{SourceKind: n.Source, AgentID: n.ChildID, StopReason: n.StopReason, Text: n.Text}
	}
	var m map[string]any
	if res.StructuredContent == nil {
		m = map[string]any{"message": ResultText(res)}
	} else if b, err := json.Marshal(res.StructuredContent); err != nil || json.Unmarshal(b, &m) != nil || m == nil {
		m = map[string]any{"result": res.StructuredContent}
	}
	if prev, ok := m["notices"].([]any); ok { // a handler delivered some already
		all := prev
		for _, n := range sn {
			all = append(all, n)
		}
		m["notices"] = all
	} else {
		m["notices"] = sn
	}
	res.StructuredContent = m
	for _, n := range ns {
		res.Content = append(res.Content, mcp.NewTextContent(fmt.Sprintf("[%s from %s]\n%s", n.Source, n.ChildID, n.Text)))
	}
}

// PushNotice sends a notice for a principal as an MCP log notification to
// the child's originating session while it is connected, else to every
// connected session of the principal. It is advisory: the notice is still
// delivered once, in band, with a later tool result.
func (s *Server) PushNotice(principal string, n seam.Notice) {
	if s.mcp == nil {
		return
	}
	ids := s.sessionsOf(principal)
	if n.Session != "" && s.SessionConnected(n.Session) {
		ids = []string{n.Session}
	}
	for _, id := range ids {
		err := s.mcp.SendNotificationToSpecificClient(id, "notifications/message", map[string]any{
			"level":  "info",
			"logger": "mcp-subagent",
			"data":   map[string]any{"source": n.Source, "agent_id": n.ChildID, "stop_reason": n.StopReason, "text": n.Text},
		})
		if err != nil {
			s.log.Debug("pushing a notice failed", "session", id, "err", err)
		}
	}
}

// AgentTools returns the delegation tools for an in-process child that
// calls them as self. They run the same handlers as MCP calls.
func (s *Server) AgentTools(self seam.ParentRef) []agent.Tool {
	out := make([]agent.Tool, 0, len(s.tools))
	for _, t := range s.tools {
		if t.name == seam.PromptTool {
			continue // an external agent's permission check: no in-process loop asks through it
		}
		out = append(out, &agentTool{t: t, self: self})
	}
	return out
}

type agentTool struct {
	t    *tool
	self seam.ParentRef
}

func (a *agentTool) Def() llm.ToolDef {
	return llm.ToolDef{Name: a.t.name, Description: a.t.description, Parameters: a.t.schema}
}

func (a *agentTool) Call(ctx context.Context, args json.RawMessage) (string, error) {
	res := a.t.handle(ctx, call{caller: a.self, args: args})
	return ResultText(res), nil
}

// ResultText flattens a tool result's text content.
func ResultText(r *mcp.CallToolResult) string {
	var parts []string
	for _, c := range r.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// decode checks a call's arguments against the size limits, before
// anything copies them, then validates them into dst.
func (t *tool) decode(c call, dst any) *mcp.CallToolResult {
	if err := t.limits.check(t.name, c.args); err != nil {
		return mcp.NewToolResultError("Error: INVALID_REQUEST: " + err.Error())
	}
	if err := t.validator.Decode(c.args, dst); err != nil {
		return mcp.NewToolResultError("Error: " + clip(err.Error()))
	}
	return nil
}
