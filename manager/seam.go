package manager

import (
	"context"
	"encoding/json"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/llm"
)

// Capabilities are a provider's one-shot start features. A request that
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
	// Journal is the calling agent's journal (nil for a root caller); the
	// fork provider seeds from it.
	Journal *agent.Journal
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

	// Progress, when set, receives short human-readable progress notes while
	// the run works. It must not block; notes may be dropped.
	Progress func(note string)

	// Set by the manager before the provider is called.
	ID       string   // the child's id; a local run's ID equals it
	Depth    int      // the child's depth (parent's + 1)
	DepthCap int      // the absolute cap for the child's own delegations
	Callback Callback // how an external child reaches this server back
}

// Callback is how an external child reaches this server back as an MCP
// client (to report, list and delegate further): streamable HTTP on
// loopback with a bearer token bound to that child and revoked when its
// activation (or one-shot run) ends. Zero when the deployment offers none.
type Callback struct {
	URL   string // e.g. http://127.0.0.1:PORT/mcp
	Token string // send as "Authorization: Bearer <Token>"
}

// CallbackFunc mints a Callback for a child acting as self; revoke ends it.
type CallbackFunc func(self ParentRef) (cb Callback, revoke func())

// Self is the ParentRef a child started by req uses for its own delegations.
func (r StartRequest) Self(journal *agent.Journal) ParentRef {
	return ParentRef{Principal: r.Parent.Principal, AgentID: r.ID, Depth: r.Depth,
		DepthCap: r.DepthCap, Cwd: r.Cwd, Journal: journal}
}

// Usage counts what a run consumed. It is the model client's own type, so
// a turn's usage needs no conversion and stored checkpoints keep its JSON.
type Usage = llm.Usage

// Result is how a run ended. A child's failure is a Result with a
// non-completed StopReason, never an error.
type Result struct {
	Output     string          // the last non-empty assistant message
	Structured json.RawMessage // only when a schema was asked for and met
	Diagnostic string          // secret-free, at most MaxDiagnostic bytes
	StopReason agent.StopReason
	Usage      Usage
}

// MaxDiagnostic bounds Result.Diagnostic.
const MaxDiagnostic = 4096

// Run is a started child run.
type Run interface {
	// ID is the run's id; for a local run, the child's id.
	ID() string
	// Agent is the local child agent; nil for a remote run.
	Agent() *agent.Agent
	// Done is closed when the result is ready.
	Done() <-chan struct{}
	// Result returns the result once Done is closed. Its error is for
	// infrastructure faults only.
	Result() (Result, error)
	// Dispose releases what the run holds; it is safe to call more than once.
	Dispose()
}

// Provider runs children. Implementations know nothing of MCP.
type Provider interface {
	Name() string
	Capabilities() Capabilities
	// InheritsParentContext is true only for fork: it shapes the tool's
	// wording and grants nothing.
	InheritsParentContext() bool
	// Start returns once the run is ready. ctx is the only cancellation
	// channel: cancelled before the run is ready, the provider cleans up and
	// returns an error; cancelled after, the run ends with StopAborted.
	Start(ctx context.Context, req StartRequest) (Run, error)
}

// ToolNamer is implemented by providers that know the names of every tool
// their children can have, so unknown names in a tool filter are refused
// before start.
type ToolNamer interface {
	ToolNames() []string
}

// Describer is implemented by providers that describe themselves for the
// tool's description.
type Describer interface {
	Description() string
}

// Continuable is implemented by providers that can run continuable
// children. Having it is the capability. The provider only contributes data
// (creation inputs) and the driver that runs one turn; activation,
// residency, settlement, ownership and persistence are the manager's.
type Continuable interface {
	// PrepareContinuable supplies a new child's creation inputs. req has
	// been validated and carries the child's ID and depth.
	PrepareContinuable(ctx context.Context, req StartRequest) (CreationInputs, error)
	// NewDriver builds the driver that runs a child's turns from its
	// persisted descriptor and journal, for a new child and a cold resume
	// alike.
	NewDriver(ctx context.Context, req DriverRequest) (Driver, error)
}

// CreationInputs are what a provider supplies for a new continuable child.
type CreationInputs struct {
	Seed    []agent.Event // the journal the child starts from (fork)
	Session string        // an external agent's session handle
	Model   string        // the model the child runs on, for the descriptor
}

// DriverRequest is what a provider gets to build a driver.
type DriverRequest struct {
	Header     Header
	Descriptor Descriptor
	Journal    *agent.Journal // rebuilt from the store; the driver appends to it
	Self       ParentRef      // the child as a caller of delegation tools
	Callback   Callback       // how an external child reaches this server back
}

// Driver runs a continuable child's turns. RunTurn records everything in
// Journal, each input as its own user-side message with its source kind;
// cancelling ctx ends the turn aborted.
type Driver interface {
	RunTurn(ctx context.Context, inputs []agent.Input) agent.TurnResult
	Journal() *agent.Journal
	Close() error
}
