//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeacp"
)

func mcpListTools() mcp.ListToolsRequest { return mcp.ListToolsRequest{} }

// fakeACPConfig configures the test binary itself as an ACP agent provider
// named "fake" (TestMain serves the fake agent when re-executed).
func fakeACPConfig(t *testing.T, extra string) (config, dir string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	env := map[string]string{fakeacp.EnvFake: "1", fakeacp.EnvDir: dir, fakeacp.EnvHTTP: "1", fakeacp.EnvLoad: "1",
		fakeacp.EnvProvider: "fake", "GORACE": "atexit_sleep_ms=0"}
	envJSON, _ := json.Marshal(env)
	// The fake records what it saw in dir: outside its workspace, so
	// granted as a write root (the default confinement allows no more).
	config = fmt.Sprintf(`{%s"providers":[{"name":"fake","type":"acp","command":%q,"env":%s,"pass_env":[],"confine":{"write_roots":[%q]}}]}`, extra, self, envJSON, dir)
	return config, dir
}

// acpCalls reads what the fake agents recorded.
func acpCalls(t *testing.T, dir, method string) []fakeacp.Record {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "calls.jsonl"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []fakeacp.Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r fakeacp.Record
		if json.Unmarshal(sc.Bytes(), &r) == nil && (method == "" || r.Method == method) {
			out = append(out, r)
		}
	}
	return out
}

func TestExternalChildReportsBackOverHTTP(t *testing.T) {
	cfg, dir := fakeACPConfig(t, "")
	s := start(t, nil, serverOpts{config: cfg})
	res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "report back", "prompt": "report: halfway there", "provider": "fake"})
	if res.IsError {
		t.Fatalf("isError: %s\n%s", text(res), s.stderr)
	}
	got := text(res)
	if !strings.Contains(got, "reported (") {
		t.Errorf("the child's answer = %q", got)
	}
	// The report reached the root principal with its source kind (in band).
	if !strings.Contains(got, "[subagent-report from agent-") || !strings.Contains(got, "reported:\nhalfway there") {
		t.Errorf("the report did not arrive in band: %q", got)
	}
	// The fake's MCP client called back over HTTP with its bearer token.
	calls := acpCalls(t, dir, "callback/report")
	if len(calls) != 1 || !strings.Contains(calls[0].Text, "isError=false err=<nil>") {
		t.Errorf("callback records = %+v", calls)
	}
	news := acpCalls(t, dir, "session/new")
	if len(news) == 0 || !strings.Contains(string(news[0].McpServers), `"Authorization"`) || !strings.Contains(string(news[0].McpServers), "Bearer mcps_") {
		t.Errorf("session/new mcpServers = %+v", news)
	}
}

func TestExternalGrandchildDepth(t *testing.T) {
	t.Run("refused past the cap", func(t *testing.T) {
		cfg, _ := fakeACPConfig(t, `"max_depth": 1, `)
		s := start(t, nil, serverOpts{config: cfg})
		res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "go deeper", "prompt": "delegate: hello", "provider": "fake"})
		if got := text(res); !strings.Contains(got, "DEPTH_EXCEEDED: subagent depth 2 exceeds maxDepth 1") {
			t.Errorf("result = %q", got)
		}
	})
	t.Run("allowed under the cap", func(t *testing.T) {
		cfg, dir := fakeACPConfig(t, "")
		s := start(t, nil, serverOpts{config: cfg})
		res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "go deeper", "prompt": "delegate: hello", "provider": "fake"})
		if got := text(res); res.IsError || !strings.Contains(got, "delegated: echo: hello") {
			t.Errorf("result = %v %q", res.IsError, got)
		}
		// The grandchild is the child's own: listed under it, depth 2.
		rows := s.call(t, testCtx(t), "list_agents", map[string]any{"scope": "descendants"})
		if !strings.Contains(text(rows), "depth 2") {
			t.Errorf("descendants = %s", text(rows))
		}
		if n := len(acpCalls(t, dir, "session/new")); n != 2 {
			t.Errorf("%d ACP sessions, want 2 (child and grandchild)", n)
		}
	})
}

func groupGone(pgid int) bool { return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) }

func TestExternalChildProcessesEndOnShutdown(t *testing.T) {
	cfg, dir := fakeACPConfig(t, "")
	s := start(t, nil, serverOpts{config: cfg})
	res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "never stops", "prompt": "stubborn", "provider": "fake", "run_in_background": true})
	if res.IsError {
		t.Fatal(text(res))
	}
	var pids []int
	if !waitFor(10*time.Second, func() bool {
		g := acpCalls(t, dir, "grandchild")
		if len(g) == 0 {
			return false
		}
		pids = []int{g[0].PID, g[0].Child}
		return true
	}) {
		t.Fatalf("the fake never started its grandchild; stderr:\n%s", s.stderr)
	}
	// Stopping the server (the daemon the session relays to) must end the
	// child's whole process group (agent and grandchild) before it exits.
	s.stop(t)
	if !waitFor(15*time.Second, func() bool { return groupGone(pids[0]) }) {
		t.Errorf("the child's process group (pgid %d, grandchild %d) outlived the server; stderr:\n%s", pids[0], pids[1], s.stderr)
	}
}

// A provider lacking a capability refuses a request needing it before
// anything starts, through the built binary (the acp provider has none).
func TestUnsupportedCapabilityThroughTheBinary(t *testing.T) {
	cfg, dir := fakeACPConfig(t, "")
	s := start(t, nil, serverOpts{config: cfg})
	for field, value := range map[string]any{
		"output_schema": map[string]any{"type": "object"},
		"max_depth":     2,
		"tool_filter":   map[string]any{"deny": []string{"x"}},
		"persona":       "a pirate",
	} {
		res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "d", "prompt": "p", "provider": "fake", field: value})
		got := text(res)
		if !res.IsError || !strings.Contains(got, "UNSUPPORTED_CAPABILITY") || !strings.Contains(got, field) || !strings.Contains(got, `"fake"`) {
			t.Errorf("%s: %v %q", field, res.IsError, got)
		}
	}
	if n := len(acpCalls(t, dir, "start")); n != 0 {
		t.Errorf("%d agent processes started for refused requests", n)
	}
}

// With no providers in the config, codex and claude-code are registered
// when their commands are on PATH.
func TestZeroConfigRegistersCLIsOnPath(t *testing.T) {
	bin := t.TempDir()
	for _, name := range []string{"codex", "claude"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := start(t, nil, serverOpts{env: []string{"PATH=" + bin + ":/usr/bin:/bin"}})
	tools, err := s.client.ListTools(testCtx(t), mcpListTools())
	if err != nil {
		t.Fatal(err)
	}
	var desc string
	for _, tl := range tools.Tools {
		if tl.Name == "subagent" {
			desc = tl.Description
		}
	}
	for _, want := range []string{"- codex", "- claude-code", "- spawn (default)"} {
		if !strings.Contains(desc, want) {
			t.Errorf("subagent description lacks %q:\n%s", want, desc)
		}
	}
	// And none without them.
	s2 := start(t, nil, serverOpts{env: []string{"PATH=/usr/bin:/bin"}})
	tools2, err := s2.client.ListTools(testCtx(t), mcpListTools())
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools2.Tools {
		if tl.Name == "subagent" && strings.Contains(tl.Description, "- codex") {
			t.Errorf("codex registered without a codex on PATH")
		}
	}
}
