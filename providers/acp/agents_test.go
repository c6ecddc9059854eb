package acp

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// askAs is the fake's prompt for a permission request shaped as an agent
// shapes it: call is the tool_call update sent first (nil: none), ask the
// request's tool call.
func askAs(t *testing.T, call, ask map[string]any) string {
	t.Helper()
	shape := map[string]any{"ask": ask}
	if call != nil {
		shape["call"] = call
	}
	b, err := json.Marshal(shape)
	if err != nil {
		t.Fatal(err)
	}
	return "ask as: " + string(b)
}

// A permission request for one of our callback server's tools is allowed
// under the default deny policy, as each real agent shapes it; anything
// else keeps the policy, also when its title mentions a callback tool. The
// same requests under allow are all allowed, so a denial below is the
// check's doing, not a request the fake failed to send.
func TestCallbackToolPermissionIsAllowed(t *testing.T) {
	tool := func(title, kind string, meta map[string]any) map[string]any {
		m := map[string]any{"toolCallId": "call_1", "title": title}
		if kind != "" {
			m["kind"] = kind
		}
		if meta != nil {
			m["_meta"] = meta
		}
		return m
	}
	tests := []struct {
		name      string
		call, ask map[string]any
		ours      bool
	}{
		// claude-code-acp 0.16.2: the request has only the title, the
		// tool name itself; the tool_call had _meta.claudeCode.toolName.
		{"claude-code-acp", tool("mcp__subagent__report", "other", map[string]any{"claudeCode": map[string]any{"toolName": "mcp__subagent__report"}}),
			tool("mcp__subagent__report", "", nil), true},
		// qwen 0.24.4: the title describes the arguments; _meta.toolName names the tool.
		{"qwen", nil, tool(`{"output":"halfway"}`, "other", map[string]any{"toolName": "mcp__subagent__report"}), true},
		// gemini 0.61.0: the title is the tool's display name.
		{"gemini", nil, tool("list_agents (subagent MCP Server)", "other", nil), true},
		{"opencode", nil, tool("subagent_subagent", "other", nil), true},
		// copilot 1.0.102: the request's title is the bare tool name; its
		// tool_call was titled with the server's prefix.
		{"copilot", tool("subagent-report", "", nil), tool("report", "", nil), true},
		{"a bare tool name alone", nil, tool("report", "", nil), false},
		{"another server's tool", nil, tool("mcp__other__report", "other", nil), false},
		{"another server's tool (gemini)", nil, tool("report (other MCP Server)", "other", nil), false},
		{"a tool of ours we do not serve", nil, tool("mcp__subagent__shell", "other", nil), false},
		{"a shell command naming the tool", nil, tool("echo mcp__subagent__report", "execute", nil), false},
		{"a command titled as the tool", nil, tool("mcp__subagent__report", "execute", nil), false},
		{"a command titled as the tool, its kind in the tool_call", tool("mcp__subagent__report", "execute", nil), tool("mcp__subagent__report", "", nil), false},
		{"an edit whose meta names the tool", nil, tool("Write a.txt", "edit", map[string]any{"toolName": "mcp__subagent__report"}), false},
	}
	cb := func(self seam.ParentRef) (seam.Callback, func()) {
		return seam.Callback{URL: "http://127.0.0.1:9/mcp", Token: "tok"}, func() {}
	}
	for _, tt := range tests {
		for _, policy := range []string{PermissionDeny, PermissionAllow} {
			t.Run(tt.name+"/"+policy, func(t *testing.T) {
				t.Parallel() // each starts an agent process, which is most of its time
				f := newFixture(t, fakeConfig{http: true, permission: policy})
				store := memstore.New()
				m := f.manager(store, cb)
				id, res := f.start(m, askAs(t, tt.call, tt.ask))
				want := "reject"
				if tt.ours || policy == PermissionAllow {
					want = "allow"
				}
				if res.Output != "outcome: "+want {
					t.Fatalf("result = %+v, want the agent to see %q", res, want)
				}
				note := "[permission allowed (callback tool): "
				if got := strings.Join(assistantMessages(t, store, id), "\n"); tt.ours != strings.Contains(got, note) {
					t.Errorf("journal %q: callback note present = %v, want %v", got, !tt.ours, tt.ours)
				}
			})
		}
	}
}

// Without our callback server in the session, a request naming a callback
// tool is not ours: it keeps the deny policy.
func TestCallbackToolPermissionNeedsTheCallbackServer(t *testing.T) {
	f := newFixture(t, fakeConfig{http: false})
	cb := func(self seam.ParentRef) (seam.Callback, func()) {
		return seam.Callback{URL: "http://127.0.0.1:9/mcp", Token: "tok"}, func() {}
	}
	m := f.manager(memstore.New(), cb)
	_, res := f.start(m, askAs(t, nil, map[string]any{"toolCallId": "c", "title": "mcp__subagent__report"}))
	if res.Output != "outcome: reject" {
		t.Errorf("result = %+v, want a rejection", res)
	}
}

