package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// maxSocketPath is what fits a sockaddr_un's sun_path with its NUL.
const maxSocketPath = 104

// SocketPath is where the daemon of dataDir listens.
func SocketPath(dataDir string) string {
	p := filepath.Join(dataDir, "daemon.sock")
	if len(p) < maxSocketPath {
		return p
	}
	sum := sha256.Sum256([]byte(dataDir))
	return filepath.Join(os.TempDir(), fmt.Sprintf("mcp-subagent-%d", os.Getuid()), hex.EncodeToString(sum[:8])+".sock")
}

// LockPath is the flock the daemon of dataDir holds for its life.
func LockPath(dataDir string) string { return filepath.Join(dataDir, "daemon.lock") }

// LogPath is where a daemon started by a session writes its logs.
func LogPath(dataDir string) string { return filepath.Join(dataDir, "daemon.log") }

// privateDir makes dir (and its parents) and sets it to 0700.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}
