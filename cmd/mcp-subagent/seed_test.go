//go:build e2e && linux

package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeGo is a `go` that says its version and, for `build std`, leaves an
// entry in $GOCACHE and a line in $FAKE_GO_LOG.
const fakeGo = `#!/bin/sh
case "$1" in
env) echo "$FAKE_GO_VERSION"; echo linux; echo amd64 ;;
build) mkdir -p "$GOCACHE/ab" && echo std > "$GOCACHE/ab/abcd-d" && echo "build $GOCACHE" >> "$FAKE_GO_LOG" ;;
esac
`

// The server builds the Go cache seed only once a child has a cache, and
// then once per Go version: with the go on PATH, into a cache of its own
// that it renames into place.
func TestTheGoCacheSeedIsBuiltOnceChildrenUseTheShell(t *testing.T) {
	bin, data := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte(fakeGo), 0o755); err != nil {
		t.Fatal(err)
	}
	goLog := filepath.Join(t.TempDir(), "go.log")
	t.Setenv("PATH", bin+":/usr/bin:/bin")
	t.Setenv("FAKE_GO_LOG", goLog)
	t.Setenv("FAKE_GO_VERSION", "go1.99")
	if _, _, err := shellDirs(data); err != nil {
		t.Fatal(err)
	}
	builds := func() int {
		b, _ := os.ReadFile(goLog)
		return strings.Count(string(b), "build ")
	}
	seeded := func() bool {
		b, err := os.ReadFile(filepath.Join(goSeedDir(data), "ab", "abcd-d"))
		return err == nil && string(b) == "std\n"
	}

	stop := warmGoSeed(context.Background(), data, slog.New(slog.DiscardHandler))
	// No child has a cache: nothing is built (stopping ends the wait).
	stop()
	if n := builds(); n != 0 {
		t.Fatalf("built %d times with no child cache", n)
	}

	stop = warmGoSeed(context.Background(), data, slog.New(slog.DiscardHandler))
	if err := os.Mkdir(filepath.Join(data, "sandbox", "cache", "agent-1"), 0o700); err != nil {
		t.Fatal(err)
	}
	if !waitFor(30*time.Second, seeded) {
		t.Fatalf("no seed after a child's cache appeared; go log %d builds", builds())
	}
	stop()
	if b, _ := os.ReadFile(goSeedVersion(data)); string(b) != "go1.99 linux amd64" {
		t.Errorf("seed version %q", b)
	}
	// Same Go: no second build. Another Go: a new seed.
	if _, err := buildGoSeed(context.Background(), data); err != nil || builds() != 1 {
		t.Errorf("a second pass with the same Go: %v, %d builds; want 1", err, builds())
	}
	t.Setenv("FAKE_GO_VERSION", "go1.100")
	if v, err := buildGoSeed(context.Background(), data); err != nil || v != "go1.100 linux amd64" || builds() != 2 || !seeded() {
		t.Errorf("a newer Go: %q, %v, %d builds, seeded %v", v, err, builds(), seeded())
	}
	if left, _ := filepath.Glob(filepath.Join(data, "sandbox", "seed", ".go-build-*")); len(left) > 0 {
		t.Errorf("the build left %v", left)
	}
}
