package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Mode is how far a command is confined.
type Mode string

const (
	// Off: no shell at all (the caller does not offer one).
	Off Mode = "off"
	// ReadOnly: reads as in WorkspaceWrite; writes only in the per-command
	// temp dir and the caches, not in the workspace.
	ReadOnly Mode = "read-only"
	// WorkspaceWrite: writes in the workspace, the temp dir, the caches and
	// WriteRoots; the default where the kernel can confine.
	WorkspaceWrite Mode = "workspace-write"
	// Unconfined: the command runs with the server's full authority. Only
	// ever explicit.
	Unconfined Mode = "unconfined"
)

// ParseMode returns the mode named s, or an error listing the valid ones.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Off, ReadOnly, WorkspaceWrite, Unconfined:
		return m, nil
	}
	return "", fmt.Errorf("unknown mode %q: use \"off\", \"read-only\", \"workspace-write\" or \"unconfined\"", s)
}

// Confined reports whether m is applied with Landlock and seccomp.
func (m Mode) Confined() bool { return m == ReadOnly || m == WorkspaceWrite }

// Policy is what one command may do. Paths are absolute.
type Policy struct {
	Mode Mode `json:"mode"`
	// Workspace is the command's working tree: readable, and writable in
	// WorkspaceWrite. Required when confined.
	Workspace string `json:"workspace"`
	// TempDir is the per-command temporary directory (TMPDIR), writable;
	// the caller creates it before and removes it after the command.
	// Required when confined.
	TempDir string `json:"temp_dir"`
	// CacheDir holds the tool caches (GOCACHE, npm, pip, cargo, XDG) of
	// the child, writable; see Env. Zero: the caches go in TempDir.
	CacheDir string `json:"cache_dir,omitempty"`
	// GoCacheSeed is a Go build cache the server filled (the standard
	// library), copied into CacheDir's go-build (see SeedCache) by the
	// caller when it makes CacheDir; zero or missing: none, the first
	// build compiles it.
	GoCacheSeed string `json:"go_cache_seed,omitempty"`
	// ReadRoots are readable besides the defaults (e.g. inside Home).
	ReadRoots []string `json:"read_roots,omitempty"`
	// WriteRoots are writable besides the workspace (WorkspaceWrite only).
	WriteRoots []string `json:"write_roots,omitempty"`
	// Network opens TCP and UDP (and the AF_INET, AF_INET6 and AF_NETLINK
	// socket families); off, only AF_UNIX sockets can be made.
	Network bool `json:"network,omitempty"`
	// Home is the server user's home directory, unreadable but for the
	// workspace, Toolchains and ReadRoots. Zero: $HOME, else the user's.
	Home string `json:"home,omitempty"`
}

// Toolchains are the places inside Home that stay readable (never
// writable): where language toolchains and user-installed tools live. None
// of them is where tools keep credentials; ~/.ssh, ~/.aws, ~/.config,
// ~/.netrc, ~/.gnupg, ~/.docker, ~/.kube, browser profiles and the rest of
// Home are not readable.
var Toolchains = []string{
	"go",             // GOPATH: module cache and installed binaries
	"sdk",            // golang.org/dl toolchains
	".rustup",        // Rust toolchains
	".cargo/bin",     // rustup proxies and cargo-installed binaries
	".nvm",           // Node versions
	".volta",         // Node versions
	".npm-global",    // npm prefix for global packages
	".bun/bin",       // Bun
	".deno/bin",      // Deno
	".local/bin",     // pip --user and pipx binaries
	".local/lib",     // pip --user packages
	".pyenv",         // Python versions
	".asdf/installs", // asdf-managed versions
	".asdf/shims",
	".local/share/mise/installs", // mise-managed versions
	".sdkman/candidates",         // JDKs, Gradle, Maven binaries
}

// Env returns env for the command: TMPDIR the temp dir, and the tool caches
// moved to CacheDir (or the temp dir), so that a command never writes the
// user's own caches and never fails for lack of a writable one.
func (p Policy) Env(env []string) []string {
	cache := p.CacheDir
	if cache == "" {
		cache = filepath.Join(p.TempDir, ".cache")
	}
	set := map[string]string{
		"TMPDIR":           p.TempDir,
		"GOCACHE":          filepath.Join(cache, "go-build"),
		"GOTMPDIR":         p.TempDir,
		"npm_config_cache": filepath.Join(cache, "npm"),
		"PIP_CACHE_DIR":    filepath.Join(cache, "pip"),
		"CARGO_HOME":       filepath.Join(cache, "cargo"),
		"XDG_CACHE_HOME":   filepath.Join(cache, "xdg"),
	}
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if _, ok := set[name]; !ok {
			out = append(out, kv)
		}
	}
	for _, name := range []string{"TMPDIR", "GOCACHE", "GOTMPDIR", "npm_config_cache", "PIP_CACHE_DIR", "CARGO_HOME", "XDG_CACHE_HOME"} {
		out = append(out, name+"="+set[name])
	}
	return out
}

