package proc

import (
	"os"
	"strings"
)

// HomeDir is the agent's home directory by its environment (HOME), else
// the server's.
func HomeDir(env []string) string {
	if h := Getenv(env, "HOME"); h != "" {
		return h
	}
	h, _ := os.UserHomeDir()
	return h
}

// Getenv is the value of name in env ("" when unset).
func Getenv(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val // the last one wins, as for exec
		}
	}
	return v
}

// CreateIfMissing creates the file path holding content (mode 0600) unless
// something is there already. A confined agent can write a state file only
// if it exists when the process starts: Landlock grants what exists, and
// the directory around it (the home directory) stays unwritable, so the
// agent could not create it (Claude Code's ~/.claude.json, which it then
// rewrites in place). A failure is the agent's to meet: it is ignored.
func CreateIfMissing(path, content string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return
	}
	_, _ = f.WriteString(content)
	_ = f.Close()
}
