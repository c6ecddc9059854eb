package validate

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// provider is a provider with the given capabilities and tool names.
type provider struct {
	caps  seam.Capabilities
	tools []string
}

func (p provider) Name() string                    { return "p" }
func (p provider) Capabilities() seam.Capabilities { return p.caps }
func (p provider) InheritsParentContext() bool     { return false }
func (p provider) ToolNames() []string             { return p.tools }
func (provider) Prepare(context.Context, seam.StartRequest) (seam.CreationInputs, error) {
	return seam.CreationInputs{}, nil
}
func (provider) NewDriver(context.Context, seam.DriverRequest) (seam.Driver, error) { return nil, nil }

func code(err error) seam.Code {
	var se *seam.Error
	if errors.As(err, &se) {
		return se.Code
	}
	return ""
}

func TestAStartNeedingWhatItsProviderLacksIsRefused(t *testing.T) {
	none := provider{}
	all := provider{caps: seam.Capabilities{OutputSchema: true, DepthLimit: true, ToolFilter: true, Persona: true}, tools: []string{"read_file", "run_shell"}}
	two := 2
	for _, c := range []struct {
		p    provider
		req  seam.StartRequest
		code seam.Code
		says string
	}{
		{none, seam.StartRequest{Prompt: "x", OutputSchema: []byte(`{"type":"object"}`)}, seam.CodeUnsupportedCapability, "output_schema"},
		{none, seam.StartRequest{Prompt: "x", MaxDepth: &two}, seam.CodeUnsupportedCapability, "max_depth"},
		{none, seam.StartRequest{Prompt: "x", Persona: "terse"}, seam.CodeUnsupportedCapability, "persona"},
		{none, seam.StartRequest{Prompt: "x", ToolFilter: &seam.ToolFilter{Allow: []string{"read_file"}}}, seam.CodeUnsupportedCapability, "tool_filter"},
		{all, seam.StartRequest{Prompt: "x", OutputSchema: []byte(`{"type":"string"}`)}, seam.CodeInvalidRequest, "output_schema"},
		{all, seam.StartRequest{Prompt: "x", ToolFilter: &seam.ToolFilter{Allow: []string{"fly"}}}, seam.CodeInvalidRequest, `unknown tools ["fly"]`},
		{all, seam.StartRequest{Prompt: "x", ToolFilter: &seam.ToolFilter{}}, seam.CodeInvalidRequest, "exactly one of allow or deny"},
		{all, seam.StartRequest{}, seam.CodeInvalidRequest, "prompt must not be empty"},
		{all, seam.StartRequest{Prompt: "x", Budget: &seam.Budget{Steps: -1}}, seam.CodeInvalidRequest, "budget.steps"},
	} {
		err := Start(c.p, "p", &c.req)
		if code(err) != c.code || !strings.Contains(err.Error(), c.says) {
			t.Errorf("Start(%+v) = %v, want %s saying %q", c.req, err, c.code, c.says)
		}
	}
	ok := seam.StartRequest{Prompt: "x", OutputSchema: []byte(`{"type":"object"}`), ToolFilter: &seam.ToolFilter{Deny: []string{"run_shell"}}, MaxDepth: &two, Persona: "terse"}
	if err := Start(all, "p", &ok); err != nil {
		t.Fatalf("Start of a request its provider supports = %v", err)
	}
}

func TestDepthIsCappedByTheDeploymentTheAncestorsAndTheRequest(t *testing.T) {
	one, five := 1, 5
	req := seam.StartRequest{Parent: seam.ParentRef{Depth: 1, DepthCap: 4}, MaxDepth: &five}
	if err := Depth("p", &req, 3); err != nil || req.Depth != 2 || req.DepthCap != 3 {
		t.Fatalf("Depth = %v (depth %d, cap %d), want depth 2 under the deployment's cap 3", err, req.Depth, req.DepthCap)
	}
	deep := seam.StartRequest{Parent: seam.ParentRef{Depth: 2, DepthCap: 2}}
	if err := Depth("p", &deep, 3); code(err) != seam.CodeDepthExceeded || !strings.Contains(err.Error(), "subagent depth 3 exceeds maxDepth 2") {
		t.Fatalf("Depth past an ancestor's cap = %v", err)
	}
	own := seam.StartRequest{Parent: seam.ParentRef{Depth: 1}, MaxDepth: &one}
	if err := Depth("p", &own, 3); code(err) != seam.CodeDepthExceeded {
		t.Fatalf("Depth past the request's own max_depth = %v", err)
	}
}
