package tokens

import (
	"crypto/sha256"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

func TestATokenResolvesUntilRevoked(t *testing.T) {
	r := New()
	if err := r.Add(HTTP, "http-secret-0123456789", "alice"); err != nil {
		t.Fatal(err)
	}
	if p, ok := r.Principal(HTTP, "http-secret-0123456789"); !ok || p != "alice" {
		t.Fatalf("the HTTP token resolves to %q, %v; want alice", p, ok)
	}
	child := seam.ParentRef{Principal: "alice", AgentID: "agent-1", Depth: 1}
	cb, revoke := r.MintCallback(child)
	if got, ok := r.Child(cb); !ok || got.AgentID != "agent-1" || got.Principal != "alice" {
		t.Fatalf("the callback token resolves to %+v, %v; want agent-1 of alice", got, ok)
	}
	view, err := r.ViewToken("bob")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := r.ViewToken("bob"); again != view {
		t.Errorf("bob's view token changed from %q to %q; it is minted once", view, again)
	}
	if p, ok := r.Principal(View, view); !ok || p != "bob" {
		t.Fatalf("the view token resolves to %q, %v; want bob", p, ok)
	}

	revoke()
	if _, ok := r.Child(cb); ok {
		t.Error("a revoked callback token still resolves")
	}
	r.Revoke("http-secret-0123456789")
	if _, ok := r.Principal(HTTP, "http-secret-0123456789"); ok {
		t.Error("a revoked HTTP token still resolves")
	}
	r.Revoke(view)
	if _, ok := r.Principal(View, view); ok {
		t.Error("a revoked view token still resolves")
	}
	if again, _ := r.ViewToken("bob"); again == view {
		t.Error("after its revocation bob's view token came back; want a new one")
	}
	r.RevokeView()
	if _, err := r.ViewToken("bob"); err == nil {
		t.Error("the view closed, but a view token was minted")
	}
}

// A token of one kind never resolves as another: an HTTP token is no view
// token and no child, a view token no HTTP token, a callback token no
// principal's.
func TestATokenOfOneKindNeverResolvesAsAnother(t *testing.T) {
	r := New()
	if err := r.Add(HTTP, "shared-looking-token-1", "alice"); err != nil {
		t.Fatal(err)
	}
	view, _ := r.ViewToken("alice")
	cb, _ := r.MintCallback(seam.ParentRef{Principal: "alice", AgentID: "agent-1", Depth: 1})

	if _, ok := r.Principal(View, "shared-looking-token-1"); ok {
		t.Error("an HTTP token resolved as a view token")
	}
	if _, ok := r.Child("shared-looking-token-1"); ok {
		t.Error("an HTTP token resolved as a callback token")
	}
	if _, ok := r.Principal(HTTP, view); ok {
		t.Error("a view token resolved as an HTTP token")
	}
	if _, ok := r.Child(view); ok {
		t.Error("a view token resolved as a callback token")
	}
	for _, k := range []Kind{HTTP, View, Callback} {
		if p, ok := r.Principal(k, cb); ok {
			t.Errorf("a callback token resolved as a %s principal %q", k, p)
		}
	}
	// Revoking one kind's token leaves the others.
	r.Revoke(cb)
	if _, ok := r.Principal(HTTP, "shared-looking-token-1"); !ok {
		t.Error("revoking a callback token ended an HTTP token")
	}
	if _, ok := r.Principal(View, view); !ok {
		t.Error("revoking a callback token ended a view token")
	}
}

// Only the whole token resolves: not a prefix, not an extension, not one
// that differs in its last byte; and the lookup compares the stored token
// in constant time after finding it by its hash, so an entry whose hash
// matches but whose bytes do not (a collision, planted here) resolves
// nothing.
func TestOnlyTheWholeTokenResolvesInConstantTime(t *testing.T) {
	r := New()
	const tok = "mcph_0123456789abcdef"
	if err := r.Add(HTTP, tok, "alice"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", tok[:len(tok)-1], tok + "0", tok[:len(tok)-1] + "0", "MCPH_0123456789abcdef"} {
		if p, ok := r.Principal(HTTP, bad); ok {
			t.Errorf("%q resolved to %q; only the whole token may", bad, p)
		}
	}
	// A planted collision: the entry under another token's hash.
	other := "mcph_fedcba9876543210"
	r.mu.Lock()
	r.byHash[sha256.Sum256([]byte(other))] = r.byHash[sha256.Sum256([]byte(tok))]
	r.mu.Unlock()
	if _, ok := r.Principal(HTTP, other); ok {
		t.Error("a token resolved by its hash alone; the stored token must match too")
	}
}

func TestAnEmptyTokenOrPrincipalIsRefused(t *testing.T) {
	r := New()
	if err := r.Add(HTTP, "", "alice"); err == nil {
		t.Error("an empty token was registered")
	}
	if err := r.Add(HTTP, "some-token-value", ""); err == nil {
		t.Error("a token with no principal was registered")
	}
}