// Check validates p for applying: a known mode and absolute paths, the
// required ones present. Its errors name the field.
func (p Policy) Check() error {
	if _, err := ParseMode(string(p.Mode)); err != nil {
		return fmt.Errorf("mode: %w", err)
	}
	if !p.Mode.Confined() {
		return nil
	}
	for _, f := range []struct{ name, path string }{{"workspace", p.Workspace}, {"temp_dir", p.TempDir}} {
		if f.path == "" {
			return fmt.Errorf("%s is required in mode %q", f.name, p.Mode)
		}
	}
	for _, f := range []struct {
		name  string
		paths []string
	}{{"workspace", []string{p.Workspace}}, {"temp_dir", []string{p.TempDir}}, {"cache_dir", []string{p.CacheDir}},
		{"home", []string{p.Home}}, {"read_roots", p.ReadRoots}, {"write_roots", p.WriteRoots}} {
		for _, path := range f.paths {
			if path != "" && !filepath.IsAbs(path) {
				return fmt.Errorf("%s: %q is not an absolute path", f.name, path)
			}
		}
	}
	// A workspace that holds the home directory would make all of it
	// writable (SSH keys, shell profiles, other projects): the sandbox
	// would confine nothing worth confining.
	if p.Mode == WorkspaceWrite {
		ws := filepath.Clean(p.Workspace)
		if real, err := filepath.EvalSymlinks(ws); err == nil {
			ws = real
		}
		if home := homeOf(p); ws == "/" || (home != "" && within(home, ws)) {
			return fmt.Errorf("workspace: %q is / or holds the home directory %s, which a confined command could then write (SSH keys, shell profiles); start the child in a project directory, or make the confinement \"unconfined\" explicitly", p.Workspace, home)
		}
	}
	return nil
}

// CheckRoots validates configured read_roots and write_roots: absolute,
// existing, and no write root that is / or contains home. Its errors name
// the field (prefix, e.g. "shell.").
func CheckRoots(prefix string, read, write []string, home string) error {
	for _, f := range []struct {
		name  string
		paths []string
	}{{"read_roots", read}, {"write_roots", write}} {
		for i, path := range f.paths {
			field := prefix + f.name + "[" + strconv.Itoa(i) + "]"
			if !filepath.IsAbs(path) {
				return fmt.Errorf("%s: %q is not an absolute path; give the full path", field, path)
			}
			if _, err := os.Stat(path); err != nil {
				return fmt.Errorf("%s: %q: %w", field, path, errors.Unwrap(err))
			}
			if f.name != "write_roots" {
				continue
			}
			clean := filepath.Clean(path)
			if real, err := filepath.EvalSymlinks(clean); err == nil {
				clean = real
			}
			if clean == "/" || (home != "" && within(home, clean)) {
				return fmt.Errorf("%s: %q would make / or the home directory %s writable; name a directory inside them instead", field, path, home)
			}
		}
	}
	return nil
}

// within reports whether path is dir or lies below it (both clean and absolute).
func within(path, dir string) bool {
	if dir == "/" {
		return true
	}
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// Encode is the policy as the supervisor takes it.
func (p Policy) Encode() string {
	b, _ := json.Marshal(p)
	return string(b)
}

// Decode reads a policy made by Encode and checks it.
func Decode(s string) (Policy, error) {
	var p Policy
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		return p, fmt.Errorf("sandbox policy: %w", err)
	}
	return p, p.Check()
}

// homeOf is p.Home or the user's home, cleaned and with symbolic links
// resolved; "" when there is none.
func homeOf(p Policy) string {
	h := p.Home
	if h == "" {
		h, _ = os.UserHomeDir()
	}
	if h == "" {
		return ""
	}
	h = filepath.Clean(h)
	if real, err := filepath.EvalSymlinks(h); err == nil {
		h = real
	}
	return h
}
