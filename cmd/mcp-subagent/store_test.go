package main

import (
	"strings"
	"testing"
)

// --store beats MCP_SUBAGENT_STORE beats the config's "store"; a value
// that is not a PostgreSQL URL is refused with its password redacted.
func TestResolveStore(t *testing.T) {
	cfg := Config{Store: "postgres://from-config/db"}
	t.Setenv(storeEnv, "")
	if got, err := resolveStore(serveOptions{}, Config{}); err != nil || got != "" {
		t.Errorf("nothing set = %q, %v; want the bbolt store", got, err)
	}
	if got, _ := resolveStore(serveOptions{}, cfg); got != cfg.Store {
		t.Errorf("config only = %q", got)
	}
	t.Setenv(storeEnv, "postgresql://from-env/db")
	if got, _ := resolveStore(serveOptions{}, cfg); got != "postgresql://from-env/db" {
		t.Errorf("env over config = %q", got)
	}
	if got, _ := resolveStore(serveOptions{store: "postgres://from-flag/db"}, cfg); got != "postgres://from-flag/db" {
		t.Errorf("flag over env = %q", got)
	}
	_, err := resolveStore(serveOptions{store: "postgre://u:hunter22@h/db"}, cfg)
	if err == nil || strings.Contains(err.Error(), "hunter22") || !strings.Contains(err.Error(), "--store") {
		t.Errorf("a mistyped URL = %v; want a refusal naming --store, without the password", err)
	}
}
