package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
)

// ShellConfig is the config's `shell`: a mode name ("off", "read-only",
// "workspace-write", "unconfined"), a boolean (true: "workspace-write",
// false: "off") or an object {mode, network, read_roots, write_roots}.
// Absent: "workspace-write" where the kernel can confine, else "off".
type ShellConfig struct {
	Mode       string   `json:"mode,omitempty"`
	Network    bool     `json:"network,omitempty"`
	ReadRoots  []string `json:"read_roots,omitempty"`
	WriteRoots []string `json:"write_roots,omitempty"`
}

// UnmarshalJSON takes the three forms.
func (s *ShellConfig) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("true")):
		*s = ShellConfig{Mode: string(sandbox.WorkspaceWrite)}
	case bytes.Equal(b, []byte("false")):
		*s = ShellConfig{Mode: string(sandbox.Off)}
	case len(b) > 0 && b[0] == '"':
		var m string
		if err := json.Unmarshal(b, &m); err != nil {
			return err
		}
		*s = ShellConfig{Mode: m}
	default:
		type plain ShellConfig
		var p plain
		if err := json.Unmarshal(b, &p); err != nil {
			return err
		}
		*s = ShellConfig(p)
	}
	return nil
}

// check refuses what is wrong whatever the kernel: an unknown mode, a
// relative or missing root, a write root that is / or holds the home
// directory. The errors name the field.
func (s *ShellConfig) check(home string) error {
	if s == nil {
		return nil
	}
	if s.Mode != "" {
		if _, err := sandbox.ParseMode(s.Mode); err != nil {
			return fmt.Errorf("shell.mode: %w", err)
		}
	}
	return sandbox.CheckRoots("shell.", s.ReadRoots, s.WriteRoots, home)
}

// shellSetting is the resolved `shell`: whether children get run_shell,
// and its policy.
type shellSetting struct {
	On     bool
	Policy sandbox.Policy // Mode, Network, roots; the rest per child and command
	ABI    int            // the kernel's Landlock ABI
	// Status says it in one line, for the log and `daemon status`.
	Status string
}

// resolveShell applies the default and the kernel: a confined mode on a
// kernel without Landlock is an error (never a silent unconfined shell);
// with none configured, such a kernel gets "off", with the reason.
func resolveShell(s *ShellConfig, abi int, reason string) (shellSetting, error) {
	var c ShellConfig
	if s != nil {
		c = *s
	}
	mode := sandbox.Mode(c.Mode)
	explicit := mode != ""
	if !explicit {
		mode = sandbox.WorkspaceWrite
		if abi < 1 {
			mode = sandbox.Off
		}
	}
	set := shellSetting{ABI: abi, On: mode != sandbox.Off,
		Policy: sandbox.Policy{Mode: mode, Network: c.Network, ReadRoots: c.ReadRoots, WriteRoots: c.WriteRoots}}
	switch {
	case mode.Confined() && abi < 1:
		return set, fmt.Errorf("shell: mode %q needs Landlock, which this kernel lacks (%s); set \"shell\" to \"off\", or to \"unconfined\" to let children's commands run with your full authority", mode, reason)
	case mode.Confined():
		net := "no network"
		if c.Network {
			net = "network on"
		}
		set.Status = fmt.Sprintf("%s (Landlock ABI %d, %s)", mode, abi, net)
	case mode == sandbox.Off && !explicit:
		set.Status = "off: " + reason
	case mode == sandbox.Off:
		set.Status = "off (configured)"
	default:
		set.Status = "unconfined: children's commands run with the server's full authority"
	}
	return set, nil
}

// shellFor resolves cfg's shell on this kernel and logs the outcome: the
// ABI, and a warning for an unconfined shell.
func shellFor(cfg Config, log *slog.Logger) (shellSetting, error) {
	abi, reason := sandbox.ABI()
	set, err := resolveShell(cfg.Shell, abi, reason)
	if err != nil {
		return set, fmt.Errorf("config: %w", err)
	}
	switch {
	case set.Policy.Mode == sandbox.Unconfined:
		log.Warn("shell is unconfined: children's commands can read, write and reach everything this server can", "landlock_abi", abi)
	case !set.On && cfg.Shell == nil:
		log.Warn("shell off: children get no run_shell", "reason", reason)
	default:
		log.Info("shell", "status", set.Status, "landlock_abi", abi)
	}
	return set, nil
}

// shellDirs are the per-command temp dirs' parent and the per-child cache
// root under the data directory ("" with --ephemeral: the system's temp
// dir, caches per command).
func shellDirs(dataDir string) (tmp, cache string, err error) {
	if dataDir == "" {
		return "", "", nil
	}
	tmp, cache = filepath.Join(dataDir, "sandbox", "tmp"), filepath.Join(dataDir, "sandbox", "cache")
	for _, d := range []string{tmp, cache} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", "", fmt.Errorf("shell: %w", err)
		}
	}
	return tmp, cache, nil
}

// removeChildCaches removes the tool caches of the children ids (pruned:
// gone from the store) under dataDir's sandbox cache root, so that a
// pruned child leaves no cache behind. An id that is not a plain file name
// has no cache (spawn gives none to such an id) and is skipped.
func removeChildCaches(dataDir string, ids []string, log *slog.Logger) {
	if dataDir == "" {
		return
	}
	root := filepath.Join(dataDir, "sandbox", "cache")
	for _, id := range ids {
		if id == "" || id == "." || id == ".." || filepath.Base(id) != id {
			continue
		}
		dir := filepath.Join(root, id)
		if _, err := os.Lstat(dir); err != nil {
			continue
		}
		if err := removeAll(dir); err != nil {
			log.Warn("removing a pruned child's tool caches failed", "agent_id", id, "path", dir, "err", err)
			continue
		}
		log.Info("removed a pruned child's tool caches", "agent_id", id, "path", dir)
	}
}

// removeAll is os.RemoveAll, also where a command took away the write
// permission of directories in dir (Go's module cache is read-only).
func removeAll(dir string) error {
	if os.RemoveAll(dir) == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
