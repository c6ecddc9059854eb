package edge

import (
	"context"
	"errors"

	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

type principalKey struct{}

// WithPrincipal marks ctx as a call from the named root principal. The
// transports set it: "local" over stdio, the token's principal over HTTP.
// A call marked with no principal (or "") is refused, never defaulted.
func WithPrincipal(ctx context.Context, principal string) context.Context {
	return context.WithValue(ctx, principalKey{}, principal)
}

// Principal returns the root principal ctx was marked with, or "".
func Principal(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(string)
	return p
}

type childKey struct{}

// childCaller is an external child as its callback token resolved it.
type childCaller struct {
	self  seam.ParentRef
	token string
}

// withChild marks ctx as a call from an external child agent that reached
// the server back with its callback token.
func withChild(ctx context.Context, self seam.ParentRef, token string) context.Context {
	return context.WithValue(ctx, childKey{}, childCaller{self: self, token: token})
}

func isChild(ctx context.Context) bool {
	_, ok := ctx.Value(childKey{}).(childCaller)
	return ok
}

var (
	errNoCaller = errors.New("UNAUTHORIZED: the caller's identity could not be established (no principal and no callback token); the call was refused")
	errRevoked  = errors.New("UNAUTHORIZED: this callback token was revoked (the subagent it was minted for has settled); the call was refused")
)

// caller is the identity of an MCP call: the external child its callback
// token names, or the root principal the transport names. An identity that
// cannot be established is an error: defaulting it (to "local", the stdio
// root at depth 0) would hand a caller powers nobody gave it.
func (s *Server) caller(ctx context.Context) (seam.ParentRef, error) {
	if c, ok := ctx.Value(childKey{}).(childCaller); ok {
		// The token was resolved once, by the transport's guard; it must
		// still be live when the call runs.
		if _, live := s.tokens.Child(c.token); !live {
			return seam.ParentRef{}, errRevoked
		}
		return c.self, nil
	}
	p := Principal(ctx)
	if p == "" {
		return seam.ParentRef{}, errNoCaller
	}
	return s.rootCaller(ctx, p), nil
}

// rootCaller is the ParentRef of root principal p: its session, and the
// session's working directory (else the first root).
func (s *Server) rootCaller(ctx context.Context, p string) seam.ParentRef {
	ref := seam.ParentRef{Principal: p, Depth: 0}
	if len(s.roots) > 0 {
		ref.Cwd = s.roots[0]
	}
	if cs := server.ClientSessionFromContext(ctx); cs != nil {
		ref.Session = cs.SessionID()
		if si := s.session(ref.Session); si != nil {
			if si.Cwd != "" {
				ref.Cwd = si.Cwd
			}
			ref.Settings = si.Settings
		}
	}
	return ref
}
