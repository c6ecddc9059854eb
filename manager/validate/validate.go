// Package validate owns what a start may ask of its provider: a request
// that needs a capability its provider lacks is refused before the
// provider is called (UNSUPPORTED_CAPABILITY naming the field and the
// provider); so are non-object output schemas, unknown tool names in a
// filter, an empty prompt, a bad budget, and depths over the cap
// (DEPTH_EXCEEDED: "subagent depth N exceeds maxDepth M"). A child is one
// deeper than its caller, under the smallest cap of the deployment, every
// ancestor's request and its own request.
//
// It is pure: it reads the provider's capabilities and tool names and the
// request, and calls nothing else.
package validate

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Start checks req against provider p, registered as name: the
// capabilities it needs, its output schema, tool filter, prompt and
// budget.
func Start(p seam.Provider, name string, req *seam.StartRequest) error {
	caps := p.Capabilities()
	unsupported := func(field string) error {
		return &seam.Error{Code: seam.CodeUnsupportedCapability, Provider: name,
			Message: fmt.Sprintf("provider %q does not support %s; remove it or choose another provider", name, field)}
	}
	if len(req.OutputSchema) > 0 {
		if !caps.OutputSchema {
			return unsupported("output_schema")
		}
		if err := checkObjectSchema(req.OutputSchema); err != nil {
			return &seam.Error{Code: seam.CodeInvalidRequest, Provider: name, Message: "output_schema: " + err.Error()}
		}
	}
	if req.MaxDepth != nil && !caps.DepthLimit {
		return unsupported("max_depth")
	}
	if req.ToolFilter != nil {
		if !caps.ToolFilter {
			return unsupported("tool_filter")
		}
		if err := checkFilter(p, req.ToolFilter); err != nil {
			return &seam.Error{Code: seam.CodeInvalidRequest, Provider: name, Message: err.Error()}
		}
	}
	if req.Persona != "" && !caps.Persona {
		return unsupported("persona")
	}
	if req.Prompt == "" {
		return &seam.Error{Code: seam.CodeInvalidRequest, Provider: name, Message: "prompt must not be empty"}
	}
	if req.Budget != nil {
		if err := req.Budget.Check("budget"); err != nil {
			return err
		}
	}
	return nil
}

// Depth checks the depth of the child req starts, under the deployment's
// cap maxDepth, and sets req.Depth and req.DepthCap: the child is one
// deeper than its caller, under the smallest cap of the deployment, every
// ancestor's request and this request.
func Depth(name string, req *seam.StartRequest, maxDepth int) error {
	if req.Parent.Depth < 0 || req.Parent.Depth >= math.MaxInt32 {
		return &seam.Error{Code: seam.CodeDepthExceeded, Message: fmt.Sprintf("subagent depth %d is out of range", req.Parent.Depth)}
	}
	depth := req.Parent.Depth + 1
	limit := maxDepth
	if c := req.Parent.DepthCap; c > 0 && c < limit {
		limit = c
	}
	if depth > limit {
		return &seam.Error{Code: seam.CodeDepthExceeded, Provider: name,
			Message: fmt.Sprintf("subagent depth %d exceeds maxDepth %d", depth, limit)}
	}
	if req.MaxDepth != nil {
		if *req.MaxDepth < 0 {
			return &seam.Error{Code: seam.CodeInvalidRequest, Provider: name, Message: "max_depth must not be negative"}
		}
		if *req.MaxDepth < depth {
			return &seam.Error{Code: seam.CodeDepthExceeded, Provider: name,
				Message: fmt.Sprintf("subagent depth %d exceeds maxDepth %d", depth, *req.MaxDepth)}
		}
		if *req.MaxDepth < limit {
			limit = *req.MaxDepth
		}
	}
	req.Depth, req.DepthCap = depth, limit
	return nil
}

func checkObjectSchema(raw json.RawMessage) error {
	_, err := agent.ResolveObjectSchema(raw)
	return err
}

func checkFilter(p seam.Provider, f *seam.ToolFilter) error {
	if (f.Allow == nil) == (f.Deny == nil) {
		return fmt.Errorf("tool_filter needs exactly one of allow or deny")
	}
	namer, ok := p.(seam.ToolNamer)
	if !ok {
		return nil
	}
	known := map[string]bool{}
	for _, n := range namer.ToolNames() {
		known[n] = true
	}
	var unknown []string
	for _, n := range append(append([]string(nil), f.Allow...), f.Deny...) {
		if !known[n] {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		names := namer.ToolNames()
		sort.Strings(names)
		return fmt.Errorf("tool_filter names unknown tools %q; known tools: %q", unknown, names)
	}
	return nil
}
