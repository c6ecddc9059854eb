package main

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
)

// A provider entry may spell its kind "kind" (documented) or "type" (the
// older spelling), and give its command as an array or as a string with
// args: each form reaches the provider as the same program and
// arguments. The issue's own line is among them.
func TestProviderConfigForms(t *testing.T) {
	for _, c := range []struct {
		name, entry string
		kind, prog  string
		args        []string
	}{
		{"the issue's line: kind and a command array", `{"name": "qwen", "kind": "acp", "command": ["qwen", "--acp"]}`, "acp", "qwen", []string{"--acp"}},
		{"a command array of the program alone", `{"name":"q","kind":"acp","command":["qwen"]}`, "acp", "qwen", []string{}},
		{"the older type, command and args", `{"name":"g","type":"acp","command":"gemini","args":["--acp"]}`, "acp", "gemini", []string{"--acp"}},
		{"kind and type agreeing", `{"name":"c","kind":"codex","type":"codex"}`, "codex", "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := loadConfig(writeConfig(t, `{"providers":[`+c.entry+`]}`))
			if err != nil {
				t.Fatal(err)
			}
			pc := cfg.Providers[0]
			if pc.Kind != c.kind || pc.Command.program() != c.prog || !slices.Equal(pc.Args, c.args) {
				t.Errorf("kind %q, program %q, args %q; want %q, %q, %q", pc.Kind, pc.Command.program(), pc.Args, c.kind, c.prog, c.args)
			}
		})
	}
	// The line builds a working provider (the preset adds nothing
	// it already has).
	cfg, err := loadConfig(writeConfig(t, `{"providers":[{"name": "qwen", "kind": "acp", "command": ["sh", "-c", "exit 0"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := externalProviders(cfg.Providers, nil, slog.New(slog.DiscardHandler))
	if err != nil || len(ps) != 1 || ps[0].Name() != "qwen" {
		t.Fatalf("externalProviders: %v, %d providers", err, len(ps))
	}
}

// Conflicting or missing forms are refused, the error naming the field
// and what to do.
func TestProviderConfigConflictsAreRefused(t *testing.T) {
	for _, c := range []struct{ name, entry, want string }{
		{"kind and type differ", `{"name":"q","kind":"acp","type":"codex","command":"qwen"}`,
			`providers[0] (q): kind "acp" and type "codex" disagree; type is the older spelling of kind: keep kind and remove type`},
		{"a command array and args", `{"name":"q","kind":"acp","command":["qwen","--acp"],"args":["-y"]}`,
			`providers[0] (q): command is an array and args is set too; put the arguments in the command array after the program, and remove args`},
		{"no kind", `{"name":"q","command":"qwen"}`, `providers[0] (q): kind is missing; set "kind" to codex, claude-code or acp`},
		{"an empty command array", `{"name":"q","kind":"acp","command":[]}`, `field "providers[].command" minItems`},
		{"a command of another type", `{"name":"q","kind":"acp","command":7}`, `field "providers[].command" must be of type one of string, array`},
		{"an unknown kind", `{"name":"q","kind":"acpx","command":"qwen"}`, `field "providers[].kind" must be one of`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := loadConfig(writeConfig(t, `{"providers":[`+c.entry+`]}`))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

// permission "ask" and question_timeout_seconds: accepted for an acp and
// a claude-code provider; refused, naming the field, where they cannot
// apply.
func TestProviderPermissionAsk(t *testing.T) {
	build := func(entry string) error {
		cfg, err := loadConfig(writeConfig(t, `{"providers":[`+entry+`]}`))
		if err != nil {
			return err
		}
		_, err = externalProviders(cfg.Providers, nil, slog.New(slog.DiscardHandler))
		return err
	}
	if err := build(`{"name":"q","kind":"acp","command":["sh"],"permission":"ask","question_timeout_seconds":30}`); err != nil {
		t.Fatalf("acp with ask: %v", err)
	}
	if err := build(`{"name":"c","kind":"claude-code","command":"sh","permission":"ask","question_timeout_seconds":30}`); err != nil {
		t.Fatalf("claude-code with ask: %v", err)
	}
	for _, c := range []struct{ name, entry, want string }{
		{"ask on codex", `{"name":"c","kind":"codex","command":"sh","permission":"ask"}`, `providers[0] (c).permission "ask" is not supported for kind codex`},
		{"a timeout without ask", `{"name":"q","kind":"acp","command":["sh"],"question_timeout_seconds":30}`, `providers[0] (q).question_timeout_seconds is set but permission is "deny"`},
		{"a zero timeout", `{"name":"q","kind":"acp","command":["sh"],"permission":"ask","question_timeout_seconds":0}`, `question_timeout_seconds`},
		{"an unknown permission", `{"name":"q","kind":"acp","command":["sh"],"permission":"sometimes"}`, `field "providers[].permission" must be one of`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := build(c.entry); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

// spawn.permission "ask" gives the in-process children ask_user; its
// question timeout alone is refused, naming the setting.
func TestSpawnPermissionAsk(t *testing.T) {
	cfg, err := loadConfig(writeConfig(t, `{"spawn":{"permission":"ask","question_timeout_seconds":30}}`))
	if err != nil || cfg.Spawn.Permission != "ask" || cfg.Spawn.QuestionTimeoutSeconds != 30 {
		t.Fatalf("spawn ask: %+v, %v", cfg.Spawn, err)
	}
	for _, c := range []struct{ entry, want string }{
		{`{"spawn":{"question_timeout_seconds":30}}`, `spawn.question_timeout_seconds is set but spawn.permission is "deny"`},
		{`{"spawn":{"permission":"allow"}}`, `spawn.permission`},
	} {
		if _, err := loadConfig(writeConfig(t, c.entry)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to contain %q", c.entry, err, c.want)
		}
	}
}
