package tools

import (
	"context"

	"github.com/mcp-subagent/mcp-subagent/manager"
)

type principalKey struct{}

// WithPrincipal marks ctx as a call from the named root principal. The
// transports set it: "local" over stdio, the token's principal over HTTP.
func WithPrincipal(ctx context.Context, principal string) context.Context {
	return context.WithValue(ctx, principalKey{}, principal)
}

// Principal returns the root principal ctx was marked with, or "".
func Principal(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(string)
	return p
}

// rootCaller is the ParentRef of a root MCP client.
func (s *Server) rootCaller(ctx context.Context) manager.ParentRef {
	p := Principal(ctx)
	if p == "" {
		p = "local"
	}
	return manager.ParentRef{Principal: p, Depth: 0, Cwd: s.roots[0]}
}
