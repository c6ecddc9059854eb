package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"sort"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
	"github.com/mcp-subagent/mcp-subagent/providers/acp"
	"github.com/mcp-subagent/mcp-subagent/providers/claudecode"
	"github.com/mcp-subagent/mcp-subagent/providers/codex"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// ProviderConfig is one external provider in the config file. After
// normalize, Kind holds the kind whichever spelling gave it, and Command
// the program with Args its arguments whichever form gave them.
type ProviderConfig struct {
	Name string `json:"name"`
	Kind string `json:"kind,omitempty"` // codex, claude-code, acp
	// Type is kind's older spelling, still accepted.
	Type string `json:"type,omitempty"`
	// Command is a string (the program; its arguments in Args) or an
	// array (the program, then its arguments).
	Command        commandLine       `json:"command,omitempty"`
	Args           []string          `json:"args,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	PassEnv        *[]string         `json:"pass_env,omitempty"`
	Model          string            `json:"model,omitempty"`
	Permission     string            `json:"permission,omitempty"` // deny (default), allow or ask (acp, claude-code)
	PermissionMode string            `json:"permission_mode,omitempty"`
	Sandbox        string            `json:"sandbox,omitempty"`
	// Confine is how the agent's process is confined (confine.go); nil:
	// the default.
	Confine        *ConfineConfig `json:"confine,omitempty"`
	TimeoutSeconds float64        `json:"timeout_seconds,omitempty"`
	// QuestionTimeoutSeconds is how long a question waits for the person
	// under permission "ask"; zero: 600.
	QuestionTimeoutSeconds float64 `json:"question_timeout_seconds,omitempty"`
}

// questionTimeout is how long a question waits under permission "ask".
func (pc ProviderConfig) questionTimeout() time.Duration {
	return time.Duration(pc.QuestionTimeoutSeconds * float64(time.Second))
}

// commandLine is a provider's command as the config gives it: a string,
// or an array whose first element is the program and the rest its
// arguments.
type commandLine struct {
	words []string
	array bool
}

func (c *commandLine) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*c = commandLine{words: []string{s}}
		return nil
	}
	var a []string
	if err := json.Unmarshal(b, &a); err != nil {
		return errors.New("command must be a string or an array of strings")
	}
	*c = commandLine{words: a, array: true}
	return nil
}

// program is the executable the command names; "" when none is given.
func (c commandLine) program() string {
	if len(c.words) == 0 {
		return ""
	}
	return c.words[0]
}

// normalize settles the spellings a provider entry may use: kind or its
// older spelling type (both given, they must agree), and command as an
// array or as a string beside args (not an array and args both). i is the
// entry's index, for the errors.
func (pc *ProviderConfig) normalize(i int) error {
	at := fmt.Sprintf("providers[%d]", i)
	if pc.Name != "" {
		at += " (" + pc.Name + ")"
	}
	switch {
	case pc.Kind != "" && pc.Type != "" && pc.Kind != pc.Type:
		return fmt.Errorf("%s: kind %q and type %q disagree; type is the older spelling of kind: keep kind and remove type", at, pc.Kind, pc.Type)
	case pc.Kind == "" && pc.Type == "":
		return fmt.Errorf("%s: kind is missing; set \"kind\" to codex, claude-code or acp", at)
	case pc.Kind == "":
		pc.Kind = pc.Type
	}
	pc.Type = ""
	if pc.Command.array {
		if len(pc.Args) > 0 {
			return fmt.Errorf("%s: command is an array and args is set too; put the arguments in the command array after the program, and remove args", at)
		}
		pc.Args = append([]string(nil), pc.Command.words[1:]...)
		pc.Command = commandLine{words: pc.Command.words[:1]}
	}
	return nil
}

// defaultPassEnv is what a child gets of the server's environment unless
// the config says otherwise.
var defaultPassEnv = []string{"PATH", "HOME"}

// childEnv builds a child's whole environment: the passed names, then the
// configured values.
func (pc ProviderConfig) childEnv() []string { return pc.childEnvWith(os.LookupEnv) }

// childEnvWith is childEnv reading the passed names with lookup (a
// session's settings).
func (pc ProviderConfig) childEnvWith(lookup func(string) (string, bool)) []string {
	pass := defaultPassEnv
	if pc.PassEnv != nil {
		pass = *pc.PassEnv
	}
	var env []string
	for _, name := range pass {
		if v, ok := lookup(name); ok {
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
//
// envFor, when set, reads a variable for a child started under a
// session's settings, so its passed variables (PATH, HOME, keys) are the
// session's.
func externalProviders(cfgs []ProviderConfig, envFor func(principal string, s *seam.Settings) func(string) (string, bool), log *slog.Logger) ([]seam.Provider, error) {
	if cfgs == nil {
		for _, c := range []ProviderConfig{{Name: "codex", Kind: "codex"}, {Name: "claude-code", Kind: "claude-code"}} {
			cmd := map[string]string{"codex": "codex", "claude-code": "claude"}[c.Kind]
			if _, err := exec.LookPath(cmd); err == nil {
				cfgs = append(cfgs, c)
			}
		}
	}
	var out []seam.Provider
	abi, reason := sandbox.ABI()
	for i, pc := range cfgs {
		if pc.Name == "spawn" || pc.Name == "fork" {
			return nil, fmt.Errorf("config: providers[%d].name %q is taken by a built-in provider; choose another name", i, pc.Name)
		}
		if err := pc.normalize(i); err != nil { // done by loadConfig for a file's entries
			return nil, fmt.Errorf("config: %w", err)
		}
		timeout := time.Duration(pc.TimeoutSeconds * float64(time.Second))
		switch {
		case pc.Permission == "ask" && pc.Kind == "codex":
			// codex exec has no channel to ask through: it cancels elicitations
			// and takes no permission-prompt tool.
			return nil, fmt.Errorf("config: providers[%d] (%s).permission \"ask\" is not supported for kind codex (codex exec cannot hold a permission request open for an answer); use \"deny\" or \"allow\", or kind claude-code or acp", i, pc.Name)
		case pc.QuestionTimeoutSeconds < 0 || math.IsNaN(pc.QuestionTimeoutSeconds) || math.IsInf(pc.QuestionTimeoutSeconds, 0):
			return nil, fmt.Errorf("config: providers[%d] (%s).question_timeout_seconds must be a positive number of seconds (default 600)", i, pc.Name)
		case pc.QuestionTimeoutSeconds > 0 && pc.Permission != "ask":
			return nil, fmt.Errorf("config: providers[%d] (%s).question_timeout_seconds is set but permission is %q: it applies only with permission \"ask\"", i, pc.Name, cmp.Or(pc.Permission, "deny"))
		}
		var childEnvFor func(string, *seam.Settings) []string
		if envFor != nil {
			childEnvFor = func(principal string, s *seam.Settings) []string { return pc.childEnvWith(envFor(principal, s)) }
		}
		plog := log.With("provider", pc.Name)
		confine, err := resolveConfine(pc.Confine, i, abi, reason, plog)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		switch pc.Kind {
		case "codex":
			codexSandbox := pc.Sandbox
			if codexSandbox == "" && pc.Permission == "allow" {
				codexSandbox = "danger-full-access"
			}
			out = append(out, codex.New(codex.Options{Name: pc.Name, Command: pc.Command.program(), Args: pc.Args, Env: pc.childEnv(), EnvFor: childEnvFor,
				Model: pc.Model, Sandbox: codexSandbox, Confine: confine, Timeout: timeout, Logger: plog}))
		case "claude-code":
			mode := pc.PermissionMode
			if mode == "" && pc.Permission == "allow" {
				mode = "bypassPermissions"
			}
			out = append(out, claudecode.New(claudecode.Options{Name: pc.Name, Command: pc.Command.program(), Args: pc.Args, Env: pc.childEnv(), EnvFor: childEnvFor,
				Model: pc.Model, PermissionMode: mode, Ask: pc.Permission == "ask", QuestionTimeout: pc.questionTimeout(), Confine: confine, Timeout: timeout, Logger: plog}))
		case "acp":
			if pc.Command.program() == "" {
				return nil, fmt.Errorf("config: providers[%d] (%s): an acp provider needs a command, e.g. \"command\": [\"qwen\", \"--acp\"]", i, pc.Name)
			}
			perm := acp.PermissionDeny
			switch pc.Permission {
			case "allow":
				perm = acp.PermissionAllow
			case "ask":
				perm = acp.PermissionAsk
			}
			p, err := acp.New(acp.Options{Name: pc.Name, Command: pc.Command.program(), Args: pc.Args, Env: pc.childEnv(), EnvFor: childEnvFor,
				Permission: perm, QuestionTimeout: pc.questionTimeout(),
				Confine: confine, Timeout: timeout, Logger: plog})
			if err != nil {
				return nil, fmt.Errorf("config: providers[%d] (%s): %w", i, pc.Name, err)
			}
			out = append(out, p)
		default:
			return nil, fmt.Errorf("config: providers[%d].kind %q: use codex, claude-code or acp", i, pc.Kind)
		}
	}
	return out, nil
}
