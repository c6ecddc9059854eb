package tokens

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The token file: minted 0600 on first use and reused; one another user
// owns, that others may read, that is a symlink or that holds no token is
// refused with what to do.
func TestTheTokenFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "http-token")
	tok, err := LoadFile(p)
	if err != nil || len(tok) < 40 || !strings.HasPrefix(tok, "mcph_") {
		t.Fatalf("minted %q, %v", tok, err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %#o, want 0600", fi.Mode().Perm())
	}
	if again, err := LoadFile(p); err != nil || again != tok {
		t.Errorf("second start read %q, %v; want the same token", again, err)
	}
	_ = os.Chmod(p, 0o644)
	if _, err := LoadFile(p); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a world-readable token file: %v; want refused naming chmod 600", err)
	}
	_ = os.Chmod(p, 0o600)
	link := filepath.Join(t.TempDir(), "http-token")
	_ = os.Symlink(p, link)
	if _, err := LoadFile(link); err == nil {
		t.Error("a symlinked token file was used")
	}
	short := filepath.Join(dir, "short")
	_ = os.WriteFile(short, []byte("abc\n"), 0o600)
	if _, err := LoadFile(short); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Errorf("a file holding no token: %v; want refused", err)
	}
	if os.Geteuid() == 0 {
		_ = os.Chown(p, 65534, 65534)
		if _, err := LoadFile(p); err == nil || !strings.Contains(err.Error(), "uid 65534") {
			t.Errorf("a token file of another user: %v; want refused", err)
		}
	}
	if a, b := MintHTTP(), MintHTTP(); a == b {
		t.Error("two minted tokens are equal")
	}
}
