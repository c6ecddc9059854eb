package extturn

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// LookPath finds an external CLI as exec.LookPath does, but on the PATH
// of env, the child's environment (a session's settings may give its own
// PATH), when env sets one; otherwise on the server's PATH.
func LookPath(file string, env []string) (string, error) {
	path, set := "", false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path, set = v, true // the last one wins, as for a process
		}
	}
	if !set || strings.Contains(file, "/") {
		return exec.LookPath(file)
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q: %w in the child's PATH (%s)", file, exec.ErrNotFound, path)
}
