package tools

import (
	"context"

	"github.com/mark3labs/mcp-go/server"

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

type childKey struct{}

// withChild marks ctx as a call from an external child agent that reached
// the server back with its callback token.
func withChild(ctx context.Context, self manager.ParentRef) context.Context {
	return context.WithValue(ctx, childKey{}, self)
}

// caller is the identity of an MCP call: the external child its callback
// token names, or the root principal the transport names.
func (s *Server) caller(ctx context.Context) manager.ParentRef {
	if self, ok := ctx.Value(childKey{}).(manager.ParentRef); ok {
		return self
	}
	return s.rootCaller(ctx)
}

// rootCaller is the ParentRef of a root MCP client: its principal, its
// session, and the session's working directory (else the first root).
func (s *Server) rootCaller(ctx context.Context) manager.ParentRef {
	p := Principal(ctx)
	if p == "" {
		p = "local"
	}
	ref := manager.ParentRef{Principal: p, Depth: 0}
	if len(s.roots) > 0 {
		ref.Cwd = s.roots[0]
	}
	if cs := server.ClientSessionFromContext(ctx); cs != nil {
		ref.Session = cs.SessionID()
		if si := s.session(ref.Session); si != nil && si.Cwd != "" {
			ref.Cwd = si.Cwd
		}
	}
	return ref
}
