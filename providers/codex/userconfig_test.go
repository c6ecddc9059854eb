package codex

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCarriedSettingsAreTheModelSettingsOfTheUsersConfig(t *testing.T) {
	path := writeConfig(t, `# the user's config
model = "gpt-x"   # a comment
model_reasoning_effort = 'high'
approval_policy = "on-request"
notify = ["/usr/bin/notify-send", "done"]
cli_auth_credentials_store = "keyring"
developer_instructions = """
[mcp_servers.hidden]
command = "not a table: inside a string"
"""
model_provider = "corp.eu"
model_providers.dotted.name = "Dotted"

[model_providers."corp.eu"]
name = "Corp EU"
base_url = "https://llm.corp.example/v1"
env_key = "CORP_KEY"
query_params = { api-version = "2025-01-01" }
retries = [
  1, # first
  2,
]
[model_providers."corp.eu".auth]
command = "/usr/local/bin/corp-token"

[mcp_servers.subagent]
command = "mcp-subagent"
args = ["--stdio"]

[mcp_servers.other]
command = "/opt/other"
env = { TOKEN = "x" }

[[hooks.on_start]]
command = "a"
[[hooks.on_start]]
command = "b"

[projects."/home/u/repo"]
trust_level = "trusted"

[tui]
when = 1979-05-27 07:32:00Z
`)
	got, err := carriedSettings(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`model="gpt-x"`,
		`model_reasoning_effort="high"`,
		`cli_auth_credentials_store="keyring"`,
		`model_provider="corp.eu"`,
		`model_providers={"corp.eu" = {auth = {command = "/usr/local/bin/corp-token"}, base_url = "https://llm.corp.example/v1", env_key = "CORP_KEY", name = "Corp EU", query_params = {api-version = "2025-01-01"}, retries = [1, 2]}, dotted = {name = "Dotted"}}`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("carried:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, kv := range got {
		if strings.Contains(kv, "mcp_servers") || strings.Contains(kv, "notify") || strings.Contains(kv, "trust") {
			t.Errorf("carried %q", kv)
		}
	}
}

func TestALegacyProfilesModelSettingsFollowAndSoWin(t *testing.T) {
	path := writeConfig(t, `model = "base"
profile = "work"
[profiles.work]
model = "work-model"
model_provider = "corp"
approval_policy = "untrusted"
[profiles.home]
model = "home-model"
`)
	got, err := carriedSettings(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`model="base"`, `model="work-model"`, `model_provider="corp"`}
	if !slices.Equal(got, want) {
		t.Errorf("carried %q, want %q", got, want)
	}
}

func TestNoUserConfigCarriesNothing(t *testing.T) {
	got, err := carriedSettings(filepath.Join(t.TempDir(), "config.toml"))
	if err != nil || got != nil {
		t.Errorf("carried %q, %v", got, err)
	}
	if got, err := carriedSettings(""); err != nil || got != nil {
		t.Errorf("no path: carried %q, %v", got, err)
	}
}

func TestAMalformedUserConfigIsAnErrorWithItsLine(t *testing.T) {
	for _, text := range []string{
		"model = \"x\"\nmodel_provider = \n",
		"model = \"unterminated\n",
		"[model_providers.x\n",
		"model = \"a\" model_provider = \"b\"\n",
		"model = \"a\"\nmodel = \"b\"\n",
		"x = \"\"\"never closed\n",
		"a = [1, 2\n",
		"a = {b = 1\n",
		"model = 1\n[model.x]\n",
	} {
		_, err := carriedSettings(writeConfig(t, text))
		if err == nil || !strings.Contains(err.Error(), "line ") {
			t.Errorf("%q: err = %v", text, err)
		}
	}
}

func TestUserConfigPathFollowsTheChildsEnvironment(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"HOME=/home/u"}, "/home/u/.codex/config.toml"},
		{[]string{"HOME=/home/u", "CODEX_HOME=/srv/codex"}, "/srv/codex/config.toml"},
		{[]string{"CODEX_HOME=/a", "CODEX_HOME=/b"}, "/b/config.toml"},
		{[]string{"CODEX_HOME=rel"}, "/work/dir/rel/config.toml"},
	} {
		if got := userConfigPath(c.env, "/work/dir"); got != c.want {
			t.Errorf("%q: %q, want %q", c.env, got, c.want)
		}
	}
}

// renderedMeansTheSame checks that every top-level value of src, rendered
// for -c, decodes back to the value the file holds.
func renderedMeansTheSame(t *testing.T, src string) {
	var root map[string]any
	if _, err := toml.Decode(src, &root); err != nil {
		return
	}
	for k, v := range root {
		line := renderKey(k) + " = " + renderTOML(v)
		var back map[string]any
		if _, err := toml.Decode(line, &back); err != nil {
			t.Fatalf("%q renders as %q, which does not parse: %v", src, line, err)
		}
		if !reflect.DeepEqual(normalise(back[k]), normalise(v)) {
			t.Fatalf("%q: %s renders as %q, which reads back as %#v, not %#v", src, k, line, back[k], v)
		}
	}
}

// normalise makes decoded values comparable: NaN equal to NaN, times by
// instant and zone name.
func normalise(v any) any {
	switch v := v.(type) {
	case float64:
		if math.IsNaN(v) {
			return "NaN"
		}
	case time.Time:
		return v.Format(time.RFC3339Nano) + " " + v.Location().String()
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = normalise(e)
		}
		return out
	case []map[string]any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = normalise(e)
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			out[k] = normalise(e)
		}
		return out
	}
	return v
}

func TestRenderedValuesMeanWhatTheFileSaid(t *testing.T) {
	renderedMeansTheSame(t, `s = 'C:\path'
m = """two
lines"""
u = "\u00e9\U0001F600 \"q\""
i = 0x1F
f = 1e6
g = -0.0
n = nan
b = true
d = 1979-05-27
dt = 1979-05-27T07:32:00
tz = 1979-05-27T07:32:00-08:00
tm = 07:32:00.5
a = [1, [2, "x"], {k = "v"}]
"odd key" = {"a.b" = 1, c = {d = [true]}}
[[arr]]
x = 1
[[arr]]
y = "z"
`)
}

func FuzzRenderedValues(f *testing.F) {
	f.Add("a = 1\n[b.c]\nd = [1, {e = 'f'}]\n[[g]]\nh = \"\"\"x\"\"\"\n")
	f.Add("model_providers.\"x.y\".name = \"n\"\n")
	f.Add("t = 1979-05-27T07:32:00.999Z\nf = inf\n")
	f.Fuzz(renderedMeansTheSame)
}
