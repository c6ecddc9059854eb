//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/daemon"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
)

// Two sessions of one daemon, each with its own OPENAI_BASE_URL, key and
// model: each session's child reaches its own model server with its own
// key and model, never the other's. The settings are recorded in the
// child's descriptor (the key by name only), so after the daemon stops a
// follow-up from a third session, whose environment is the first's,
// resumes the second session's child on the second session's server; and
// daemon status names the variables a session differs in, never a value.
func TestEachSessionsChildrenRunWithItsOwnSettings(t *testing.T) {
	answer := func(who string) *fakeopenai.Server {
		return fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
			return fakeopenai.Reply{Text: who + " answers " + req.LastUserText()}
		})
	}
	fakeA, fakeB := answer("A"), answer("B")
	defer fakeA.Close()
	defer fakeB.Close()
	const secretB = "sk-session-b-0123456789abcdef"
	ctx := testCtx(t)

	sA := start(t, fakeA, serverOpts{})
	sB := start(t, fakeB, serverOpts{dataDir: sA.dataDir, workspace: sA.workspace,
		env: []string{"OPENAI_API_KEY=" + secretB, "MCP_SUBAGENT_MODEL=model-b"}})

	fgA := structured(t, sA.call(t, ctx, "subagent", map[string]any{"description": "session a child", "prompt": "task of A"}))
	fgB := structured(t, sB.call(t, ctx, "subagent", map[string]any{"description": "session b child", "prompt": "task of B"}))
	if fgA.Output != "A answers task of A" || fgB.Output != "B answers task of B" {
		t.Fatalf("outputs: A %+v, B %+v; want each session's child answered by its own model server", fgA, fgB)
	}
	sawB := func(f *fakeopenai.Server, prompt string) (n int) {
		for _, r := range f.Requests() {
			for _, m := range r.Messages {
				if strings.Contains(m.Content, prompt) {
					n++
					break
				}
			}
		}
		return n
	}
	if n := sawB(fakeA, "task of B"); n != 0 {
		t.Errorf("session B's child reached session A's model server %d times", n)
	}
	if n := sawB(fakeB, "task of A"); n != 0 {
		t.Errorf("session A's child reached session B's model server %d times", n)
	}
	for _, r := range fakeB.Requests() {
		if r.Model != "model-b" || r.Header.Get("Authorization") != "Bearer "+secretB {
			t.Errorf("session B's child called model %q with %q; want model-b with session B's key", r.Model, r.Header.Get("Authorization"))
		}
	}
	for _, r := range fakeA.Requests() {
		if r.Model != "fake-model" || r.Header.Get("Authorization") != "Bearer test-key" {
			t.Errorf("session A's child called model %q with %q; want fake-model with session A's key", r.Model, r.Header.Get("Authorization"))
		}
	}

	// daemon status names the differing variables of B's session, not
	// their values; A's session (the daemon's own environment) is not listed.
	out, err := exec.Command(binary, "daemon", "status", "--data-dir", sA.dataDir).CombinedOutput()
	if err != nil {
		t.Fatalf("daemon status: %v\n%s", err, out)
	}
	status := string(out)
	for _, want := range []string{"MCP_SUBAGENT_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"} {
		if !strings.Contains(status, want) {
			t.Errorf("daemon status does not name %s:\n%s", want, status)
		}
	}
	if strings.Count(status, "has settings of its own") != 1 || strings.Contains(status, secretB) || strings.Contains(status, fakeB.URL()) {
		t.Errorf("daemon status should list one session, by variable names only:\n%s", status)
	}

	// Every session gone, the daemon stopped: a third session with A's
	// environment resumes B's child, which still runs with B's settings.
	sA.client.Close()
	sB.client.Close()
	stopDaemon(t, sA.dataDir)
	logText, _ := os.ReadFile(daemon.LogPath(sA.dataDir))
	if !bytes.Contains(logText, []byte("settings differ from the daemon's own")) || bytes.Contains(logText, []byte(secretB)) {
		t.Errorf("the daemon log should say B's session differs, without its key:\n%s", logText)
	}
	sC := start(t, fakeA, serverOpts{dataDir: sA.dataDir, workspace: sA.workspace})
	res, sent := callSend(t, sC, ctx, fgB.AgentID, "more for B", 30)
	if res.IsError || sent.Route != "resumed" || sent.Outcome == nil || sent.Outcome.Output != "B answers more for B" {
		t.Fatalf("resuming B's child from another session after a restart: %s %+v", text(res), sent)
	}
	if n := sawB(fakeA, "more for B"); n != 0 {
		t.Errorf("the resumed child of session B reached session A's model server")
	}

	// The store has B's settings but not its key: the grep reads the
	// records (B's address is there), and the key is not.
	var store []byte
	_ = filepath.WalkDir(sA.dataDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Base(p) != "daemon.log" {
			b, _ := os.ReadFile(p)
			store = append(store, b...)
		}
		return nil
	})
	if !bytes.Contains(store, []byte(fakeB.URL())) {
		t.Fatalf("the data directory does not hold session B's recorded base URL: the probe does not read the store")
	}
	if bytes.Contains(store, []byte(secretB)) {
		t.Errorf("the data directory holds session B's API key")
	}
}

