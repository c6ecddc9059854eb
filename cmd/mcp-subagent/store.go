package main

import (
	"crypto/rand"
	"encoding/hex"
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

// instanceOwnerID names this instance in the store's claims: host, pid and
// a random part, so that `doctor --store` tells an operator which machine
// and process holds a lease, and a restarted process (same pid after a
// reboot, or in a container) is never taken for its predecessor.
func instanceOwnerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// daemonStoreStatus is the store line of `daemon status`: where the store
// lives (its password redacted) and this instance's owner id.
func (a *app) daemonStoreStatus() string {
	if a.storeStatus == "" {
		return ""
	}
	return a.storeStatus + "; this instance's owner id: " + a.owner
}
