package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/mcp-subagent/mcp-subagent/daemon"
	"github.com/mcp-subagent/mcp-subagent/providers/spawn"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Settings per session. One daemon hosts every session of a data
// directory, and it was started with the environment of whichever session
// came first. So each relay sends its own settings in its hello (the
// variables below, those its config names, and the config file's path),
// and the children a session starts run with them: the model's address,
// key and id, and the session's config's models. A child records them in
// its descriptor (seam.Settings), so a follow-up from another session
// or a resume after a restart runs with them too; secret variables are
// recorded by name only, never by value.
//
// A secret's value is looked up when a child's driver is built: in the
// session that started it while that session is connected; else in the
// most recent connected session of the same principal that sets it; else
// in the daemon's own environment. When none has it, the model call fails
// with "no key is set: OPENAI_API_KEY (...)" saying where it was looked
// for.

// sessionVars are the variables that shape children, whatever the config
// says: the model API's address, key and model, and PATH and HOME, which
// external CLIs run with.
var sessionVars = []string{
	"OPENAI_BASE_URL", "OPENAI_API_KEY", "DEEPSEEK_API_KEY",
	"ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY",
	"MCP_SUBAGENT_MODEL", "PATH", "HOME",
}

// settingsNames are sessionVars and the variables cfg names: its models'
// and llm block's api_key_env, its providers' pass_env.
func settingsNames(cfg Config) []string {
	names := slices.Clone(sessionVars)
	if cfg.LLM.APIKeyEnv != "" {
		names = append(names, cfg.LLM.APIKeyEnv)
	}
	for _, m := range cfg.Models {
		if m.APIKeyEnv != "" {
			names = append(names, m.APIKeyEnv)
		}
	}
	for _, p := range cfg.Providers {
		if p.PassEnv != nil {
			names = append(names, *p.PassEnv...)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// relaySettings are this process's settings, for its hello: lookup reads
// its environment, configPath is its --config.
func relaySettings(cfg Config, configPath string, lookup func(string) (string, bool)) *daemon.Settings {
	s := &daemon.Settings{Names: settingsNames(cfg), Env: map[string]string{}}
	for _, name := range s.Names {
		if v, ok := lookup(name); ok {
			s.Env[name] = v
		}
	}
	s.Config = absConfig(configPath)
	keys := configKeys(cfg)
	for _, name := range s.Names {
		if isSecret(name, keys) {
			s.Secrets = append(s.Secrets, name)
		}
	}
	return s
}

func absConfig(path string) string {
	if path == "" {
		return ""
	}
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// isSecret reports whether a variable's value must never be stored: a
// key, a token, a password or the like, by its name; cfgKeys are the
// names the config gives keys in (api_key_env), whatever they are called.
func isSecret(name string, cfgKeys []string) bool {
	if slices.Contains(cfgKeys, name) {
		return true
	}
	u := strings.ToUpper(name)
	for _, w := range []string{"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH"} {
		if strings.Contains(u, w) {
			return true
		}
	}
	return false
}

// sessionSettings are the settings of the connected sessions, secrets
// included, in memory only.
type sessionSettings struct {
	mu   sync.Mutex
	seq  int
	open map[string]openSession // by session id
	// models caches each distinct settings' models (their clients hold
	// connection pools), by a hash of what they were built from.
	models map[string][]spawn.Model
}

type openSession struct {
	principal string
	env       map[string]string
	seq       int // larger: connected later
}

// maxModelSets bounds the cache: past it, it starts afresh.
const maxModelSets = 64

// opened records a connected session's settings and returns what its
// children record: the non-secret values, the secrets' names. end is
// called when the session ends.
func (r *sessionSettings) opened(id, principal string, s *daemon.Settings) (ms *seam.Settings, end func()) {
	if s == nil {
		return nil, func() {}
	}
	ms = &seam.Settings{Names: slices.Clone(s.Names), Config: s.Config, Session: id}
	for _, name := range s.Names {
		v, ok := s.Env[name]
		switch {
		case !ok:
		case isSecret(name, s.Secrets):
			ms.Secrets = append(ms.Secrets, name)
		default:
			if ms.Env == nil {
				ms.Env = map[string]string{}
			}
			ms.Env[name] = v
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.open == nil {
		r.open = map[string]openSession{}
	}
	r.seq++
	r.open[id] = openSession{principal: principal, env: s.Env, seq: r.seq}
	return ms, func() {
		r.mu.Lock()
		delete(r.open, id)
		r.mu.Unlock()
	}
}

// secret looks up a secret variable of settings s for a child of
// principal: the session s came from while it is connected, else the most
// recent connected session of principal that sets it, else the daemon's
// environment. from says where it was found, or where it was looked for.
func (r *sessionSettings) secret(principal string, s *seam.Settings, name string) (value, from string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if o, live := r.open[s.Session]; live {
		v, ok := o.env[name]
		return v, "from session " + s.Session, ok
	}
	best := -1
	var bestID string
	for id, o := range r.open {
		if _, has := o.env[name]; has && o.principal == principal && o.seq > best {
			best, bestID, value = o.seq, id, o.env[name]
		}
	}
	if best >= 0 {
		return value, fmt.Sprintf("from session %s, the latest connected session of principal %q that sets it (session %s that started the child is gone)", bestID, principal, s.Session), true
	}
	if v, ok := os.LookupEnv(name); ok {
		return v, fmt.Sprintf("from the daemon's environment (session %s that started the child is gone, and no connected session of principal %q sets it)", s.Session, principal), true
	}
	return "", fmt.Sprintf("looked up in session %s that started the child, which is gone, then in the connected sessions of principal %q and the daemon's environment", s.Session, principal), false
}

// env is how a child under settings s reads a variable: a secret by
// lookup, another of s.Names from s (unset when s does not set it), any
// other from the daemon's environment. from says where each secret was
// found (or looked for).
func (r *sessionSettings) env(principal string, s *seam.Settings) (getenv func(string) string, from func(string) string) {
	look := r.lookup(principal, s)
	froms := map[string]string{}
	getenv = func(name string) string {
		if slices.Contains(s.Secrets, name) {
			v, f, _ := r.secret(principal, s, name)
			froms[name] = f
			return v
		}
		v, _ := look(name)
		return v
	}
	from = func(name string) string {
		if f, ok := froms[name]; ok {
			return f
		}
		if slices.Contains(s.Names, name) {
			return "from session " + s.Session + ", which does not set it"
		}
		return ""
	}
	return getenv, from
}

// lookup is how a child under settings s reads a variable, as
// os.LookupEnv does (see env); external providers pass it on to the CLI.
func (r *sessionSettings) lookup(principal string, s *seam.Settings) func(string) (string, bool) {
	return func(name string) (string, bool) {
		if slices.Contains(s.Secrets, name) {
			v, _, ok := r.secret(principal, s, name)
			return v, ok
		}
		if slices.Contains(s.Names, name) {
			v, ok := s.Env[name]
			return v, ok
		}
		return os.LookupEnv(name)
	}
}

// modelNamesFor names the models of children under a session's
// settings, for the subagent tool that session lists; nil when they
// cannot be built (a call then gets the error naming the cause).
func (a *app) modelNamesFor(principal string, s *seam.Settings) []string {
	ms, err := a.modelsFor(principal, s)
	if err != nil {
		return nil
	}
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.Name
	}
	return names
}

// modelsFor are the models of children under a session's settings: the
// session's config's models (re-read, so an edited file counts; none when
// it named no config file) resolved with the session's variables. Models
// built from the same inputs are shared.
func (a *app) modelsFor(principal string, s *seam.Settings) ([]spawn.Model, error) {
	getenv, from := a.settings.env(principal, s)
	var raw []byte
	if s.Config != "" {
		var err error
		if raw, err = os.ReadFile(s.Config); err != nil {
			return nil, fmt.Errorf("the config file of the session that started this child: %v; restore it, or start the child from a session with another --config", err)
		}
	}
	// The key covers every input: the config's bytes and the variables,
	// key values included (hashed, in memory only), so the config is
	// parsed and the clients built only for settings not seen yet.
	h := sha256.New()
	h.Write(raw)
	for _, name := range s.Names {
		fmt.Fprintf(h, "\x00%s=%s\x00%s", name, getenv(name), from(name))
	}
	key := hex.EncodeToString(h.Sum(nil))
	r := &a.settings
	r.mu.Lock()
	ms, ok := r.models[key]
	r.mu.Unlock()
	if ok {
		return ms, nil
	}
	var cfg Config // a session that names no config file has none, whatever the daemon's
	if s.Config != "" {
		var err error
		if cfg, err = loadConfigEnv(s.Config, getenv); err != nil {
			return nil, fmt.Errorf("the config file of the session that started this child: %v", err)
		}
	}
	ms = buildModelsEnv(resolveModelsEnv(cfg, getenv), cfg.LLM, getenv, from, a.log.With("component", "llm", "session", s.Session))
	r.mu.Lock()
	if r.models == nil || len(r.models) >= maxModelSets {
		r.models = map[string][]spawn.Model{}
	}
	r.models[key] = ms
	r.mu.Unlock()
	return ms, nil
}

// configKeys are the variables cfg names as keys.
func configKeys(cfg Config) []string {
	var keys []string
	if cfg.LLM.APIKeyEnv != "" {
		keys = append(keys, cfg.LLM.APIKeyEnv)
	}
	for _, m := range cfg.Models {
		if m.APIKeyEnv != "" {
			keys = append(keys, m.APIKeyEnv)
		}
	}
	return keys
}
