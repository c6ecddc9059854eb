package codex

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// A child's Codex runs with --ignore-user-config: it loads none of the
// user's $CODEX_HOME/config.toml, so it starts none of the user's MCP
// servers (this server among them, under whatever name) and its callback's
// mcp_servers.subagent cannot clash with a user entry of that name.
// Without the user's config the project's .codex/config.toml is not
// trusted either, so its servers stay off too. What the child needs of the
// user's setup to reach its model is carried over as -c overrides, read
// here from the same file: the keys carried name the model and the way to
// it, and nothing that starts a program of the user's own except a model
// provider's own auth command.
//
// Auth needs nothing carried: auth.json (and the sessions a resume reads)
// stay in CODEX_HOME, which --ignore-user-config still uses.

// ignoreUserConfig is the flag that keeps Codex off the user's config.toml.
const ignoreUserConfig = "--ignore-user-config"

// carriedKey reports whether a top-level config.toml setting goes to the
// child: the model and its settings, the model provider and the provider
// tables, the base URLs of the built-in providers, and how and where the
// user's login is kept.
func carriedKey(k string) bool {
	switch k {
	case "model", "openai_base_url", "chatgpt_base_url",
		"cli_auth_credentials_store", "forced_login_method", "forced_chatgpt_workspace_id":
		return true
	}
	return strings.HasPrefix(k, "model_") // model_provider, model_providers, model_reasoning_effort, …
}

// userConfigPath is the config.toml the child's Codex would read as the
// child's environment sets it: $CODEX_HOME/config.toml, else
// $HOME/.codex/config.toml (a relative CODEX_HOME is taken from the
// child's cwd, where Codex runs). "" when neither is known.
func userConfigPath(env []string, cwd string) string {
	get := func(name string) string {
		v := ""
		for _, kv := range env { // the last wins, as in the child's environment
			if k, val, ok := strings.Cut(kv, "="); ok && k == name {
				v = val
			}
		}
		return v
	}
	if home := get("CODEX_HOME"); home != "" {
		if !filepath.IsAbs(home) && cwd != "" {
			home = filepath.Join(cwd, home)
		}
		return filepath.Join(home, "config.toml")
	}
	home := get("HOME")
	if home == "" {
		// Codex falls back to the account's home directory.
		if u, err := user.Current(); err == nil {
			home = u.HomeDir
		}
	}
	if home == "" {
		return ""
	}
	return filepath.Join(home, ".codex", "config.toml")
}

// carriedSettings reads the user's config.toml at path and returns the -c
// overrides (key=TOML value) that carry its model settings to a child (see
// carriedKey); with a legacy `profile = NAME` selector, the profile's own
// such settings follow and so win. No file: nothing to carry.
func carriedSettings(path string) ([]string, error) {
	if path == "" {
		return nil, nil
	}
	var root map[string]any
	md, err := toml.DecodeFile(path, &root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err // a toml.ParseError names the line
	}
	var out []string
	add := func(t map[string]any, prefix ...string) {
		for _, k := range topKeys(md, prefix) {
			if carriedKey(k) {
				out = append(out, k+"="+renderTOML(t[k]))
			}
		}
	}
	add(root)
	if name, ok := root["profile"].(string); ok && name != "" {
		if ps, ok := root["profiles"].(map[string]any); ok {
			if p, ok := ps[name].(map[string]any); ok {
				add(p, "profiles", name)
			}
		}
	}
	return out, nil
}

// topKeys lists the keys directly under the table at prefix, in the order
// the file gives them.
func topKeys(md toml.MetaData, prefix []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, k := range md.Keys() {
		if len(k) <= len(prefix) || !slices.Equal(k[:len(prefix)], prefix) {
			continue
		}
		if name := k[len(prefix)]; !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return out
}

// renderTOML writes a decoded value as one TOML value for -c: tables
// inline (keys sorted), arrays of tables as arrays of inline tables.
func renderTOML(v any) string {
	switch v := v.(type) {
	case string:
		return tomlString(v)
	case bool:
		return strconv.FormatBool(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		switch {
		case math.IsNaN(v):
			return "nan"
		case math.IsInf(v, 1):
			return "inf"
		case math.IsInf(v, -1):
			return "-inf"
		}
		s := strconv.FormatFloat(v, 'g', -1, 64)
		if !strings.ContainsAny(s, ".eEn") {
			s += ".0" // a float stays a float
		}
		return s
	case time.Time:
		// The decoder marks local dates and times by their zone's name.
		switch v.Location().String() {
		case "datetime-local":
			return v.Format("2006-01-02T15:04:05.999999999")
		case "date-local":
			return v.Format("2006-01-02")
		case "time-local":
			return v.Format("15:04:05.999999999")
		}
		return v.Format(time.RFC3339Nano)
	case []map[string]any:
		parts := make([]string, len(v))
		for i, t := range v {
			parts[i] = renderTOML(t)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = renderTOML(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		keys := slices.Sorted(maps.Keys(v))
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = renderKey(k) + " = " + renderTOML(v[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return tomlString(fmt.Sprint(v))
}

func renderKey(k string) string {
	if k != "" && strings.IndexFunc(k, func(r rune) bool { return !isBareKeyChar(r) }) < 0 {
		return k
	}
	return tomlString(k)
}

func isBareKeyChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}
