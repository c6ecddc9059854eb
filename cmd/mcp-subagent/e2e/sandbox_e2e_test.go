//go:build e2e && linux

package e2e

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/daemon"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
)

// sandboxModule is a small Go module with a passing test, and a probe
// program that tries to reach what lies outside the sandbox.
var sandboxModule = map[string]string{
	"go.mod":        "module example.com/calc\n\ngo 1.22\n",
	"calc.go":       "package calc\n\nfunc Add(a, b int) int { return a + b }\n",
	"calc_test.go":  "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal(\"2+3\")\n\t}\n}\n",
	"probe/main.go": sandboxProbe,
}

const sandboxProbe = `package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strings"
)

func main() {
	c, err := net.Dial("tcp", os.Args[1])
	if err != nil {
		fmt.Printf("TCP-BLOCKED: %v\n", err)
	} else {
		c.Close()
		fmt.Printf("TCP-CONNECTED\n")
	}
	// The daemon: connect, then ask for its status as a client would.
	c, err = net.Dial("unix", os.Args[2])
	if err != nil {
		fmt.Printf("DAEMON-BLOCKED: %v\n", err)
		return
	}
	defer c.Close()
	fmt.Fprintln(c, ` + "`" + `{"mcp_subagent":1,"op":"status"}` + "`" + `)
	line, _ := bufio.NewReader(c).ReadString('\n')
	if line == "" || strings.Contains(line, ` + "`" + `"error"` + "`" + `) {
		fmt.Printf("DAEMON-REFUSED: %s\n", line)
		return
	}
	fmt.Printf("DAEMON-ANSWERED: %s\n", line)
}
`

