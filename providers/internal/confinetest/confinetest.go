// Package confinetest is the probe the external providers' tests run
// through a real agent to show that its confinement holds (and, with the
// same harness unconfined, that the probe itself works): a file written in
// the workspace, one written outside it, and a secret read under $HOME.
package confinetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeanthropic"
	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
)

// Secret is the planted secret's content.
const Secret = "PLANTED-SECRET-4417"

// Probe is one run's victims.
type Probe struct {
	// Home is the test's $HOME (the server's home, set with t.Setenv),
	// holding the secret in .ssh.
	Home string
	// SecretPath is the planted secret.
	SecretPath string
	// Escaped is a file the probe writes outside the workspace, in a temp
	// dir outside the home directory as well.
	Escaped string
}

// New plants the victims and points $HOME at a fresh home directory.
func New(t *testing.T) *Probe {
	t.Helper()
	p := &Probe{Home: t.TempDir()}
	t.Setenv("HOME", p.Home)
	if err := os.MkdirAll(filepath.Join(p.Home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	p.SecretPath = filepath.Join(p.Home, ".ssh", "id_probe")
	if err := os.WriteFile(p.SecretPath, []byte(Secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.Escaped = filepath.Join(t.TempDir(), "escaped.txt")
	return p
}

// InsideName is the file the probe writes in the workspace.
const InsideName = "inside.txt"

// Command is the shell command of the probe, run in the workspace: each
// step whatever the previous one did.
func (p *Probe) Command() string {
	return "echo inside > " + InsideName + "; echo escaped > " + p.Escaped + "; cat " + p.SecretPath + "; echo probe-end"
}

// Confined reports whether mode is expected to confine on this kernel:
// a confined mode needs Landlock, and a test of it skips without.
func Confined(t *testing.T, mode sandbox.Mode) bool {
	if !mode.Confined() {
		return false
	}
	if abi, reason := sandbox.ABI(); abi < 1 {
		t.Skip("no Landlock: " + reason)
	}
	return true
}

// Check asserts the probe's outcome: the workspace file written in every
// mode; confined, no file outside and no secret in what the agent saw
// (output: the tool's output as the model got it); unconfined, both.
func (p *Probe) Check(t *testing.T, workspace string, confined bool, output string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(workspace, InsideName)); err != nil {
		t.Errorf("the agent did not write in its workspace: %v (tool output %q)", err, output)
	}
	if !strings.Contains(output, "probe-end") {
		t.Errorf("the probe did not run to its end; tool output %q", output)
	}
	_, err := os.Stat(p.Escaped)
	escaped := err == nil
	leaked := strings.Contains(output, Secret)
	if confined {
		if escaped {
			t.Errorf("confined, the agent wrote outside its workspace: %s exists", p.Escaped)
		}
		if leaked {
			t.Errorf("confined, the agent read %s: %q", p.SecretPath, output)
		}
		return
	}
	if !escaped {
		t.Errorf("unconfined, the probe failed to write %s: the probe is broken (tool output %q)", p.Escaped, output)
	}
	if !leaked {
		t.Errorf("unconfined, the probe failed to read %s: the probe is broken (tool output %q)", p.SecretPath, output)
	}
}

// Anthropic starts a fake Anthropic Messages API whose model runs the
// probe with Claude Code's Bash tool and then says "probe done"; a request
// carrying followup gets "followup done". It is closed when the test ends.
func (p *Probe) Anthropic(t *testing.T, followup string) *fakeanthropic.Server {
	api := fakeanthropic.New(func(r fakeanthropic.Request) fakeanthropic.Reply {
		switch {
		case !r.IsAgentLoop():
			return fakeanthropic.Generic(r)
		case followup != "" && strings.Contains(r.Text(), followup):
			return fakeanthropic.Reply{Text: "followup done"}
		case len(r.ResultsOf("Bash")) > 0:
			return fakeanthropic.Reply{Text: "probe done"}
		}
		return fakeanthropic.Reply{ToolUses: []fakeanthropic.ToolUse{{Name: "Bash",
			Input: map[string]any{"command": p.Command(), "description": "run the probe"}}}}
	})
	t.Cleanup(api.Close)
	return api
}

// BashOutput is the output of the last Bash call the fake API saw.
func BashOutput(api *fakeanthropic.Server) string {
	var out string
	for _, r := range api.Requests() {
		for _, tr := range r.ResultsOf("Bash") {
			out = tr.Text
		}
	}
	return out
}

// FindCLI finds an agent's executable on PATH or in the npm prefix CI
// installs into ($MCP_SUBAGENT_NPM_PREFIX/bin); without one it skips, and
// fails under CI=true.
func FindCLI(t *testing.T, name, pkg string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if prefix := os.Getenv("MCP_SUBAGENT_NPM_PREFIX"); prefix != "" {
		p := filepath.Join(prefix, "bin", name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	msg := name + " not installed; .ci/run installs " + pkg + " (looked on PATH and in $MCP_SUBAGENT_NPM_PREFIX/bin)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: a missing CLI fails instead of skipping)")
	}
	t.Skip(msg)
	return ""
}
