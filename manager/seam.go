package manager

import (
	"context"
	"encoding/json"

	"github.com/mcp-subagent/mcp-subagent/agent"
)

// Capabilities are a provider's one-shot start features. A request that
// needs a missing one is refused before the provider is called.
type Capabilities struct{ OutputSchema, DepthLimit, ToolFilter, Persona bool }

// ToolFilter restricts a child's tools: Allow keeps only the named tools,
// Deny removes the named tools. Exactly one of them is set.
type ToolFilter struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
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
	ID       string // the child's id; a local run's ID equals it
	Depth    int    // the child's depth (parent's + 1)
	DepthCap int    // the absolute cap for the child's own delegations
}

// Self is the ParentRef a child started by req uses for its own delegations.
func (r StartRequest) Self(journal *agent.Journal) ParentRef {
	return ParentRef{Principal: r.Parent.Principal, AgentID: r.ID, Depth: r.Depth,
		DepthCap: r.DepthCap, Cwd: r.Cwd, Journal: journal}
}

// Usage counts what a run consumed.
type Usage struct {
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd,omitempty"`
}

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
