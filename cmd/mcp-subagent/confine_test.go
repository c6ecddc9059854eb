//go:build e2e

package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
)

func TestProviderConfineTakesAModeOrAnObject(t *testing.T) {
	root := t.TempDir()
	for _, tc := range []struct {
		confine string
		want    ConfineConfig
	}{
		{`"workspace-write"`, ConfineConfig{Mode: "workspace-write"}},
		{`"unconfined"`, ConfineConfig{Mode: "unconfined"}},
		{`{"write_roots": ["` + root + `"]}`, ConfineConfig{WriteRoots: []string{root}}},
	} {
		body := `{"providers": [{"name": "c", "type": "codex", "confine": ` + tc.confine + `}]}`
		c, err := loadConfig(writeConfig(t, body))
		if err != nil {
			t.Errorf("%s: %v", body, err)
			continue
		}
		got := c.Providers[0].Confine
		if got == nil || got.Mode != tc.want.Mode || len(got.WriteRoots) != len(tc.want.WriteRoots) {
			t.Errorf("%s: got %+v, want %+v", body, got, tc.want)
		}
	}
}

func TestBadProviderConfineIsRefusedAtStartNamingTheField(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	for _, tc := range []struct{ confine, want string }{
		{`"read-only"`, `providers[0].confine.mode: unknown mode "read-only"`},
		{`{"mode": "sandboxed"}`, `providers[0].confine.mode: unknown mode "sandboxed"`},
		{`{"read_roots": ["relative"]}`, `providers[0].confine.read_roots[0]: "relative" is not an absolute path`},
		{`{"write_roots": ["/no/such/dir/here"]}`, `providers[0].confine.write_roots[0]: "/no/such/dir/here": no such file or directory`},
		{`{"write_roots": ["/"]}`, `providers[0].confine.write_roots[0]: "/" would make / or the home directory`},
		{`{"write_roots": ["` + home + `"]}`, `providers[0].confine.write_roots[0]`},
		{`{"network": false}`, `unknown field "network"`},
		{`true`, `must be of type one of string, object`},
	} {
		body := `{"providers": [{"name": "c", "type": "codex", "confine": ` + tc.confine + `}]}`
		_, err := loadConfig(writeConfig(t, body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to contain %q", tc.confine, err, tc.want)
		}
	}
}

func TestTheConfineDefaultFollowsTheKernel(t *testing.T) {
	const why = "the kernel has no Landlock"
	for _, tc := range []struct {
		name    string
		cfg     *ConfineConfig
		abi     int
		mode    sandbox.Mode
		warn    bool
		wantErr string
	}{
		{"absent with Landlock: workspace-write", nil, 7, sandbox.WorkspaceWrite, false, ""},
		{"absent without Landlock: unconfined, with a warning", nil, 0, sandbox.Unconfined, true, ""},
		{"workspace-write without Landlock: an error, never unconfined", &ConfineConfig{Mode: "workspace-write"}, 0, "", false,
			`providers[2].confine: mode "workspace-write" needs Landlock, which this kernel lacks (` + why + `)`},
		{"unconfined when asked, with a warning", &ConfineConfig{Mode: "unconfined"}, 7, sandbox.Unconfined, true, ""},
		{"an object without a mode: workspace-write", &ConfineConfig{WriteRoots: []string{"/x"}}, 1, sandbox.WorkspaceWrite, false, ""},
	} {
		var logs bytes.Buffer
		a, err := resolveConfine(tc.cfg, 2, tc.abi, why, slog.New(slog.NewTextHandler(&logs, nil)))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err = %v, want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || a.Mode != tc.mode {
			t.Errorf("%s: got %+v, %v", tc.name, a, err)
		}
		if warned := strings.Contains(logs.String(), "level=WARN"); warned != tc.warn {
			t.Errorf("%s: warned %v, want %v: %s", tc.name, warned, tc.warn, logs.String())
		}
	}
}
