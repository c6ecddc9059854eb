package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// envAttackerRole picks what the attacker process does at envAttacker's
// path: "mkdir" makes the socket's directory (0777) and exits; "listen"
// plants a listener there, prints the first line a victim sends and
// answers a welcome; "dial" connects as a client and prints what the
// daemon says.
const envAttackerRole = "MCP_SUBAGENT_DAEMON_TEST_ROLE"

const attackerUID = 65534 // nobody

func attackerMain(path string) int {
	switch os.Getenv(envAttackerRole) {
	case "mkdir":
		if err := os.Mkdir(filepath.Dir(path), 0o777); err != nil {
			fmt.Println("mkdir:", err)
			return 1
		}
		_ = os.Chmod(filepath.Dir(path), 0o777)
		return 0
	case "dial":
		c, err := net.Dial("unix", path)
		if err != nil {
			fmt.Println("dial:", err)
			return 1
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		fmt.Print("daemon said: ", line)
		return 0
	}
	_ = os.Mkdir(filepath.Dir(path), 0o777)
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		fmt.Println("listen:", err)
		return 1
	}
	_ = os.Chmod(path, 0o777)
	fmt.Println("listening")
	c, err := ln.Accept()
	if err != nil {
		fmt.Println("accept:", err)
		return 1
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	fmt.Printf("got %q (%v)\n", line, err)
	fmt.Fprintln(c, `{"mcp_subagent":1,"version":"attacker","pid":1}`)
	c.Close()
	return 0
}

// attackScene is a root test's world with a second local user in it: a
// TMPDIR that user can reach, a data directory too long for its socket
// (so the socket falls back under TMPDIR), and a copy of the test binary
// that user may run.
type attackScene struct {
	dataDir, sock, bin string
}

func newAttackScene(t *testing.T) *attackScene {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root, to run a process as another uid")
	}
	// A TMPDIR like /tmp: anyone may make a directory in it.
	base := t.TempDir()
	if err := os.Chmod(base, 0o1777); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(filepath.Dir(base), 0o755) // t.TempDir's own parent, under the real TMPDIR
	t.Setenv("TMPDIR", base)
	dataDir := filepath.Join(base, strings.Repeat("d", maxSocketPath))
	sock := SocketPath(dataDir)
	if filepath.Dir(filepath.Dir(sock)) != base {
		t.Fatalf("the socket %s is not under TMPDIR %s", sock, base)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "daemon.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return &attackScene{dataDir: dataDir, sock: sock, bin: bin}
}

// attacker runs role as uid 65534 at path; it returns the process's
// output as it comes.
func (s *attackScene) attacker(t *testing.T, role, path string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(s.bin, "-test.run=^$")
	cmd.Env = []string{envAttacker + "=" + path, envAttackerRole + "=" + role}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: attackerUID, Gid: attackerUID}}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, bufio.NewReader(out)
}

func (s *attackScene) plantListener(t *testing.T) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd, out := s.attacker(t, "listen", s.sock)
	if line, err := out.ReadString('\n'); line != "listening\n" {
		t.Fatalf("the attacker did not listen: %q %v", line, err)
	}
	return cmd, out
}

func withoutOwnerChecks(t *testing.T) {
	checkOwners = false
	t.Cleanup(func() { checkOwners = true })
}

// Another user who makes the fallback socket directory first is refused:
// the daemon will not listen there. With the check off, the same user
// swaps the daemon's socket for a listener of their own and reads the
// next session's hello: the probe works.
func TestAnotherUsersSocketDirectoryIsRefused(t *testing.T) {
	s := newAttackScene(t)
	cmd, _ := s.attacker(t, "mkdir", s.sock)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the attacker could not make %s: %v", filepath.Dir(s.sock), err)
	}
	_, err := Listen(s.dataDir)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("owned by uid %d, not by you (uid 0)", attackerUID)) {
		t.Fatalf("Listen in another user's socket directory: %v; want the refusal", err)
	}
	t.Log(err)
	if _, err := os.Lstat(s.sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a socket was made in the refused directory: %v", err)
	}

	t.Run("with the check off the socket is taken", func(t *testing.T) {
		withoutOwnerChecks(t)
		l, err := Listen(s.dataDir)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		_, out := s.plantListener(t) // over the daemon's socket
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.helloReadBy(t, ctx, out)
	})
}

// A relay refuses a socket served by another uid before it sends a byte;
// with the check off, that user reads its hello.
func TestARelayRefusesASocketOfAnotherUID(t *testing.T) {
	s := newAttackScene(t)
	cmd, out := s.plantListener(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Connect(ctx, ConnectOptions{DataDir: s.dataDir, Hello: Hello{Cwd: "/secret/project"}})
	var foreign *ForeignSocketError
	if !errors.As(err, &foreign) || foreign.UID != attackerUID {
		t.Fatalf("Connect to another uid's socket: %v; want a ForeignSocketError of uid %d", err, attackerUID)
	}
	t.Log(err)
	rest, _ := io.ReadAll(out)
	_ = cmd.Wait()
	if strings.Contains(string(rest), "secret") {
		t.Errorf("the attacker read the hello: %s", rest)
	}

	t.Run("with the check off the hello is read", func(t *testing.T) {
		withoutOwnerChecks(t)
		_, out := s.plantListener(t)
		s.helloReadBy(t, ctx, out)
	})
}

// helloReadBy connects with a hello naming a secret project and checks
// that the attacker's listener, whose output is out, read it: the probe
// works when the protection is off.
func (s *attackScene) helloReadBy(t *testing.T, ctx context.Context, out *bufio.Reader) {
	t.Helper()
	c, err := Connect(ctx, ConnectOptions{DataDir: s.dataDir, Hello: Hello{Cwd: "/secret/project"}})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if line, _ := out.ReadString('\n'); !strings.Contains(line, "/secret/project") {
		t.Errorf("the attacker got %q; the probe did not work", line)
	}
}

// The daemon refuses a peer of another uid, whatever that peer's own
// checks.
func TestTheDaemonRefusesAnotherUID(t *testing.T) {
	s := newAttackScene(t)
	runDaemon(t, s.dataDir, newTestServer().ms)
	// Open the way to the socket, so that only the daemon's check is left.
	_ = os.Chmod(filepath.Dir(s.sock), 0o755)
	_ = os.Chmod(s.sock, 0o777)
	cmd, out := s.attacker(t, "dial", s.sock)
	said, _ := io.ReadAll(out)
	_ = cmd.Wait()
	if !strings.Contains(string(said), fmt.Sprintf("refused: this daemon serves uid 0 only (you are uid %d)", attackerUID)) {
		t.Errorf("a peer of uid %d got %q; want the daemon's refusal", attackerUID, said)
	}
}
