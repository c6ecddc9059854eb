package main

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/mcp-subagent/mcp-subagent/edge/tokens"
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
		tok = tokens.MintHTTP()
		fmt.Fprintf(stderr, "mcp-subagent: serve --http without http.tokens: clients send the header \"Authorization: Bearer %s\" (a token for this --ephemeral run only)\n", tok)
	} else {
		path := filepath.Join(a.dataDir, httpTokenFile)
		var err error
		if tok, err = tokens.LoadFile(path); err != nil {
			return hc, err
		}
		a.log.Info("serve --http without http.tokens: clients send \"Authorization: Bearer <token>\" with the token in token_file", "token_file", path, "principal", "local")
	}
	hc.Tokens = []TokenConfig{{Principal: "local", Token: tok}}
	return hc, nil
}
