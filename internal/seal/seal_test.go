package seal

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"
)

func newSealer(t testing.TB, purpose string) *Sealer {
	t.Helper()
	s, err := New(purpose)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestASealedTokenOpensOnceBeforeItsExpiry(t *testing.T) {
	s := newSealer(t, "test")
	exp := time.Now().Add(time.Minute)
	tok, err := s.Seal([]byte("payload"), exp)
	if err != nil {
		t.Fatal(err)
	}
	o, err := s.Open(tok)
	if err != nil || string(o.Payload) != "payload" || !o.Expiry.Equal(time.Unix(0, exp.UnixNano())) {
		t.Fatalf("Open = %+v, %v", o, err)
	}
	if err := s.Spend(o); err != nil {
		t.Fatalf("first Spend: %v", err)
	}
	o2, err := s.Open(tok)
	if err != nil {
		t.Fatalf("a spent token still authenticates (Spend tells it was used): %v", err)
	}
	if err := s.Spend(o2); !errors.Is(err, ErrSpent) {
		t.Errorf("second Spend = %v, want ErrSpent", err)
	}
}

// Every token has its own nonce, and every Sealer its own key: the same
// payload never seals to the same bytes, and one Sealer's token does not
// open in another (a restarted server).
func TestKeysAndNoncesAreNeverReused(t *testing.T) {
	a, b := newSealer(t, "test"), newSealer(t, "test")
	exp := time.Now().Add(time.Minute)
	seen := map[string]bool{}
	nonces := map[string]bool{}
	for range 100 {
		tok, _ := a.Seal([]byte("same"), exp)
		raw, _ := base64.RawURLEncoding.DecodeString(tok)
		nonce := string(raw[1 : 1+a.aead.NonceSize()])
		if seen[tok] || nonces[nonce] {
			t.Fatal("a token or a nonce repeated")
		}
		seen[tok], nonces[nonce] = true, true
		if _, err := b.Open(tok); !errors.Is(err, ErrInvalid) {
			t.Fatalf("another Sealer opened the token: %v", err)
		}
	}
	if a.aead == b.aead {
		t.Fatal("two Sealers share a cipher")
	}
}

func TestAnAlteredTokenDoesNotOpen(t *testing.T) {
	s := newSealer(t, "test")
	tok, _ := s.Seal([]byte(`{"principal":"alice"}`), time.Now().Add(time.Minute))
	raw, _ := base64.RawURLEncoding.DecodeString(tok)
	for i := range raw {
		for _, bit := range []byte{0x01, 0x80} {
			alt := bytes.Clone(raw)
			alt[i] ^= bit
			if _, err := s.Open(base64.RawURLEncoding.EncodeToString(alt)); !errors.Is(err, ErrInvalid) {
				t.Fatalf("byte %d flipped: Open = %v, want ErrInvalid", i, err)
			}
		}
	}
	for _, bad := range []string{"", "!!!", tok[:len(tok)-1], tok + "A", strings.Repeat("A", MaxTokenBytes+1)} {
		if _, err := s.Open(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Open(%.20q…) = %v, want ErrInvalid", bad, err)
		}
	}
	other := newSealer(t, "other purpose")
	other.aead = s.aead // the same key, sealed for another use
	tok2, _ := other.Seal([]byte("x"), time.Now().Add(time.Minute))
	if _, err := s.Open(tok2); !errors.Is(err, ErrInvalid) {
		t.Errorf("a token of another purpose opened: %v", err)
	}
}

func TestAnExpiredTokenDoesNotOpen(t *testing.T) {
	s := newSealer(t, "test")
	now := time.Now()
	s.now = func() time.Time { return now }
	tok, _ := s.Seal([]byte("x"), now.Add(time.Second))
	if _, err := s.Open(tok); err != nil {
		t.Fatal(err)
	}
	s.now = func() time.Time { return now.Add(time.Second) }
	if _, err := s.Open(tok); !errors.Is(err, ErrExpired) {
		t.Errorf("Open at expiry = %v, want ErrExpired", err)
	}
}

// Spent tokens are forgotten once expired (Open refuses them then), so
// the record stays as small as the tokens still live.
func TestSpentTokensAreForgottenAfterTheirExpiry(t *testing.T) {
	s := newSealer(t, "test")
	now := time.Now()
	s.now = func() time.Time { return now }
	for range 10 {
		tok, _ := s.Seal([]byte("x"), now.Add(time.Second))
		o, _ := s.Open(tok)
		_ = s.Spend(o)
	}
	s.now = func() time.Time { return now.Add(2 * time.Second) }
	tok, _ := s.Seal([]byte("x"), now.Add(time.Hour))
	o, _ := s.Open(tok)
	if err := s.Spend(o); err != nil || len(s.spent) != 1 {
		t.Errorf("Spend = %v with %d remembered, want only the live one", err, len(s.spent))
	}
}

// FuzzOpen: no input makes Open panic, and nothing but a token sealed
// here opens; a sealed token opens to its payload.
func FuzzOpen(f *testing.F) {
	s := newSealer(f, "fuzz")
	tok, _ := s.Seal([]byte("seed"), time.Now().Add(time.Hour))
	f.Add(tok)
	f.Add("")
	f.Add("AQ")
	f.Add(tok[:len(tok)/2])
	f.Fuzz(func(t *testing.T, in string) {
		o, err := s.Open(in)
		if err == nil && (in != tok || string(o.Payload) != "seed") {
			t.Fatalf("Open(%q) opened to %q", in, o.Payload)
		}
		if err != nil && !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrExpired) {
			t.Fatalf("Open(%q) = %v", in, err)
		}
		sealed, err := s.Seal([]byte(in), time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if o, err := s.Open(sealed); err != nil || string(o.Payload) != in {
			t.Fatalf("round trip of %q: %q, %v", in, o.Payload, err)
		}
	})
}
