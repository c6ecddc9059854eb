package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Agent is how an external agent's process (codex, claude, an ACP agent)
// and everything it starts are confined: the file-system policy of
// WorkspaceWrite, with the network open (the agent needs its API) and the
// agent's own state directories writable. The zero value confines
// nothing, as does Mode Unconfined.
type Agent struct {
	// Mode is WorkspaceWrite to confine; Off, Unconfined and zero apply
	// nothing, and ReadOnly is refused by Policy.
	Mode Mode
	// TempRoot is where the per-process temp dir ($TMPDIR, the tool
	// caches) is made and removed once the process is gone; zero: the
	// system's temp dir.
	TempRoot string
	// StateDirs are the agent's own state and config directories
	// (~/.codex, ~/.claude, ...): readable and writable, created (0700)
	// when missing, since Landlock grants only what exists.
	StateDirs []string
	// StateFiles are single state files (~/.claude.json): readable and
	// writable when they exist. A file the agent replaces by a rename
	// needs its directory among StateDirs instead.
	StateFiles []string
	// ReadRoots and WriteRoots are added as configured (write_roots,
	// read_roots of the provider's `confine`).
	ReadRoots, WriteRoots []string
	// Home is the home directory whose contents are unreadable but for
	// the workspace, Toolchains, the agent's install and its
	// state; zero: the server's $HOME (not the agent's, which the config
	// may point elsewhere).
	Home string
}

// Confined reports whether c confines.
func (c Agent) Confined() bool { return c.Mode.Confined() }

// Policy is the sandbox policy of an agent started from path (as given
// and as resolved) in dir, with the temp dir tmp (the caller makes and
// removes it): workspace-write with the network open, the state
// directories (created when missing) and WriteRoots writable, and the
// agent's installation readable (it may lie in the home directory). Only
// WorkspaceWrite is a mode for an agent: it must write its state.
func (c Agent) Policy(path, resolved, dir, tmp string) (Policy, error) {
	if c.Mode != WorkspaceWrite {
		return Policy{}, fmt.Errorf("mode %q: an agent is confined in %q only", c.Mode, WorkspaceWrite)
	}
	home := c.Home
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	p := Policy{Mode: WorkspaceWrite, Workspace: dir, TempDir: tmp, Network: true, Home: home,
		ReadRoots: append(installRoots(home, path, resolved), c.ReadRoots...)}
	for _, d := range c.StateDirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return p, fmt.Errorf("the agent's state directory: %w", err)
		}
		// A state directory taken from the agent's environment
		// (CODEX_HOME=$HOME) must not open the home directory or / to it.
		if real := evalOr(filepath.Clean(d)); real == "/" || (home != "" && within(evalOr(filepath.Clean(home)), real)) {
			return p, fmt.Errorf("the agent's state directory %s would make / or the home directory %s writable; point it (CODEX_HOME, CLAUDE_CONFIG_DIR, HOME) elsewhere", d, home)
		}
		p.WriteRoots = append(p.WriteRoots, d)
	}
	for _, f := range c.StateFiles {
		if _, err := os.Stat(f); err == nil {
			p.WriteRoots = append(p.WriteRoots, f)
		}
	}
	p.WriteRoots = append(p.WriteRoots, c.WriteRoots...)
	if p.Workspace == "" {
		// The agent's working directory is the server's: nothing to grant
		// beyond what is readable anyway.
		p.Workspace = tmp
	}
	return p, p.Check()
}

// installRoots are the directories the agent's executable needs readable:
// those of the executable as given and as resolved and, for an npm package,
// its node_modules tree (a launcher script loads its package and a native
// binary from a sibling package). They matter inside the home directory
// and the other unreadable trees (/root), and are harmless elsewhere; the
// home directory itself and / are never among them.
func installRoots(home, path, resolved string) []string {
	home = filepath.Clean(home)
	if real, err := filepath.EvalSymlinks(home); err == nil {
		home = real
	}
	var out []string
	add := func(d string) {
		if d != "/" && d != home && d != "." {
			out = append(out, d)
		}
	}
	for _, p := range []string{path, resolved} {
		if p == "" || !filepath.IsAbs(p) {
			continue
		}
		for _, q := range []string{p, evalOr(p)} {
			add(filepath.Dir(q))
			if i := strings.Index(q, "/node_modules/"); i >= 0 {
				add(q[:i+len("/node_modules")])
			}
		}
	}
	return out
}

// evalOr is p with symbolic links resolved, else p.
func evalOr(p string) string {
	if real, err := filepath.EvalSymlinks(p); err == nil {
		return real
	}
	return p
}

// AgentEnv is env with TMPDIR the per-process temp dir and the build
// tools' caches (GOCACHE, npm, pip, cargo) under it, so that neither the
// agent nor its commands write the user's. XDG_CACHE_HOME is left as the
// configuration gives it: agents keep their own caches there (opencode's
// installed model providers), granted as state directories.
func AgentEnv(p Policy, env []string) []string {
	out := p.Env(env)
	xdg := ""
	for _, kv := range env {
		if strings.HasPrefix(kv, "XDG_CACHE_HOME=") {
			xdg = kv
		}
	}
	kept := out[:0]
	for _, kv := range out {
		if !strings.HasPrefix(kv, "XDG_CACHE_HOME=") {
			kept = append(kept, kv)
		}
	}
	if xdg != "" {
		kept = append(kept, xdg)
	}
	return kept
}
