// Package tokens owns the one registry of the secrets that establish who a
// caller of the edge is: serve --http's bearer tokens (each a root
// principal), the callback tokens of external children (each a child), and
// the web view's tokens (each a root principal). It mints them, resolves
// one to its principal or child, and revokes them, and it keeps the bearer
// token serve --http holds for itself in the data directory (file.go); it
// links no MCP library, so the web view uses it too.
//
// A token of one kind never resolves as another: an HTTP bearer token is
// no view token, and a callback token is never a principal's. Tokens are
// kept by their SHA-256 and checked with a constant-time compare, so how
// long a lookup takes tells nothing of a token's bytes.
package tokens

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Kind is what a token was minted for, and what it resolves as.
type Kind uint8

const (
	// HTTP is a bearer token of serve --http: a root principal's.
	HTTP Kind = iota + 1
	// Callback is an external child's callback token: the child's.
	Callback
	// View is the web view's token: a root principal's.
	View
)

func (k Kind) String() string {
	switch k {
	case HTTP:
		return "http"
	case Callback:
		return "callback"
	case View:
		return "view"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// entry is what one token resolves to.
type entry struct {
	kind      Kind
	token     []byte // compared in constant time once found
	principal string
	child     seam.ParentRef // Callback only
}

// Registry holds the live tokens of every kind: one map, one lock.
type Registry struct {
	mu      sync.Mutex
	byHash  map[[sha256.Size]byte]entry
	viewOf  map[string]string // principal → its view token (minted once, reused)
	closedV bool              // the view closed: its tokens are revoked and none is minted (RevokeView)
}

// New is an empty registry.
func New() *Registry {
	return &Registry{byHash: map[[sha256.Size]byte]entry{}, viewOf: map[string]string{}}
}

// Add registers a token the configuration gives (serve --http's bearer
// tokens, the token file's) for principal. An empty token or principal is
// refused.
func (r *Registry) Add(kind Kind, tok, principal string) error {
	if tok == "" || principal == "" {
		return fmt.Errorf("registering a %s token: the token and its principal are required", kind)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byHash[sha256.Sum256([]byte(tok))] = entry{kind: kind, token: []byte(tok), principal: principal}
	return nil
}

// MintCallback mints the callback token of external child self; revoke
// ends it (at the child's settlement).
func (r *Registry) MintCallback(self seam.ParentRef) (tok string, revoke func()) {
	var b [24]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics first)
	tok = "mcps_" + hex.EncodeToString(b[:])
	h := sha256.Sum256([]byte(tok))
	r.mu.Lock()
	r.byHash[h] = entry{kind: Callback, token: []byte(tok), child: self}
	r.mu.Unlock()
	return tok, func() { r.Revoke(tok) }
}

// ViewToken is principal's view token, minted on first use (128 random
// bits) and the same after, until the view's tokens are revoked.
func (r *Registry) ViewToken(principal string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closedV {
		return "", errors.New("the web view is closed")
	}
	if t, ok := r.viewOf[principal]; ok {
		return t, nil
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("minting a view token: %w", err)
	}
	t := base64.RawURLEncoding.EncodeToString(b)
	r.byHash[sha256.Sum256([]byte(t))] = entry{kind: View, token: []byte(t), principal: principal}
	r.viewOf[principal] = t
	return t, nil
}

// find is tok's entry when it is a live token of kind.
func (r *Registry) find(kind Kind, tok string) (entry, bool) {
	h := sha256.Sum256([]byte(tok))
	r.mu.Lock()
	e, ok := r.byHash[h]
	r.mu.Unlock()
	if !ok || subtle.ConstantTimeCompare(e.token, []byte(tok)) != 1 || e.kind != kind {
		return entry{}, false
	}
	return e, true
}

// Principal is the root principal tok names as a token of kind (HTTP or
// View); false for an unknown or revoked token, or one of another kind.
func (r *Registry) Principal(kind Kind, tok string) (string, bool) {
	if kind == Callback {
		return "", false
	}
	e, ok := r.find(kind, tok)
	return e.principal, ok
}

// Child is the external child callback token tok was minted for; false
// for an unknown or revoked token, or one of another kind.
func (r *Registry) Child(tok string) (seam.ParentRef, bool) {
	e, ok := r.find(Callback, tok)
	return e.child, ok
}

// Revoke ends tok, whatever its kind.
func (r *Registry) Revoke(tok string) {
	h := sha256.Sum256([]byte(tok))
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.byHash[h]; ok && e.kind == View {
		delete(r.viewOf, e.principal)
	}
	delete(r.byHash, h)
}

// RevokeView ends every view token; none is minted after (the view
// closed).
func (r *Registry) RevokeView() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closedV = true
	for h, e := range r.byHash {
		if e.kind == View {
			delete(r.byHash, h)
		}
	}
	clear(r.viewOf)
}
