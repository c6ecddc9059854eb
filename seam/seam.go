package seam

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
)

// Capabilities are a provider's start features. A request that
// needs a missing one is refused before the provider is called.
type Capabilities struct{ OutputSchema, DepthLimit, ToolFilter, Persona bool }

// ToolFilter restricts a child's tools: Allow keeps only the named tools,
// Deny removes the named tools. Exactly one of them is set. An empty,
// non-nil Allow keeps no tool; omitzero keeps it in the JSON, so a stored
// filter does not come back as "keep everything".
type ToolFilter struct {
	Allow []string `json:"allow,omitzero"`
	Deny  []string `json:"deny,omitzero"`
}

// Keeps reports whether the filter lets the tool named name through.
func (f *ToolFilter) Keeps(name string) bool {
	if f == nil {
		return true
	}
	if f.Allow != nil {
		for _, n := range f.Allow {
			if n == name {
				return true
			}
		}
		return false
	}
	for _, n := range f.Deny {
		if n == name {
			return false
		}
	}
	return true
}

// ParentRef is the caller a child is started for: a root principal (AgentID
// empty, Depth 0) or an agent.
type ParentRef struct {
	Principal string // the root principal the lineage belongs to
	AgentID   string // the calling agent; empty for a root caller
	Depth     int    // the caller's depth: 0 for a root caller
	// DepthCap is the absolute depth cap the caller's subtree is under;
	// zero: only the deployment's cap applies.
	DepthCap int
	Cwd      string // the caller's working directory (absolute)
	// Session is a root caller's session (one connection of its
	// principal); empty for agent callers and for transports without
	// sessions. A root child remembers it: its notices go to that session
	// while it is connected.
	Session string
	// Model is the calling agent's model as its descriptor records it (a
	// configured name for an in-process agent); empty for a root caller.
	// Fork children run on it unless the request names another.
	Model string
	// Settings are the root session's settings the caller's children run
	// with (Descriptor.Settings): a root caller's session's, an agent's
	// own descriptor's; nil: the deployment's own.
	Settings *Settings
	// CompletedTurns returns the calling agent's journal up to and
	// including its last completed turn (the fork seed); nil for a root
	// caller and for an external child. It is a read-only view: nothing
	// started below can append to its caller's journal.
	CompletedTurns func() []Event
}

// Address is the caller's address as a parent: its agent id, or its
// principal's address for a root caller.
func (p ParentRef) Address() string {
	if p.AgentID != "" {
		return p.AgentID
	}
	return PrincipalAddress(p.Principal)
}

// StartRequest is what a caller asks of a provider.
type StartRequest struct {
	Label        string
	Prompt       string // the child's first user message
	Parent       ParentRef
	Cwd          string          // the child's working directory; empty: the parent's
	OutputSchema json.RawMessage // object-rooted JSON Schema; needs Capabilities.OutputSchema
	MaxDepth     *int            // absolute cap for the child's subtree; needs DepthLimit
	ToolFilter   *ToolFilter     // needs ToolFilter
	Persona      string          // shadows the deployment persona; needs Persona
	// Model is the model the child runs on: for in-process providers one
	// of the deployment's configured model names, for external ones the
	// CLI's own model id; empty: the provider's default.
	Model  string
	Effort Effort // empty: the model's default
	// Budget bounds what the child (with its descendants) may spend; nil:
	// the deployment's default budget. It is capped by what every ancestor
	// has left.
	Budget *Budget
	// Isolation is "worktree" to run the child in its own git worktree
	// (IsolationWorktree); empty: it works in Cwd itself.
	Isolation string

	// Progress, when set, receives short human-readable progress notes
	// (agent.ProgressNotes) while the first turn works. It must not block;
	// notes may be dropped.
	Progress func(note string)

	// Set by the manager before the provider is called.
	ID       string // the child's id; a run's ID equals it
	Depth    int    // the child's depth (parent's + 1)
	DepthCap int    // the absolute cap for the child's own delegations
}

