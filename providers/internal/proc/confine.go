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
