package codex

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"
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
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	root, err := parseTOML(string(b))
	if err != nil {
		return nil, err
	}
	var out []string
	add := func(t *tomlTable) {
		for _, k := range t.keys {
			if carriedKey(k) {
				out = append(out, k+"="+t.vals[k].render())
			}
		}
	}
	add(root)
	if v := root.vals["profile"]; v != nil && v.raw != "" {
		name, err := decodeTOMLString(v.raw)
		if err != nil {
			return nil, fmt.Errorf("profile: %v", err)
		}
		if ps := root.vals["profiles"]; ps != nil && ps.table != nil {
			if p := ps.table.vals[name]; p != nil && p.table != nil {
				add(p.table)
			}
		}
	}
	return out, nil
}

// A tomlTable is a TOML table whose leaf values are kept as written: the
// child's Codex parses them again, so they need no interpreting here.
type tomlTable struct {
	keys []string // in order of appearance
	vals map[string]*tomlValue
}

// A tomlValue is one of: a value as written (raw), a table, or an array of
// tables.
type tomlValue struct {
	raw   string
	table *tomlTable
	array []*tomlTable
}

func newTable() *tomlTable { return &tomlTable{vals: map[string]*tomlValue{}} }

func (t *tomlTable) set(k string, v *tomlValue) {
	if _, ok := t.vals[k]; !ok {
		t.keys = append(t.keys, k)
	}
	t.vals[k] = v
}

