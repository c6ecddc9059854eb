package edge

import (
	"context"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// A transport that establishes no identity (no principal, no callback
// token) gets its calls refused: the caller is never defaulted to "local",
// the stdio root at depth 0.
func TestACallWithNoEstablishedCallerIsRefused(t *testing.T) {
	p := &plainProvider{}
	c := serveHTTPAs(t, p, nil) // marks no principal
	res := callSubagent(t, c, map[string]any{"description": "who am i", "prompt": "p"})
	if got := ResultText(res); !res.IsError || !strings.Contains(got, "UNAUTHORIZED") || !strings.Contains(got, "identity") {
		t.Errorf("call with no caller = isError %v %q; want UNAUTHORIZED", res.IsError, got)
	}
	if p.started.Load() != 0 {
		t.Errorf("%d children started for a caller with no identity", p.started.Load())
	}
}

// A callback token resolved into a context and revoked before the call
// runs refuses the call.
func TestACallWhoseCallbackTokenWasRevokedIsRefused(t *testing.T) {
	p := &plainProvider{}
	mgr := manager.New(manager.Options{})
	if err := mgr.Register(p); err != nil {
		t.Fatal(err)
	}
	ts, err := New(mgr, Options{Roots: []string{t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	cb, revoke := ts.MintCallback(seam.ParentRef{Principal: "local", AgentID: "agent-x", Depth: 1})
	ctx, ok := ts.ChildContext(context.Background(), cb.Token)
	if !ok {
		t.Fatal("a fresh token did not resolve")
	}
	if got, err := ts.caller(ctx); err != nil || got.AgentID != "agent-x" {
		t.Fatalf("caller before revocation = %+v, %v", got, err)
	}
	revoke()
	if got, err := ts.caller(ctx); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("caller after revocation = %+v, %v; want refused", got, err)
	}
	if _, ok := ts.ChildContext(context.Background(), cb.Token); ok {
		t.Error("a revoked token still resolves")
	}
}
