package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/mcp-subagent/mcp-subagent/daemon"
)

// onTerminal reports whether r and w are both terminals: a person, not an
// MCP client, started serve.
func onTerminal(r io.Reader, w io.Writer) bool {
	rf, ok1 := r.(*os.File)
	wf, ok2 := w.(*os.File)
	return ok1 && ok2 && isTTY(rf) && isTTY(wf)
}

// banner tells a person who ran `serve` on a terminal what it is: it speaks
// MCP on stdin and stdout for a client to start, which daemon it relays
// to, how to register it, and any model without a key (the daemon's own
// warning goes to its log, which nobody at a terminal reads).
func banner(w io.Writer, cfg Config, dataDir string, daemonPID int) {
	fmt.Fprintf(w, "mcp-subagent speaks MCP on stdin/stdout, for a client to start (e.g. `claude mcp add -s user subagent -- mcp-subagent serve`; README, Setup); "+
		"it relays to the daemon pid %d of %s (log: %s). Ctrl-C ends this session; the daemon and its children go on.\n",
		daemonPID, dataDir, daemon.LogPath(dataDir))
	var missing []string
	for _, m := range resolveModels(cfg) {
		if m.APIKeyEnv != "" && os.Getenv(m.APIKeyEnv) == "" {
			missing = append(missing, fmt.Sprintf("%s (model %q)", m.APIKeyEnv, m.Name))
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(w, "warning: no API key: %s is empty here; in-process children fail until it is set in the client's environment for this server\n", strings.Join(missing, ", "))
	}
}

// goRunBinary reports whether path is a binary `go run` built in its
// temporary directory (…/go-build…/b001/exe/NAME), which it deletes when
// the run ends.
func goRunBinary(path string) bool {
	return filepath.Base(filepath.Dir(path)) == "exe" && strings.Contains(path, string(filepath.Separator)+"go-build")
}
