package main

import (
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
)

func TestShellConfigTakesAModeABooleanOrAnObject(t *testing.T) {
	root := t.TempDir()
	for _, tc := range []struct {
		body string
		want ShellConfig
	}{
		{`{"shell": true}`, ShellConfig{Mode: "workspace-write"}},
		{`{"shell": false}`, ShellConfig{Mode: "off"}},
		{`{"shell": "read-only"}`, ShellConfig{Mode: "read-only"}},
		{`{"shell": "unconfined"}`, ShellConfig{Mode: "unconfined"}},
		{`{"shell": {"network": true, "read_roots": ["` + root + `"]}}`, ShellConfig{Network: true, ReadRoots: []string{root}}},
	} {
		c, err := loadConfig(writeConfig(t, tc.body))
		if err != nil {
			t.Errorf("%s: %v", tc.body, err)
			continue
		}
		if c.Shell == nil || c.Shell.Mode != tc.want.Mode || c.Shell.Network != tc.want.Network || len(c.Shell.ReadRoots) != len(tc.want.ReadRoots) {
			t.Errorf("%s: got %+v, want %+v", tc.body, c.Shell, tc.want)
		}
	}
}

func TestBadShellSettingsAreRefusedAtStartNamingTheField(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	for _, tc := range []struct{ body, want string }{
		{`{"shell": "sandboxed"}`, `shell.mode: unknown mode "sandboxed"`},
		{`{"shell": {"mode": "workspace_write"}}`, `shell.mode: unknown mode "workspace_write"`},
		{`{"shell": {"read_roots": ["relative/dir"]}}`, `shell.read_roots[0]: "relative/dir" is not an absolute path`},
		{`{"shell": {"read_roots": ["/no/such/dir/here"]}}`, `shell.read_roots[0]: "/no/such/dir/here": no such file or directory`},
		{`{"shell": {"write_roots": ["/"]}}`, `shell.write_roots[0]: "/" would make / or the home directory`},
		{`{"shell": {"write_roots": ["` + home + `"]}}`, `shell.write_roots[0]`},
		{`{"shell": {"mode": "read-only", "net": true}}`, `unknown field "net"`},
		{`{"shell": 3}`, `field "shell" must be of type one of boolean, string, object`},
	} {
		_, err := loadConfig(writeConfig(t, tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to contain %q", tc.body, err, tc.want)
		}
	}
}

func TestTheShellDefaultFollowsTheKernel(t *testing.T) {
	const why = "the kernel has no Landlock"
	for _, tc := range []struct {
		name    string
		cfg     *ShellConfig
		abi     int
		on      bool
		mode    sandbox.Mode
		status  string // a substring; "" with wantErr
		wantErr string
	}{
		{"absent with Landlock: workspace-write", nil, 7, true, sandbox.WorkspaceWrite, "workspace-write (Landlock ABI 7, no network)", ""},
		{"absent without Landlock: off, saying why", nil, 0, false, sandbox.Off, "off: " + why, ""},
		{"true without Landlock: an error, never unconfined", &ShellConfig{Mode: "workspace-write"}, 0, false, "", "", `shell: mode "workspace-write" needs Landlock, which this kernel lacks (` + why + `)`},
		{"read-only without Landlock: an error", &ShellConfig{Mode: "read-only"}, 0, false, "", "", "needs Landlock"},
		{"unconfined, only when asked", &ShellConfig{Mode: "unconfined"}, 0, true, sandbox.Unconfined, "unconfined", ""},
		{"off when asked", &ShellConfig{Mode: "off"}, 7, false, sandbox.Off, "off (configured)", ""},
		{"an object without a mode: workspace-write with the network", &ShellConfig{Network: true}, 4, true, sandbox.WorkspaceWrite, "network on", ""},
	} {
		set, err := resolveShell(tc.cfg, tc.abi, why)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err = %v, want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || set.On != tc.on || set.Policy.Mode != tc.mode || !strings.Contains(set.Status, tc.status) {
			t.Errorf("%s: got %+v, %v", tc.name, set, err)
		}
	}
}