// Token usage is read where each agent puts it: the answer's standard
// usage (opencode, copilot), gemini's _meta.quota, qwen's _meta.usage on
// message chunks; claude-code-acp 0.16.2 reports none.
func TestUsageWhereEachAgentReportsIt(t *testing.T) {
	tests := []struct {
		prompt  string
		in, out int64
	}{
		{"use tools", 100, 20}, // the standard usage
		{"usage as qwen", 40, 6},
		{"usage as gemini", 40, 6},
		{"usage as claude-code-acp", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.prompt, func(t *testing.T) {
			f := newFixture(t, fakeConfig{})
			store := memstore.New()
			m := f.manager(store, nil)
			id, res := f.start(m, tt.prompt)
			if res.StopReason != agent.StopCompleted {
				t.Fatalf("result = %+v", res)
			}
			if res.Usage.InputTokens != tt.in || res.Usage.OutputTokens != tt.out {
				t.Errorf("usage = %+v, want %d in, %d out", res.Usage, tt.in, tt.out)
			}
			// The journal's turn end carries it, which list_agents sums.
			var got int64
			for _, e := range settledEvents(t, store, id) {
				if e.Kind == agent.EventTurnEnd && e.Usage != nil {
					got += e.Usage.InputTokens + e.Usage.OutputTokens
				}
			}
			if got != tt.in+tt.out {
				t.Errorf("journal usage = %d tokens, want %d", got, tt.in+tt.out)
			}
		})
	}
}

// A known agent gets the flags and variables it needs when the config
// lacks them; what the config gives is kept.
func TestPresets(t *testing.T) {
	bin := t.TempDir()
	for _, name := range []string{"qwen", "gemini", "opencode", "copilot", "claude-code-acp", "other-agent"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		command  string
		args     []string
		env      []string
		noPreset bool
		wantArgs []string
		wantEnv  []string // each must be present
	}{
		{"qwen", nil, nil, false, []string{"--acp"}, nil},
		{"qwen", []string{"--acp"}, nil, false, []string{"--acp"}, nil},
		{"gemini", []string{"--acp", "-m", "fake-model"}, nil, false, []string{"--acp", "-m", "fake-model", "--skip-trust"}, nil},
		{"gemini", []string{"--experimental-acp"}, nil, true, []string{"--experimental-acp"}, nil},
		{"opencode", nil, nil, false, []string{"acp"}, []string{"OPENCODE_DISABLE_AUTOUPDATE=1"}},
		{"opencode", []string{"acp", "--port", "0"}, []string{"OPENCODE_DISABLE_AUTOUPDATE=0"}, false, []string{"acp", "--port", "0"}, []string{"OPENCODE_DISABLE_AUTOUPDATE=0"}},
		{"copilot", []string{"--acp", "--no-auto-update"}, nil, false, []string{"--acp", "--no-auto-update"}, nil},
		{"copilot", nil, nil, false, []string{"--acp", "--no-auto-update"}, nil},
		{"other-agent", []string{"x"}, nil, false, []string{"x"}, nil},
	}
	for _, tt := range tests {
		p, err := New(Options{Command: filepath.Join(bin, tt.command), Args: tt.args, Env: tt.env, NoPreset: tt.noPreset})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(p.opts.Args, tt.wantArgs) {
			t.Errorf("%s %q: args = %q, want %q", tt.command, tt.args, p.opts.Args, tt.wantArgs)
		}
		for _, e := range tt.wantEnv {
			if !slices.Contains(p.opts.Env, e) {
				t.Errorf("%s: env %q lacks %q", tt.command, p.opts.Env, e)
			}
		}
		if n := len(p.opts.Env); n != max(len(tt.env), len(tt.wantEnv)) {
			t.Errorf("%s: env = %q", tt.command, p.opts.Env)
		}
	}
	// claude-code-acp: IS_SANDBOX=1 only as root, and never over the config's.
	pr, _ := presetFor("claude-code-acp", "")
	if _, env := pr.apply(nil, []string{"HOME=/h"}, true); !slices.Equal(env, []string{"HOME=/h", "IS_SANDBOX=1"}) {
		t.Errorf("as root: env = %q", env)
	}
	if _, env := pr.apply(nil, []string{"HOME=/h"}, false); !slices.Equal(env, []string{"HOME=/h"}) {
		t.Errorf("not root: env = %q", env)
	}
	if _, env := pr.apply(nil, []string{"IS_SANDBOX=0"}, true); !slices.Equal(env, []string{"IS_SANDBOX=0"}) {
		t.Errorf("configured: env = %q", env)
	}
}
