package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// httpTokenFile is the name, in the data directory, of the bearer token
// serve --http requires when the config names no http.tokens.
const httpTokenFile = "http-token"

// httpAuth is hc with the bearer token serve --http requires when the
// config names none. Loopback is not an identity: every local user can
// connect to 127.0.0.1, while the daemon's socket checks the peer's uid.
// So tokenless HTTP would hand principal local (the stdio sessions'
// children, transcripts and sends) to every account on the machine.
// Instead, as Jupyter does, the server holds a token of its own, for
// principal local: only who can read the data directory (0700, the
// user's) can present it. With a data directory the token is kept in
// <data-dir>/http-token (0600, minted on first use, then reused so a
// client's configuration survives a restart; delete it to rotate); with
// --ephemeral it is minted for this run and printed once to stderr. It is
// never logged.
func (a *app) httpAuth(hc HTTPConfig, stderr io.Writer) (HTTPConfig, error) {
	if len(hc.Tokens) > 0 || a.insecure.anonymous {
		return hc, nil
	}
	var tok string
	if a.dataDir == "" {
		var err error
		if tok, err = mintHTTPToken(); err != nil {
			return hc, err
		}
		fmt.Fprintf(stderr, "mcp-subagent: serve --http without http.tokens: clients send the header \"Authorization: Bearer %s\" (a token for this --ephemeral run only)\n", tok)
	} else {
		path := filepath.Join(a.dataDir, httpTokenFile)
		var err error
		if tok, err = loadHTTPToken(path); err != nil {
			return hc, err
		}
		a.log.Info("serve --http without http.tokens: clients send \"Authorization: Bearer <token>\" with the token in token_file", "token_file", path, "principal", "local")
	}
	hc.Tokens = []TokenConfig{{Principal: "local", Token: tok}}
	return hc, nil
}

// mintHTTPToken is 256 random bits, URL-safe.
func mintHTTPToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("minting the HTTP bearer token: %w", err)
	}
	return "mcph_" + base64.RawURLEncoding.EncodeToString(b), nil
}

// loadHTTPToken reads the token in path, minting it there (0600) when the
// file does not exist. A file another user owns, that others may read, or
// that is not a regular file is refused: its token would be no secret.
func loadHTTPToken(path string) (string, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if errors.Is(err, fs.ErrNotExist) {
			tok, err := mintHTTPToken()
			if err != nil {
				return "", err
			}
			w, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
			if errors.Is(err, fs.ErrExist) {
				continue // another server minted it first: read theirs
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
		if err != nil {
			return "", fmt.Errorf("the HTTP bearer token file %s: %w (it must be a regular file; delete it to mint a new token)", path, err)
		}
		defer f.Close()
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
}
