package main

import (
	"fmt"
	"os"

	"github.com/mcp-subagent/mcp-subagent/persist/pgstore"
)

// storeEnv names the store's URL in the environment (below --store, above
// the config's "store").
const storeEnv = "MCP_SUBAGENT_STORE"

// resolveStore is the PostgreSQL URL the session store lives in: --store,
// else $MCP_SUBAGENT_STORE, else the config's "store"; "" keeps the bbolt
// file in the data directory. Anything but a postgres:// or postgresql://
// URL is refused, so a mistyped URL never falls back to a local store
// silently. The error shows the value with its password redacted.
func resolveStore(o serveOptions, cfg Config) (string, error) {
	url, from := o.store, "--store"
	if url == "" {
		url, from = os.Getenv(storeEnv), storeEnv
	}
	if url == "" {
		url, from = cfg.Store, `the config's "store"`
	}
	if url != "" && !pgstore.IsURL(url) {
		return "", fmt.Errorf("store %s (from %s) is not a postgres:// or postgresql:// URL; give a PostgreSQL URL, or leave it unset to keep the store in the data directory", pgstore.Redact(url), from)
	}
	return url, nil
}
