package edge

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/mcp-subagent/mcp-subagent/edge/tokens"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
)

// loopbackHosts is what a listener bound to loopback answers to: the
// names localhost, 127.0.0.1 and [::1] (and the address it is bound to),
// on its own port or with none. A browser page on any other name, even
// one that resolves to 127.0.0.1 (DNS rebinding), sends that name as its
// Host and Origin, and is refused: it is another site.
type loopbackHosts struct {
	ip   net.IP
	port string
}

// loopbackHostsOf is addr's loopbackHosts; nil when addr is not a TCP
// address on loopback (a listener with tokens on a public address answers
// whatever name its clients use).
func loopbackHostsOf(addr net.Addr) *loopbackHosts {
	ta, ok := addr.(*net.TCPAddr)
	if !ok || !ta.IP.IsLoopback() {
		return nil
	}
	return &loopbackHosts{ip: ta.IP, port: strconv.Itoa(ta.Port)}
}

// allowsName reports whether host (no port; IPv6 without brackets) is one
// of the loopback names.
func (h *loopbackHosts) allowsName(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.Equal(net.IPv4(127, 0, 0, 1)) || ip.Equal(net.IPv6loopback) || ip.Equal(h.ip))
}

// allowsHost reports whether a Host header names this listener: a loopback
// name with the listener's port or none.
func (h *loopbackHosts) allowsHost(hostport string) bool {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil { // no port
		host, port = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), ""
	}
	return (port == "" || port == h.port) && h.allowsName(host)
}

// allowsOrigin reports whether an Origin header is this listener's own
// origin: http(s) on a loopback name and the listener's port (the
// scheme's default port when it names none).
func (h *loopbackHosts) allowsOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return port == h.port && h.allowsName(u.Hostname())
}

type loopbackKey struct{}

// GuardHost refuses, on a listener bound to loopback (addr), every request
// whose Host is not one of the listener's loopback names, with 403 and what
// to use instead; it stands in front of every route the listener serves.
// A request it lets through carries the names in its context, for the
// view's Origin check. On any other listener it is next itself.
func GuardHost(next http.Handler, addr net.Addr) http.Handler {
	hosts := loopbackHostsOf(addr)
	if hosts == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hosts.allowsHost(r.Host) {
			http.Error(w, fmt.Sprintf("Forbidden: Host %q is not this server's name: it serves loopback only, as http://127.0.0.1:%s/ (or localhost, [::1]); a page on another name that resolves to 127.0.0.1 is refused",
				truncate.Head(r.Host, echoBytes), hosts.port), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), loopbackKey{}, hosts)))
	})
}

// ViewSameOrigin is the web view's Origin check for its state-changing
// requests: on a loopback listener the Origin must be the listener's own
// (a loopback name and its port), never merely the same as the request's
// Host, which a rebound name makes equal; elsewhere the Origin's host must
// be the request's Host.
func ViewSameOrigin(origin string, r *http.Request) bool {
	if hosts, ok := r.Context().Value(loopbackKey{}).(*loopbackHosts); ok {
		return hosts.allowsOrigin(origin)
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// BearerToken is the token of an Authorization header using the Bearer
// scheme, whose name is case-insensitive (RFC 9110 §11.1).
func BearerToken(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimLeft(tok, " ")
	return tok, tok != ""
}

// BearerGuard checks the Origin header (originAllowed) and, when tokens
// are required, the bearer token, an HTTP token of reg, and marks the
// request with its principal (which mcp-go passes on to the tool
// handlers: the request context is the calls'); with no tokens required
// the principal is "local".
func BearerGuard(next http.Handler, reg *tokens.Registry, required bool, originAllowed func(string) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" && !originAllowed(o) {
			http.Error(w, "Forbidden: origin not allowed", http.StatusForbidden)
			return
		}
		principal := "local"
		if required {
			principal = ""
			if tok, ok := BearerToken(r.Header.Get("Authorization")); ok {
				principal, _ = reg.Principal(tokens.HTTP, tok)
			}
			if principal == "" {
				w.Header().Set("WWW-Authenticate", `Bearer realm="mcp-subagent"`)
				http.Error(w, "Unauthorized: a valid bearer token is required", http.StatusUnauthorized)
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), principal)))
	})
}

// CallbackGuard resolves the request's callback token once and passes the
// child's identity on in the request's context, which mcp-go hands to the
// tool handlers. Nothing resolves it again later, so nothing can fall back
// to another identity when the token is revoked in between: the handlers
// then refuse the call.
func (s *Server) CallbackGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := BearerToken(r.Header.Get("Authorization"))
		ctx := r.Context()
		if ok {
			ctx, ok = s.ChildContext(ctx, tok)
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mcp-subagent-callback"`)
			http.Error(w, "Unauthorized: this endpoint serves subagents with a valid callback token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}