// A child on the default config runs go test ./... of a module in its
// workspace, and it passes; it cannot write outside, read the planted
// ~/.ssh secret, reach a loopback listener, signal a process outside
// or talk to the daemon's socket (below Landlock ABI 9 it can connect,
// and the daemon refuses it). The same script on "unconfined" does all of
// those, so the probes work.
func TestAChildsShellIsConfinedByDefaultEndToEnd(t *testing.T) {
	abi, reason := sandbox.ABI()
	if abi < 6 {
		t.Skip("needs Landlock ABI 6: " + reason)
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go on PATH")
	}
	// A fresh Go build cache compiles the standard library (minutes on a
	// busy machine): each child's is seeded from one warmed here, so that
	// the command stays within run_shell's timeout.
	seed := t.TempDir()
	mod := t.TempDir()
	writeFiles(t, mod, sandboxModule)
	warm := exec.Command("go", "test", "./...")
	warm.Dir, warm.Env = mod, append(os.Environ(), "GOCACHE="+seed, "GOFLAGS=")
	if out, err := warm.CombinedOutput(); err != nil {
		t.Fatalf("warming a build cache: %v\n%s", err, out)
	}
	warm = exec.Command("go", "build", "-o", os.DevNull, "./probe")
	warm.Dir, warm.Env = mod, append(os.Environ(), "GOCACHE="+seed, "GOFLAGS=")
	if out, err := warm.CombinedOutput(); err != nil {
		t.Fatalf("warming a build cache: %v\n%s", err, out)
	}
	for _, mode := range []string{"", "unconfined"} {
		t.Run("shell="+mode, func(t *testing.T) {
			base := t.TempDir()
			home, outside := filepath.Join(base, "home"), filepath.Join(base, "outside")
			for _, d := range []string{filepath.Join(home, ".ssh"), outside} {
				if err := os.MkdirAll(d, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(home, ".ssh", "id_ed25519"), []byte("PRIVATE-KEY-MARK"), 0o600); err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
			sleeper := exec.Command("/bin/sleep", "300")
			if err := sleeper.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()

			dataDir := t.TempDir()
			script := strings.Join([]string{
				"go test ./... && echo GOTEST-PASSED",
				"{ echo x > " + filepath.Join(outside, "new.txt") + "; } 2>/dev/null && echo WROTE-OUTSIDE",
				"cat $HOME/.ssh/id_ed25519 2>/dev/null; echo",
				"kill -0 " + strconv.Itoa(sleeper.Process.Pid) + " 2>/dev/null && echo SIGNALLED",
				"go run ./probe " + ln.Addr().String() + " " + daemon.SocketPath(dataDir),
			}, "\n")
			var mu sync.Mutex
			var childCache string
			shell := func(command string) fakeopenai.Reply {
				return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "run_shell", Arguments: string(mustJSON(t, map[string]string{"command": command}))}}}
			}
			fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
				out, ok := req.LastToolResult()
				switch {
				case !req.HasTool("run_shell"):
					return fakeopenai.Reply{Text: "NO-RUN-SHELL"}
				case !ok: // first: where is the build cache?
					return shell("echo GOCACHE=$(go env GOCACHE)")
				case strings.Contains(out, "GOCACHE="):
					dir := strings.TrimSpace(strings.SplitN(strings.SplitN(out, "GOCACHE=", 2)[1], "\n", 2)[0])
					mu.Lock()
					childCache = dir
					mu.Unlock()
					if cp, err := exec.Command("cp", "-a", seed+"/.", dir).CombinedOutput(); err != nil {
						return fakeopenai.Reply{Text: "SEEDING-FAILED " + dir + ": " + string(cp)}
					}
					return shell(script)
				}
				return fakeopenai.Reply{Text: "RESULT:\n" + out}
			})
			defer fake.Close()
			config := ""
			if mode != "" {
				config = `{"shell":"` + mode + `"}`
			}
			// Unconfined, the commands use the server's GOCACHE: a copy of
			// the seed. Confined, their own under the data directory.
			serverCache := filepath.Join(base, "server-cache")
			if out, err := exec.Command("cp", "-a", seed, serverCache).CombinedOutput(); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			s := start(t, fake, serverOpts{config: config, dataDir: dataDir, env: []string{"HOME=" + home, "GOCACHE=" + serverCache}})
			writeFiles(t, s.workspace, sandboxModule)
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			res := s.call(t, ctx, "subagent", map[string]any{"description": "test the module", "prompt": "run the tests"})
			got := text(res)
			if !strings.Contains(got, "GOTEST-PASSED") {
				t.Fatalf("go test did not pass in the workspace:\n%s", got)
			}
			confined := mode == ""
			for _, escape := range []string{"WROTE-OUTSIDE", "PRIVATE-KEY-MARK", "SIGNALLED", "TCP-CONNECTED"} {
				if strings.Contains(got, escape) == confined {
					t.Errorf("shell=%q: %s: result\n%s", mode, escape, got)
				}
			}
			// The daemon's socket: unconfined, the command is answered;
			// confined, it is not. Below ABI 9 it can connect (Landlock
			// lets it), and the daemon refuses it as a sandboxed command's
			// process and says so in its log.
			if answered := strings.Contains(got, "DAEMON-ANSWERED"); answered == confined {
				t.Errorf("shell=%q at ABI %d: the daemon answered the command: %v, want %v: result\n%s", mode, abi, answered, !confined, got)
			}
			if confined && abi < 9 {
				if !strings.Contains(got, "DAEMON-REFUSED") || !strings.Contains(got, "runs inside a sandboxed command") {
					t.Errorf("at ABI %d the confined command was not refused by the daemon with the reason: result\n%s", abi, got)
				}
				if log := s.stderr.String(); !strings.Contains(log, "refused a connection") || !strings.Contains(log, "runs inside a sandboxed command") {
					t.Errorf("the daemon's log does not say why it refused the command:\n%s", log)
				}
			}
			if _, err := os.Stat(filepath.Join(outside, "new.txt")); (err == nil) == confined {
				t.Errorf("shell=%q: the outside write: %v", mode, err)
			}
			// The caches went to the data directory, not the user's home.
			if confined {
				mu.Lock()
				dir := childCache
				mu.Unlock()
				if !strings.HasPrefix(dir, filepath.Join(dataDir, "sandbox", "cache")+"/") {
					t.Errorf("GOCACHE %q is not the child's own under the data directory", dir)
				}
				if _, err := os.Stat(filepath.Join(home, ".cache")); err == nil {
					t.Error("a cache was written in the home directory")
				}
				if entries, _ := os.ReadDir(filepath.Join(dataDir, "sandbox", "cache")); len(entries) == 0 {
					t.Error("no per-child cache under the data directory")
				}
			}
		})
	}
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
