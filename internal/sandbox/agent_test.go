package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// An npm-installed agent in the home directory: the launcher's bin dir, the
// package it links to and the node_modules tree around it are readable;
// the home directory itself is not among them.
func TestAgentInstallInTheHomeDirectoryIsReadable(t *testing.T) {
	home := t.TempDir()
	pkg := filepath.Join(home, ".npm-prefix", "lib", "node_modules", "@acme", "agent")
	bin := filepath.Join(home, ".npm-prefix", "bin")
	for _, d := range []string{filepath.Join(pkg, "dist"), bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(pkg, "dist", "index.js"), []byte("#!/usr/bin/env node\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(bin, "agent")
	if err := os.Symlink("../lib/node_modules/@acme/agent/dist/index.js", link); err != nil {
		t.Fatal(err)
	}
	p, err := Agent{Mode: WorkspaceWrite, Home: home, StateDirs: []string{filepath.Join(home, ".agent")}}.
		Policy(link, link, t.TempDir(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{bin, filepath.Join(pkg, "dist"), filepath.Join(home, ".npm-prefix", "lib", "node_modules")} {
		if !slices.Contains(p.ReadRoots, want) {
			t.Errorf("read roots %q lack %s", p.ReadRoots, want)
		}
	}
	if slices.Contains(p.ReadRoots, home) || slices.Contains(p.WriteRoots, home) {
		t.Errorf("the home directory itself is granted: read %q write %q", p.ReadRoots, p.WriteRoots)
	}
	if !p.Network || p.Mode != WorkspaceWrite || !slices.Contains(p.WriteRoots, filepath.Join(home, ".agent")) {
		t.Errorf("policy = %+v", p)
	}
	if _, err := os.Stat(filepath.Join(home, ".agent")); err != nil {
		t.Errorf("the state directory was not created: %v", err)
	}
}

func TestAStateDirectoryThatHoldsTheHomeDirectoryIsRefused(t *testing.T) {
	home := t.TempDir()
	for _, d := range []string{home, filepath.Dir(home), "/"} {
		_, err := Agent{Mode: WorkspaceWrite, Home: home, StateDirs: []string{d}}.Policy("/bin/sh", "/bin/sh", t.TempDir(), t.TempDir())
		if err == nil || !strings.Contains(err.Error(), "would make / or the home directory") {
			t.Errorf("state dir %s: err = %v", d, err)
		}
	}
}