// Callback is how an external child reaches this server back as an MCP
// client (to report, list and delegate further): streamable HTTP on
// loopback with a bearer token bound to that child and revoked when its
// activation (or one-shot run) ends. Zero when the deployment offers none.
type Callback struct {
	URL   string // e.g. http://127.0.0.1:PORT/mcp
	Token string // send as "Authorization: Bearer <Token>"
	// ServePrompts, when the callback server offers it, registers how
	// this child's calls of PromptTool are answered (Claude Code's
	// --permission-prompt-tool); until a driver registers one, the tool
	// refuses the child. Revoking the callback drops it.
	ServePrompts func(PromptFunc)
}

// PromptTool is the callback server's tool through which an external
// agent asks leave for one of its own tool uses (Claude Code's
// --permission-prompt-tool mcp__<server>__permission_prompt).
const PromptTool = "permission_prompt"

// PromptFunc answers one PromptTool call: args are the arguments as the
// agent sent them, the result is the text the agent expects back. It may
// hold the call (a question to the person); ctx ends with the call.
type PromptFunc func(ctx context.Context, args json.RawMessage) string

// CallbackFunc mints a Callback for a child acting as self; revoke ends it.
type CallbackFunc func(self ParentRef) (cb Callback, revoke func())

// Budget is a spending limit; a zero field is no limit of that kind.
// Tokens counts input plus output tokens as usage reports them, Steps
// counts model calls (each request to the model is one), Seconds is the
// wall time of the child's turns since the grant, CostUSD is cost where a
// price is known. See the package doc for how it is enforced.
type Budget struct {
	Tokens  int64   `json:"tokens,omitempty"`
	Steps   int     `json:"steps,omitempty"`
	Seconds float64 `json:"seconds,omitempty"`
	CostUSD float64 `json:"cost_usd,omitempty"`
}

// Check reports a field of b that is not a valid budget value, named as
// the field of what prefix names ("budget" for a tool argument).
func (b Budget) Check(prefix string) error {
	bad := func(field, why string) error {
		return &Error{Code: CodeInvalidRequest, Message: fmt.Sprintf("field %q: %s; 0 (or leaving it out) means no limit", prefix+"."+field, why)}
	}
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	switch {
	case b.Tokens < 0:
		return bad("tokens", "must not be negative")
	case b.Steps < 0:
		return bad("steps", "must not be negative")
	case !finite(b.Seconds) || b.Seconds < 0:
		return bad("seconds", "must be a finite, non-negative number")
	case !finite(b.CostUSD) || b.CostUSD < 0:
		return bad("cost_usd", "must be a finite, non-negative number")
	}
	return nil
}

// Result is how a run ended. A child's failure is a Result with a
// non-completed StopReason, never an error.
type Result struct {
	Output     string          // the last non-empty assistant message
	Structured json.RawMessage // only when a schema was asked for and met
	Diagnostic string          // secret-free, at most MaxDiagnostic bytes
	StopReason StopReason
	// Usage has the model client's JSON (llm.Usage's), which stored
	// checkpoints keep.
	Usage Usage
	// Worktree and Changes are set for a child run in its own worktree:
	// where it is, and what its branch holds beyond its base once the
	// turn's changes are committed (nil when that could not be read).
	Worktree *Worktree
	Changes  *Changes
}

// MaxDiagnostic bounds Result.Diagnostic.
const MaxDiagnostic = 4096

// Run is a started one-shot run. Every run this manager runs is local:
// its ID is the child's id.
type Run interface {
	// ID is the run's id, the child's id.
	ID() string
	// Done is closed when the result is ready.
	Done() <-chan struct{}
	// Result returns the result once Done is closed. A child's failure is
	// a non-completed stop reason; a run has no other way to fail.
	Result() Result
	// Dispose ends the run: it cancels the turn if it still runs, waits
	// for it, closes the driver and revokes the callback. It is safe to
	// call more than once.
	Dispose()
}

