// Package seal owns the sealed tokens the server hands a client to carry
// back unchanged (an MCP requestState): AES-256-GCM under a key drawn at
// random for each Sealer (so for each server process), with a fresh random
// nonce for every token, so no key and nonce are ever used twice. A token
// opens only in the Sealer that sealed it, unaltered, before its expiry;
// Spend lets it be used once.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"
)

// The reasons a token does not open (or is not spent).
var (
	// ErrInvalid: the token was not sealed by this Sealer, or was altered
	// (a server restart makes every earlier token invalid).
	ErrInvalid = errors.New("it was not issued by this server process, or it was altered")
	// ErrExpired: the token's time ran out.
	ErrExpired = errors.New("it has expired")
	// ErrSpent: the token was used already.
	ErrSpent = errors.New("it was used already")
)

// MaxTokenBytes bounds the token Open reads: larger input is refused
// before it is decoded.
const MaxTokenBytes = 16 << 10

const version = 1

// Sealer seals and opens tokens under one random key.
type Sealer struct {
	aead    cipher.AEAD
	purpose []byte // authenticated with every token: one use's tokens do not open as another's
	now     func() time.Time

	mu    sync.Mutex
	spent map[string]time.Time // nonce → the token's expiry, until then
}

// New is a Sealer with a fresh random key; purpose names what its tokens
// are for, and binds them to it.
func New(purpose string) (*Sealer, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("seal: drawing a key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead, purpose: []byte(purpose), now: time.Now, spent: map[string]time.Time{}}, nil
}

// Seal returns payload sealed until expiry, as URL-safe base64 text.
func (s *Sealer) Seal(payload []byte, expiry time.Time) (string, error) {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("seal: drawing a nonce: %w", err)
	}
	plain := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(payload)), uint64(expiry.UnixNano()))
	plain = append(plain, payload...)
	out := append([]byte{version}, nonce...)
	out = s.aead.Seal(out, nonce, plain, s.aad())
	return base64.RawURLEncoding.EncodeToString(out), nil
}

func (s *Sealer) aad() []byte { return append([]byte{version}, s.purpose...) }

// Opened is a token that opened: its payload, and what Spend needs.
type Opened struct {
	Payload []byte
	Expiry  time.Time
	nonce   string
}

// Open authenticates token and returns its payload; ErrInvalid when it
// was not sealed here or was altered, ErrExpired after its expiry. Open
// does not use the token up: Spend does.
func (s *Sealer) Open(token string) (Opened, error) {
	if len(token) > MaxTokenBytes {
		return Opened{}, ErrInvalid
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(token)
	ns := s.aead.NonceSize()
	if err != nil || len(raw) < 1+ns+s.aead.Overhead()+8 || raw[0] != version {
		return Opened{}, ErrInvalid
	}
	nonce := raw[1 : 1+ns]
	plain, err := s.aead.Open(nil, nonce, raw[1+ns:], s.aad())
	if err != nil {
		return Opened{}, ErrInvalid
	}
	o := Opened{Payload: plain[8:], Expiry: time.Unix(0, int64(binary.BigEndian.Uint64(plain[:8]))), nonce: string(nonce)}
	if !s.now().Before(o.Expiry) {
		return Opened{}, ErrExpired
	}
	return o, nil
}

// Spend uses o up: ErrSpent when it was spent before. A spent token is
// remembered until its expiry, after which Open refuses it anyway.
func (s *Sealer) Spend(o Opened) error {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, exp := range s.spent {
		if !now.Before(exp) {
			delete(s.spent, n)
		}
	}
	if _, ok := s.spent[o.nonce]; ok {
		return ErrSpent
	}
	s.spent[o.nonce] = o.Expiry
	return nil
}