// render writes v as a TOML value: tables inline.
func (v *tomlValue) render() string {
	switch {
	case v.table != nil:
		return v.table.render()
	case v.array != nil:
		parts := make([]string, len(v.array))
		for i, t := range v.array {
			parts[i] = t.render()
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return v.raw
}

func (t *tomlTable) render() string {
	parts := make([]string, len(t.keys))
	for i, k := range t.keys {
		parts[i] = renderKey(k) + " = " + t.vals[k].render()
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func renderKey(k string) string {
	if k != "" && strings.IndexFunc(k, func(r rune) bool { return !isBareKeyChar(byte(r)) || r >= utf8.RuneSelf }) < 0 {
		return k
	}
	return tomlString(k)
}

func isBareKeyChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// parseTOML reads a TOML document into tables of values as written. It
// knows TOML's structure (tables, arrays of tables, dotted and quoted keys)
// and where each value ends, not what the values mean.
func parseTOML(src string) (*tomlTable, error) {
	p := &tomlParser{s: src}
	root := newTable()
	cur := root
	for {
		p.skipBlank(true)
		if p.i >= len(p.s) {
			return root, nil
		}
		if p.s[p.i] == '[' {
			array := strings.HasPrefix(p.s[p.i:], "[[")
			p.i++
			if array {
				p.i++
			}
			p.skipBlank(false)
			path, err := p.key()
			if err != nil {
				return nil, err
			}
			p.skipBlank(false)
			closing := "]"
			if array {
				closing = "]]"
			}
			if !strings.HasPrefix(p.s[p.i:], closing) {
				return nil, p.errf("expected %q after a table header", closing)
			}
			p.i += len(closing)
			if cur, err = root.header(path, array); err != nil {
				return nil, p.errf("%v", err)
			}
		} else {
			path, err := p.key()
			if err != nil {
				return nil, err
			}
			raw, err := p.keyValue()
			if err != nil {
				return nil, err
			}
			if err := cur.assign(path, raw); err != nil {
				return nil, p.errf("%v", err)
			}
		}
		if err := p.endOfLine(); err != nil {
			return nil, err
		}
	}
}

// header finds or makes the table a [path] or [[path]] header opens.
func (t *tomlTable) header(path []string, array bool) (*tomlTable, error) {
	for i, k := range path {
		v := t.vals[k]
		last := i == len(path)-1
		switch {
		case last && array:
			if v == nil {
				v = &tomlValue{array: []*tomlTable{}}
				t.set(k, v)
			}
			if v.array == nil {
				return nil, fmt.Errorf("%s is not an array of tables", strings.Join(path, "."))
			}
			nt := newTable()
			v.array = append(v.array, nt)
			return nt, nil
		case v == nil:
			v = &tomlValue{table: newTable()}
			t.set(k, v)
		case v.array != nil && len(v.array) > 0:
			t = v.array[len(v.array)-1]
			continue
		case v.table == nil:
			return nil, fmt.Errorf("%s is not a table", strings.Join(path[:i+1], "."))
		}
		t = v.table
	}
	return t, nil
}

// assign sets a (dotted) key's value in t.
func (t *tomlTable) assign(path []string, raw string) error {
	for i, k := range path[:len(path)-1] {
		v := t.vals[k]
		if v == nil {
			v = &tomlValue{table: newTable()}
			t.set(k, v)
		}
		if v.table == nil {
			return fmt.Errorf("%s is not a table", strings.Join(path[:i+1], "."))
		}
		t = v.table
	}
	k := path[len(path)-1]
	if _, dup := t.vals[k]; dup {
		return fmt.Errorf("%s is defined twice", strings.Join(path, "."))
	}
	t.set(k, &tomlValue{raw: raw})
	return nil
}

type tomlParser struct {
	s string
	i int
}

func (p *tomlParser) errf(format string, a ...any) error {
	line := 1 + strings.Count(p.s[:min(p.i, len(p.s))], "\n")
	return fmt.Errorf("line %d: %s", line, fmt.Sprintf(format, a...))
}

// skipBlank skips spaces, tabs and comments, and with newlines also line
// ends.
func (p *tomlParser) skipBlank(newlines bool) {
	for p.i < len(p.s) {
		switch c := p.s[p.i]; {
		case c == ' ' || c == '\t':
			p.i++
		case c == '#':
			for p.i < len(p.s) && p.s[p.i] != '\n' {
				p.i++
			}
		case newlines && (c == '\n' || c == '\r'):
			p.i++
		default:
			return
		}
	}
}

// endOfLine expects nothing but a comment before the line's end.
func (p *tomlParser) endOfLine() error {
	p.skipBlank(false)
	if p.i < len(p.s) && p.s[p.i] == '\r' {
		p.i++
	}
	if p.i < len(p.s) && p.s[p.i] != '\n' {
		return p.errf("unexpected %q after a value", clip(strings.SplitN(p.s[p.i:], "\n", 2)[0], 40))
	}
	return nil
}

// key reads a (dotted) key: bare, "basic" or 'literal' parts.
func (p *tomlParser) key() ([]string, error) {
	var path []string
	for {
		p.skipBlank(false)
		if p.i >= len(p.s) {
			return nil, p.errf("expected a key")
		}
		switch c := p.s[p.i]; {
		case c == '"' || c == '\'':
			start := p.i
			if strings.HasPrefix(p.s[p.i:], `"""`) || strings.HasPrefix(p.s[p.i:], "'''") {
				return nil, p.errf("a key cannot be a multi-line string")
			}
			if err := p.value(); err != nil {
				return nil, err
			}
			k, err := decodeTOMLString(p.s[start:p.i])
			if err != nil {
				return nil, p.errf("%v", err)
			}
			path = append(path, k)
		case isBareKeyChar(c):
			start := p.i
			for p.i < len(p.s) && isBareKeyChar(p.s[p.i]) {
				p.i++
			}
			path = append(path, p.s[start:p.i])
		default:
			return nil, p.errf("expected a key, found %q", c)
		}
		p.skipBlank(false)
		if p.i < len(p.s) && p.s[p.i] == '.' {
			p.i++
			continue
		}
		return path, nil
	}
}

// keyValue reads "= value" after a key and returns the value as written.
func (p *tomlParser) keyValue() (string, error) {
	p.skipBlank(false)
	if p.i >= len(p.s) || p.s[p.i] != '=' {
		return "", p.errf("expected = after a key")
	}
	p.i++
	p.skipBlank(false)
	start := p.i
	if err := p.value(); err != nil {
		return "", err
	}
	return p.s[start:p.i], nil
}

// value moves past one value.
func (p *tomlParser) value() error {
	s := p.s
	if p.i >= len(s) {
		return p.errf("expected a value")
	}
	switch {
	case strings.HasPrefix(s[p.i:], `"""`) || strings.HasPrefix(s[p.i:], "'''"):
		q := s[p.i : p.i+3]
		j := p.i + 3
		for {
			if j >= len(s) {
				return p.errf("unterminated multi-line string")
			}
			if q[0] == '"' && s[j] == '\\' {
				j += 2
				continue
			}
			if strings.HasPrefix(s[j:], q) {
				j += 3
				// Up to two quotes right before the delimiter belong to the string.
				for n := 0; n < 2 && j < len(s) && s[j] == q[0]; n++ {
					j++
				}
				p.i = j
				return nil
			}
			j++
		}
	case s[p.i] == '"' || s[p.i] == '\'':
		q := s[p.i]
		j := p.i + 1
		for {
			if j >= len(s) || s[j] == '\n' {
				return p.errf("unterminated string")
			}
			if q == '"' && s[j] == '\\' {
				j += 2
				continue
			}
			if s[j] == q {
				p.i = j + 1
				return nil
			}
			j++
		}
	case s[p.i] == '[':
		p.i++
		for {
			p.skipBlank(true)
			if p.i < len(s) && s[p.i] == ']' {
				p.i++
				return nil
			}
			if err := p.value(); err != nil {
				return err
			}
			p.skipBlank(true)
			if p.i < len(s) && s[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(s) && s[p.i] == ']' {
				p.i++
				return nil
			}
			return p.errf("expected , or ] in an array")
		}
	case s[p.i] == '{':
		p.i++
		for first := true; ; first = false {
			p.skipBlank(true)
			if p.i < len(s) && s[p.i] == '}' && first {
				p.i++
				return nil
			}
			if _, err := p.key(); err != nil {
				return err
			}
			if _, err := p.keyValue(); err != nil {
				return err
			}
			p.skipBlank(true)
			if p.i < len(s) && s[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(s) && s[p.i] == '}' {
				p.i++
				return nil
			}
			return p.errf("expected , or } in an inline table")
		}
	}
	// A number, boolean or date-time: up to the next delimiter. A date may
	// be followed by a space and its time.
	end := func(j int) int {
		for j < len(s) && !strings.ContainsRune(" \t\r\n#,]}", rune(s[j])) {
			j++
		}
		return j
	}
	j := end(p.i)
	if j == p.i {
		return p.errf("expected a value")
	}
	if isDate(s[p.i:j]) && j+1 < len(s) && s[j] == ' ' && s[j+1] >= '0' && s[j+1] <= '9' {
		j = end(j + 1)
	}
	p.i = j
	return nil
}

func isDate(s string) bool {
	if len(s) != 10 || s[4] != '-' || s[7] != '-' {
		return false
	}
	for i, c := range []byte(s) {
		if i != 4 && i != 7 && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// decodeTOMLString decodes a one-line basic or literal TOML string.
func decodeTOMLString(raw string) (string, error) {
	if len(raw) < 2 || raw[0] != raw[len(raw)-1] || raw[0] != '"' && raw[0] != '\'' {
		return "", fmt.Errorf("%s is not a string", clip(raw, 40))
	}
	body := raw[1 : len(raw)-1]
	if raw[0] == '\'' {
		return body, nil
	}
	var b strings.Builder
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(body) {
			return "", fmt.Errorf("bad escape in %s", clip(raw, 40))
		}
		switch body[i] {
		case 'b':
			b.WriteByte('\b')
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'f':
			b.WriteByte('\f')
		case 'r':
			b.WriteByte('\r')
		case 'e':
			b.WriteByte(0x1b)
		case '"':
			b.WriteByte('"')
		case '\\':
			b.WriteByte('\\')
		case 'u', 'U':
			n := 4
			if body[i] == 'U' {
				n = 8
			}
			if i+1+n > len(body) {
				return "", fmt.Errorf("bad escape in %s", clip(raw, 40))
			}
			r, err := strconv.ParseUint(body[i+1:i+1+n], 16, 32)
			if err != nil || !utf8.ValidRune(rune(r)) {
				return "", fmt.Errorf("bad escape in %s", clip(raw, 40))
			}
			b.WriteRune(rune(r))
			i += n
		default:
			return "", fmt.Errorf("bad escape in %s", clip(raw, 40))
		}
	}
	return b.String(), nil
}
