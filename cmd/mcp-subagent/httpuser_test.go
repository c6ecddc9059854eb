//go:build e2e

package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
)

// Loopback is not an identity: any local account can connect to
// 127.0.0.1. Another user (uid 65534, nobody) must not list, read or send
// to the children of the stdio principal local over a tokenless serve
// --http, nor read the token it minted (0600, in a directory the test
// opens to everyone so the file's own mode is what protects it); with the
// old anonymous principal local (the protection off) the same probe does
// all of it.
func TestAnotherLocalUserCannotReachLocalsChildrenOverHTTP(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the probe as uid 65534")
	}
	// The probe runs this test binary as nobody: copy it where nobody may
	// execute it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bindir := openDir(t)
	exe := filepath.Join(bindir, "probe.test")
	if b, err := os.ReadFile(self); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "done"}))
	defer fake.Close()
	for _, anonymous := range []bool{false, true} {
		g := newGuarded(t, fake, insecureHooks{anonymous: anonymous})
		if err := os.Chmod(g.dataDir, 0o755); err != nil {
			t.Fatal(err)
		}
		const secret = "the stdio session's secret plan"
		id := g.localChild(t, secret)
		tokenFile := filepath.Join(g.dataDir, httpTokenFile)
		if !anonymous {
			if fi, err := os.Stat(tokenFile); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("the minted token file: %v %v; want mode 0600", fi, err)
			}
		}
		tg, _ := json.Marshal(probeTarget{Base: g.base, TokenFile: tokenFile, Child: id, Secret: secret})
		cmd := exec.Command(exe, "-test.run=^$")
		// GORACE names a log directory nobody may write to: drop it.
		cmd.Env = append(slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "GORACE=") }), envHTTPProbe+"="+string(tg))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.Output()
		var res probeResult
		if jerr := json.Unmarshal(out, &res); err != nil || jerr != nil {
			t.Fatalf("the probe as uid 65534: %v %v; output %q, stderr %s", err, jerr, out, stderr.String())
		}
		if res.Uid != 65534 {
			t.Fatalf("the probe ran as uid %d", res.Uid)
		}
		if anonymous {
			if !res.Initialized || !res.Listed || !res.Read || !res.Sent || res.ViewURL != http.StatusOK {
				t.Errorf("protection off: the probe got %+v; want it to list, read and send to local's child and get the view: the probe is broken", res)
			}
			continue
		}
		if res.TokenRead || res.Initialized || res.Listed || res.Read || res.Sent || res.ViewURL != http.StatusUnauthorized {
			t.Errorf("another local user got %+v; want the token file unreadable, the session refused and /view/url 401", res)
		}
		if !strings.Contains(res.Err, "401") && !strings.Contains(res.Err, "authorization required") {
			t.Errorf("another local user's initialize failed with %q; want 401 (a bearer token is required)", res.Err)
		}
	}
}

// openDir is a temporary directory every user may enter and read.
func openDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "mcp-subagent-open")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// --ephemeral prints a token for the run to stderr (the token file itself
// is edge/tokens' TestTheTokenFile).
func TestTheMintedHTTPToken(t *testing.T) {
	a := &app{}
	var stderr strings.Builder
	hc, err := a.httpAuth(HTTPConfig{}, &stderr)
	if err != nil || len(hc.Tokens) != 1 || hc.Tokens[0].Principal != "local" || !strings.Contains(stderr.String(), "Bearer "+hc.Tokens[0].Token) {
		t.Errorf("--ephemeral: %+v %v, stderr %q; want a token for local printed once", hc, err, stderr.String())
	}
	hc, _ = a.httpAuth(HTTPConfig{Tokens: []TokenConfig{{Principal: "alice", Token: "t"}}}, io.Discard)
	if len(hc.Tokens) != 1 || hc.Tokens[0].Principal != "alice" {
		t.Errorf("configured tokens were changed: %+v", hc.Tokens)
	}
}
