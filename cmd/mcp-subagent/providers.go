package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"time"

	"github.com/mcp-subagent/mcp-subagent/providers/acp"
	"github.com/mcp-subagent/mcp-subagent/providers/claudecode"
	"github.com/mcp-subagent/mcp-subagent/providers/codex"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// ProviderConfig is one external provider in the config file.
type ProviderConfig struct {
	Name           string            `json:"name"`
	Type           string            `json:"type"` // codex, claude-code, acp
	Command        string            `json:"command,omitempty"`
	Args           []string          `json:"args,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	PassEnv        *[]string         `json:"pass_env,omitempty"`
	Model          string            `json:"model,omitempty"`
	Permission     string            `json:"permission,omitempty"` // deny (default) or allow
	PermissionMode string            `json:"permission_mode,omitempty"`
	Sandbox        string            `json:"sandbox,omitempty"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty"`
}

// defaultPassEnv is what a child gets of the server's environment unless
// the config says otherwise.
var defaultPassEnv = []string{"PATH", "HOME"}

// childEnv builds a child's whole environment: the passed names, then the
// configured values.
func (pc ProviderConfig) childEnv() []string {
	pass := defaultPassEnv
	if pc.PassEnv != nil {
		pass = *pc.PassEnv
	}
	var env []string
	for _, name := range pass {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	keys := make([]string, 0, len(pc.Env))
	for k := range pc.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+pc.Env[k])
	}
	return env
}

// externalProviders builds the configured external providers; with none
// configured, codex and claude-code when their commands are on PATH.
func externalProviders(cfgs []ProviderConfig, log *slog.Logger) ([]seam.Provider, error) {
	if cfgs == nil {
		for _, c := range []ProviderConfig{{Name: "codex", Type: "codex"}, {Name: "claude-code", Type: "claude-code"}} {
			cmd := map[string]string{"codex": "codex", "claude-code": "claude"}[c.Type]
			if _, err := exec.LookPath(cmd); err == nil {
				cfgs = append(cfgs, c)
			}
		}
	}
	var out []seam.Provider
	for i, pc := range cfgs {
		if pc.Name == "spawn" || pc.Name == "fork" {
			return nil, fmt.Errorf("config: providers[%d].name %q is taken by a built-in provider; choose another name", i, pc.Name)
		}
		timeout := time.Duration(pc.TimeoutSeconds * float64(time.Second))
		plog := log.With("provider", pc.Name)
		switch pc.Type {
		case "codex":
			sandbox := pc.Sandbox
			if sandbox == "" && pc.Permission == "allow" {
				sandbox = "danger-full-access"
			}
			out = append(out, codex.New(codex.Options{Name: pc.Name, Command: pc.Command, Args: pc.Args, Env: pc.childEnv(),
				Model: pc.Model, Sandbox: sandbox, Timeout: timeout, Logger: plog}))
		case "claude-code":
			mode := pc.PermissionMode
			if mode == "" && pc.Permission == "allow" {
				mode = "bypassPermissions"
			}
			out = append(out, claudecode.New(claudecode.Options{Name: pc.Name, Command: pc.Command, Args: pc.Args, Env: pc.childEnv(),
				Model: pc.Model, PermissionMode: mode, Timeout: timeout, Logger: plog}))
		case "acp":
			if pc.Command == "" {
				return nil, fmt.Errorf("config: providers[%d] (%s): an acp provider needs a command", i, pc.Name)
			}
			perm := acp.PermissionDeny
			if pc.Permission == "allow" {
				perm = acp.PermissionAllow
			}
			p, err := acp.New(acp.Options{Name: pc.Name, Command: pc.Command, Args: pc.Args, Env: pc.childEnv(),
				Permission: perm, Timeout: timeout, Logger: plog})
			if err != nil {
				return nil, fmt.Errorf("config: providers[%d] (%s): %w", i, pc.Name, err)
			}
			out = append(out, p)
		default:
			return nil, fmt.Errorf("config: providers[%d].type %q: use codex, claude-code or acp", i, pc.Type)
		}
	}
	return out, nil
}