// Provider contributes the driver that runs a child's turns and the data
// to build it; the lifecycle — one-shot or continuable, in-process or
// external — is the manager's. Implementations know nothing of MCP.
type Provider interface {
	Name() string
	Capabilities() Capabilities
	// InheritsParentContext is true only for fork: it shapes the tool's
	// wording and grants nothing.
	InheritsParentContext() bool
	// Prepare supplies a new child's creation inputs, for a one-shot run
	// and a continuable child alike. req has been validated and carries
	// the child's ID and depth.
	Prepare(ctx context.Context, req StartRequest) (CreationInputs, error)
	// NewDriver builds the driver that runs a child's turns from its
	// header, descriptor and journal: for a one-shot run
	// (DriverRequest.OneShot), a new continuable child and a cold resume
	// alike. ctx is the only cancellation channel while it builds; a
	// driver starts nothing it does not stop in Close.
	NewDriver(ctx context.Context, req DriverRequest) (Driver, error)
}

// ToolNamer is implemented by providers that know the names of every tool
// their children can have, so unknown names in a tool filter are refused
// before start.
type ToolNamer interface {
	ToolNames() []string
}

// ModelNamer is implemented by providers whose children run on one of a
// fixed set of named models (the deployment's configured models), so the
// subagent tool can list the names StartRequest.Model may take. Models
// returns them, the default first. A provider without it takes its own
// model ids (an external CLI's), which it checks itself.
type ModelNamer interface {
	Models() []string
}

// Describer is implemented by providers that describe themselves for the
// tool's description.
type Describer interface {
	Description() string
}

// Continuable is implemented by providers that can run continuable
// children; having it is the capability (ProviderInfo.Continuable, and
// with it whether the subagent tool offers background runs). It stays an
// optional ability although every provider has a driver: running one turn
// from a fresh journal is not the same promise as rebuilding a child from
// its stored descriptor and journal for every later turn, and a provider
// whose transport cannot continue a session (or whose state lives
// elsewhere, as a remote run's would) must be able to say so. A provider
// without it runs one-shot children only.
type Continuable interface {
	Provider
	// Continuable marks the ability; it is never called.
	Continuable()
}

// CreationInputs are what a provider supplies for a new child.
type CreationInputs struct {
	Seed    []Event // the journal the child starts from (fork)
	Session string  // an external agent's session handle
	Model   string  // the model the child runs on, for the descriptor
	Effort  Effort  // the effort it runs at, for the descriptor
}

// DriverRequest is what a provider gets to build a driver.
type DriverRequest struct {
	Header     Header
	Descriptor Descriptor
	Journal    *Journal  // the seed, or rebuilt from the store; the driver appends to it
	Self       ParentRef // the child as a caller of delegation tools
	Callback   Callback  // how an external child reaches this server back
	// Ask puts a question to the person (a permission request held open
	// under permission "ask"); nil: nobody can be asked, the provider's
	// policy answers.
	Ask AskFunc
	// Budget is the child's budget check for an in-process agent loop
	// (agent.Config.Budget). External drivers need not call it: the
	// manager stops their turns itself.
	Budget func(call bool) error
}

// OneShot reports whether the driver is for a one-shot run: exactly one
// turn, after which the child is gone, so nothing of it need be kept (an
// external CLI's session, for one).
func (r DriverRequest) OneShot() bool { return r.Header.Mode == ModeOneShot }

// Driver runs a child's turns. RunTurn records everything in Journal, each
// input as its own user-side message with its source kind; cancelling ctx
// ends the turn aborted. Close releases what the driver holds (a process);
// the manager calls it once, after the last turn.
type Driver interface {
	RunTurn(ctx context.Context, inputs []Input) TurnResult
	Journal() *Journal
	Close() error
}
