//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
)

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

func post(t testing.TB, url string, headers map[string]string) int {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(initBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestHTTPBearerTokens(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "hi alice"}))
	defer fake.Close()
	const token = "alice-secret-token-0123456789"
	s := start(t, fake, serverOpts{http: true, token: token,
		config: `{"http":{"tokens":[{"principal":"alice","token_env":"ALICE_TOKEN"}]}}`,
		env:    []string{"ALICE_TOKEN=" + token}})
	// The client with the token got through initialize in start; a call works.
	res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "greet", "prompt": "hello"})
	if res.IsError || text(res) != "hi alice" {
		t.Fatalf("call with token: %v %q", res.IsError, text(res))
	}
	for name, h := range map[string]map[string]string{
		"no token":    nil,
		"bad token":   {"Authorization": "Bearer not-the-token-at-all-000"},
		"wrong shape": {"Authorization": "Basic " + token},
	} {
		if code := post(t, s.url, h); code != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401", name, code)
		}
	}
}

func TestHTTPOriginChecked(t *testing.T) {
	s := start(t, nil, serverOpts{http: true})
	with := func(k, v string) map[string]string {
		h := s.bearer()
		h[k] = v
		return h
	}
	if code := post(t, s.url, with("Origin", "https://evil.example")); code != http.StatusForbidden {
		t.Errorf("foreign origin: status %d, want 403", code)
	}
	if code := post(t, s.url, with("Origin", "http://localhost:5173")); code != http.StatusOK {
		t.Errorf("loopback origin: status %d, want 200", code)
	}
	if code := post(t, s.url, s.bearer()); code != http.StatusOK {
		t.Errorf("no origin: status %d, want 200", code)
	}
}

// runBinary runs the server with args and returns its exit code and stderr.
func runBinary(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	if len(args) > 0 && args[0] == "serve" && !slices.Contains(args, "--data-dir") {
		args = append(args, "--data-dir", t.TempDir())
	}
	code, _, stderr := runOut(t, 10*time.Second, env, args...)
	return code, stderr
}

// runOut runs the binary with args in a fresh directory, stdin empty, and
// returns its exit code, stdout and stderr; it fails the test if the
// binary does not exit within timeout or cannot run.
func runOut(t *testing.T, timeout time.Duration, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = serverEnv(nil, env)
	cmd.Dir = t.TempDir()
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Stdin = strings.NewReader("")
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%v did not exit; stderr:\n%s", args, stderr.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return code, stdout.String(), stderr.String()
}

func TestStartRefusals(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"non-loopback without tokens", []string{"serve", "--http", "0.0.0.0:0"}, "configure http.tokens"},
		{"config not JSON", []string{"serve", "--config", write("a.json", "{")}, "not valid JSON"},
		{"config unknown field", []string{"serve", "--config", write("b.json", `{"max_dept": 2}`)}, `unknown field \"max_dept\"; did you mean \"max_depth\"?`}, // JSON-quoted in the log line
		{"config syntax error", []string{"serve", "--config", write("b2.json", "{\n \"max_depth\": 2,,\n}")}, "not valid JSON at line 2, column 17"},
		{"data dir under a file", []string{"serve", "--data-dir", filepath.Join(write("file", ""), "sub")}, "(from --data-dir) cannot be created: not a directory; create it yourself or choose another with --data-dir"},
		{"CLI data dir under a file", []string{"ls", "--data-dir", filepath.Join(write("file2", ""), "sub")}, "(from --data-dir) cannot be created"},
		{"config wrong type", []string{"serve", "--config", write("c.json", `{"llm": {"model": 5}}`)}, `llm.model`},
		{"config token too short", []string{"serve", "--config", write("d.json", `{"http":{"tokens":[{"principal":"a","token":"short"}]}}`)}, `"http.tokens`},
		{"config missing", []string{"serve", "--config", filepath.Join(dir, "nope.json")}, "nope.json"},
		{"bad log level", []string{"serve", "--log-level", "loud"}, "--log-level"},
		{"unknown command", []string{"frobnicate"}, "unknown command"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stderr := runBinary(t, nil, tc.args...)
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want non-zero and %q", code, stderr, tc.want)
			}
		})
	}
}

func TestVersionAndStdoutDiscipline(t *testing.T) {
	out, err := exec.Command(binary, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "mcp-subagent ") {
		t.Fatalf("version: %q %v", out, err)
	}
	// serve on stdio with stdin closed at once: it exits cleanly and writes
	// nothing to stdout (logs go to stderr).
	cmd := exec.Command(binary, "serve", "--no-daemon", "--data-dir", t.TempDir())
	cmd.Env = serverEnv(nil, nil)
	cmd.Stdin = strings.NewReader("")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("serve with closed stdin: %v; stderr:\n%s", err, stderr.String())
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout got %q; it belongs to the protocol", stdout.String())
	}
	if !strings.Contains(stderr.String(), "serving MCP over stdio") {
		t.Errorf("stderr = %q", stderr.String())
	}
}

// The README's install recipe: go install puts a working binary in GOBIN.
func TestGoInstallRecipe(t *testing.T) {
	gobin := t.TempDir()
	cmd := exec.Command("go", "install", mainPkg)
	cmd.Env = append(os.Environ(), "GOBIN="+gobin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(gobin, "mcp-subagent"), "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "mcp-subagent ") {
		t.Errorf("the installed binary's version: %q %v", out, err)
	}
}
