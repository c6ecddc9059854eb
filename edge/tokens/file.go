package tokens

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
)

// MintHTTP is a new HTTP bearer token: 256 random bits, URL-safe.
func MintHTTP() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand panics first)
	return "mcph_" + base64.RawURLEncoding.EncodeToString(b)
}

// LoadFile reads the HTTP bearer token kept in path, minting it there
// (0600) when the file does not exist, so a client's configuration
// survives a restart. A file another user owns, that others may read, or
// that is not a regular file (a symlink included) is refused, with what to
// do: its token would be no secret.
func LoadFile(path string) (string, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if errors.Is(err, fs.ErrNotExist) {
			tok, err := writeNew(path)
			if errors.Is(err, fs.ErrExist) {
				continue // another server minted it first: read theirs
			}
			return tok, err
		}
		if err != nil {
			return "", fmt.Errorf("the HTTP bearer token file %s: %w (it must be a regular file; delete it to mint a new token)", path, err)
		}
		tok, err := readOwn(f, path)
		f.Close()
		return tok, err
	}
}

// writeNew mints a token into path, which must not exist (fs.ErrExist
// when another server created it first).
func writeNew(path string) (string, error) {
	tok := MintHTTP()
	w, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return "", err
	}
	if err != nil {
		return "", fmt.Errorf("the HTTP bearer token file: %w", err)
	}
	_, err = io.WriteString(w, tok+"\n")
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return "", fmt.Errorf("writing the HTTP bearer token file %s: %w", path, err)
	}
	return tok, nil
}

// readOwn reads the token of an open token file, refusing one that is no
// secret.
func readOwn(f *os.File, path string) (string, error) {
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("the HTTP bearer token file %s: %w", path, err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("the HTTP bearer token file %s is not a regular file: delete it to mint a new token", path)
	case st != nil && int(st.Uid) != os.Geteuid():
		return "", fmt.Errorf("the HTTP bearer token file %s belongs to uid %d, not to this user: delete it to mint a new token", path, st.Uid)
	case fi.Mode().Perm()&0o077 != 0:
		return "", fmt.Errorf("the HTTP bearer token file %s may be read by others (mode %#o): run chmod 600 on it, or delete it to mint a new token", path, fi.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", fmt.Errorf("reading the HTTP bearer token file %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("the HTTP bearer token file %s must hold one token of at least 16 characters: delete it to mint a new one", path)
	}
	return tok, nil
}
