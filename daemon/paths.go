package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// maxSocketPath is what fits a sockaddr_un's sun_path with its NUL.
const maxSocketPath = 104

// checkOwners is a test hook: false turns off the socket directory's owner
// check and the relay's check of the daemon's uid, so that a test can show
// that the probes they stop do work.
var checkOwners = true

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

// socketDir makes the directory the socket of dataDir lives in, ready to
// listen in. The data directory is made by Listen. The fallback under the
// system's temporary directory has a name any local user can guess and
// create first, and whoever owns it can swap the socket for their own and
// read every prompt: it is made 0700 when absent and, whoever made it,
// used only when it is a real directory of ours with mode 0700.
func socketDir(dataDir, path string) error {
	dir := filepath.Dir(path)
	if dir == filepath.Clean(dataDir) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return fmt.Errorf("socket directory %s: %w", dir, err)
	}
	switch err := os.Mkdir(dir, 0o700); {
	case err == nil:
		if err := os.Chmod(dir, 0o700); err != nil { // whatever the umask
			return fmt.Errorf("socket directory %s: %w", dir, err)
		}
	case !errors.Is(err, os.ErrExist):
		return fmt.Errorf("socket directory %s: %w", dir, err)
	}
	return checkPrivateDir(dir)
}

// checkPrivateDir says why dir may not hold our socket, or nil: it must be
// a directory, not a symlink, owned by our uid, with mode 0700.
func checkPrivateDir(dir string) error {
	if !checkOwners {
		return nil
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("socket directory %s: %w", dir, err)
	}
	uid := os.Getuid()
	const fix = "another user may have made it to receive your sessions: remove it, or give the data directory a shorter path (its socket then lives inside it), or set TMPDIR to a directory of your own"
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("refusing the socket directory %s: it is a symlink, not a directory of uid %d; %s", dir, uid, fix)
	case !fi.IsDir():
		return fmt.Errorf("refusing the socket directory %s: it is not a directory; %s", dir, fix)
	case !ok:
		return fmt.Errorf("refusing the socket directory %s: its owner cannot be read", dir)
	case int(st.Uid) != uid:
		return fmt.Errorf("refusing the socket directory %s: it is owned by uid %d, not by you (uid %d); %s", dir, st.Uid, uid, fix)
	case fi.Mode().Perm() != 0o700:
		return fmt.Errorf("refusing the socket directory %s: it has mode %#o, not 0700; %s", dir, fi.Mode().Perm(), fix)
	}
	return nil
}