// An external child runs with the variables its session passes (pass_env),
// not those of the session that started the daemon.
func TestAnExternalChildRunsWithItsSessionsVariables(t *testing.T) {
	cfg, dir := fakeACPConfig(t, "")
	cfg = strings.Replace(cfg, `"pass_env":[]`, `"pass_env":["SETTINGS_MARK"]`, 1)
	ctx := testCtx(t)
	sA := start(t, nil, serverOpts{config: cfg, env: []string{"SETTINGS_MARK=from-a"}})
	sB := start(t, nil, serverOpts{config: cfg, dataDir: sA.dataDir, workspace: sA.workspace, env: []string{"SETTINGS_MARK=from-b"}})
	for _, s := range []*instance{sA, sB} {
		if res := s.call(t, ctx, "subagent", map[string]any{"description": "external child", "prompt": "hello", "provider": "fake"}); res.IsError {
			t.Fatalf("external child: %s", text(res))
		}
	}
	var marks []string
	for _, r := range acpCalls(t, dir, "start") {
		for _, kv := range r.Env {
			if v, ok := strings.CutPrefix(kv, "SETTINGS_MARK="); ok {
				marks = append(marks, v)
			}
		}
	}
	if len(marks) != 2 || marks[0] == marks[1] || !strings.Contains(strings.Join(marks, " "), "from-b") {
		t.Errorf("the external children ran with SETTINGS_MARK %q; want one with each session's value", marks)
	}
}

// A session whose config names other models than the daemon's lists its
// own names in the subagent tool (what its model may choose), and a child
// it starts on one of them runs there; the daemon's session keeps its list.
func TestASessionsToolListShowsItsOwnModels(t *testing.T) {
	main, fast := fakeopenai.New(modelReply("main")), fakeopenai.New(modelReply("fast"))
	defer main.Close()
	defer fast.Close()
	other := fakeopenai.New(modelReply("other"))
	defer other.Close()
	ctx := testCtx(t)
	sA := start(t, nil, serverOpts{config: modelsConfig(main, fast)})
	sB := start(t, nil, serverOpts{dataDir: sA.dataDir, workspace: sA.workspace, config: fmt.Sprintf(`{"providers": [], "models": [
		{"name": "slow", "api": "openai", "base_url": %q, "api_key_env": "OPENAI_API_KEY", "model": "slow-id"},
		{"name": "cheap", "api": "openai", "base_url": %q, "api_key_env": "OPENAI_API_KEY", "model": "cheap-id"}]}`, other.URL(), other.URL())})

	if got := modelEnum(t, sA); !slices.Equal(got, []string{"main", "fast"}) {
		t.Errorf("the daemon's session lists models %v, want [main fast]", got)
	}
	if got := modelEnum(t, sB); !slices.Equal(got, []string{"slow", "cheap"}) {
		t.Errorf("the session with its own config lists models %v, want its own [slow cheap]", got)
	}
	res := sB.call(t, ctx, "subagent", map[string]any{"description": "cheap child", "prompt": "hello", "model": "cheap"})
	if res.IsError || !strings.Contains(text(res), "other: hello") {
		t.Fatalf("a child on the session's model: %s", text(res))
	}
	if got := modelEnum(t, sA); !slices.Equal(got, []string{"main", "fast"}) {
		t.Errorf("after the other session's call the daemon's session lists %v, want [main fast]", got)
	}
}
