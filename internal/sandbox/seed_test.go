package sandbox

import (
	"os"
	"path/filepath"
	"testing"
)

// A seeded cache is a copy: a command writing its own cache (even a file
// it first made writable) leaves the seed every other child copies as it
// was; and a cache that appeared meanwhile is kept, not mixed.
func TestSeedCacheCopiesSoAChildCannotWriteTheSeed(t *testing.T) {
	base := t.TempDir()
	seed := filepath.Join(base, "seed")
	if err := os.MkdirAll(filepath.Join(seed, "ab"), 0o755); err != nil {
		t.Fatal(err)
	}
	entry := filepath.Join("ab", "abcd-d")
	if err := os.WriteFile(filepath.Join(seed, entry), []byte("compiled fmt"), 0o444); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(base, "cache", "agent-1", "go-build")
	if err := SeedCache(dst, seed); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, entry)); err != nil || string(b) != "compiled fmt" {
		t.Fatalf("the seeded entry: %q, %v", b, err)
	}
	// The child poisons its own copy.
	_ = os.Chmod(filepath.Join(dst, entry), 0o644)
	if err := os.WriteFile(filepath.Join(dst, entry), []byte("poisoned"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(seed, entry)); string(b) != "compiled fmt" {
		t.Errorf("writing the child's cache changed the seed: %q", b)
	}
	// A second seeding of the same cache keeps what is there.
	if err := SeedCache(dst, seed); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, entry)); string(b) != "poisoned" {
		t.Errorf("a second seeding replaced the cache: %q", b)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(dst), ".go-build.seeding-*")); len(leftovers) > 0 {
		t.Errorf("seeding left %v", leftovers)
	}
	if err := SeedCache(filepath.Join(base, "cache", "agent-2", "go-build"), filepath.Join(base, "no-seed")); err == nil {
		t.Error("seeding from a missing seed succeeded")
	}
}
