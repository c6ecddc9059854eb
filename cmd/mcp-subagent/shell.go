package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

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
		if err := sandbox.RemoveAll(dir); err != nil {
			log.Warn("removing a pruned child's tool caches failed", "agent_id", id, "path", dir, "err", err)
			continue
		}
		log.Info("removed a pruned child's tool caches", "agent_id", id, "path", dir)
	}
}

// goSeedDir is where the server keeps dataDir's Go build cache seed (see
// sandbox.SeedCache), and goSeedVersion the file beside it naming the Go
// it was built with.
func goSeedDir(dataDir string) string { return filepath.Join(dataDir, "sandbox", "seed", "go-build") }

func goSeedVersion(dataDir string) string { return goSeedDir(dataDir) + ".version" }

// warmGoSeed builds dataDir's Go build cache seed in the background, once
// children use run_shell (their first cache appears under the cache root,
// or one is there already: a server that never runs a confined command
// never spends the build), when `go` is on PATH and the seed is missing
// or of another Go: `go build std`
// into a fresh cache, run by the server (never by a child, so no child
// can plant an entry other children would use), then renamed into place.
// A child whose cache is made after that starts with a copy, and its
// first `go test` links instead of compiling the standard library (2m19s
// here without it, past run_shell's 60 s). stop cancels the build and
// waits for it.
func warmGoSeed(ctx context.Context, dataDir string, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := firstCache(ctx, filepath.Join(dataDir, "sandbox", "cache")); err != nil {
			if ctx.Err() == nil {
				log.Warn("not building the Go build cache seed for children", "err", err)
			}
			return
		}
		start := time.Now()
		built, err := buildGoSeed(ctx, dataDir)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("building the Go build cache seed for children failed: each child's first Go build compiles the standard library", "err", err)
		case built != "":
			log.Info("Go build cache seed ready: children's first Go builds start from it", "go", built, "path", goSeedDir(dataDir), "took", time.Since(start).Round(time.Millisecond))
		}
	}()
	return func() { cancel(); <-done }
}

// buildGoSeed does warmGoSeed's work; it returns the Go it built the seed
// with, "" when there was nothing to do.
func buildGoSeed(ctx context.Context, dataDir string) (string, error) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", nil // no Go, no seed
	}
	out, err := exec.CommandContext(ctx, gobin, "env", "GOVERSION", "GOOS", "GOARCH").Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	version := strings.Join(strings.Fields(string(out)), " ")
	seed := goSeedDir(dataDir)
	if b, err := os.ReadFile(goSeedVersion(dataDir)); err == nil && string(b) == version {
		if _, err := os.Stat(seed); err == nil {
			return "", nil
		}
	}
	if err := os.MkdirAll(filepath.Dir(seed), 0o700); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(seed), ".go-build-")
	if err != nil {
		return "", err
	}
	defer sandbox.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, gobin, "build", "std")
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOCACHE="+filepath.Join(tmp, "cache"), "GOTMPDIR=", "GOFLAGS="+os.Getenv("GOFLAGS"))
	// Its compilers go with it when the server stops.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build std: %w: %s", err, bytes.TrimSpace(out))
	}
	// The old seed (another Go) goes first; a child seeding from it at
	// that moment gets no seed, not half of one.
	_ = os.Remove(goSeedVersion(dataDir))
	old := tmp + ".old"
	if err := os.Rename(seed, old); err == nil {
		defer sandbox.RemoveAll(old)
	}
	if err := os.Rename(filepath.Join(tmp, "cache"), seed); err != nil {
		return "", err
	}
	return version, os.WriteFile(goSeedVersion(dataDir), []byte(version), 0o600)
}
