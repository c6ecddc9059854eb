package acp

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
	"github.com/mcp-subagent/mcp-subagent/providers/internal/proc"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// What real ACP agents need that the protocol does not say: the presets
// (flags and environment), how a permission request names one of our
// callback tools, and where each agent puts its token usage. Verified
// with qwen-code 0.24.4, gemini-cli 0.61.0, opencode 1.18.33, copilot
// 1.0.102 and claude-code-acp 0.16.2 (see the package doc).

// preset is what an agent, known by its executable's name, needs on its
// command line and in its environment to work as a headless child.
type preset struct {
	// first are arguments the command line must start with (opencode's
	// "acp" subcommand); added when missing.
	first []string
	// flags are added at the end when missing.
	flags []string
	// env are variables set when Options.Env does not set them.
	env []string
	// rootEnv are variables set, when not set, when the server runs as root.
	rootEnv []string
	// state are the agent's own state and config directories, relative
	// to its HOME: writable when the agent runs confined (Options.Confine).
	state []string
	// stateFiles are single JSON state files relative to HOME, likewise;
	// created holding {} when missing.
	stateFiles []string
	// awaitTools holds the first prompt until the agent has listed our
	// callback tools, and opens another session when it does not
	// (listwatch.go).
	awaitTools bool
	// transcriptUsage reads the token usage the agent does not report from
	// Claude Code's session transcript (transcript.go).
	transcriptUsage bool
}

var presets = map[string]preset{
	// qwen-code speaks ACP only with --acp. It connects a session's MCP
	// servers in the background: session/new answers before it has them,
	// its first model call does not wait for them, and it drops an HTTP
	// server that has not answered initialize and the lists within 5 s
	// (REMOTE_DEFAULT_TIMEOUT_MS; ACP cannot set its discoveryTimeoutMs),
	// counted while its first session/new loads the rest of qwen (8–18 s
	// on a busy machine). Either way the child's report was refused in
	// some runs ("Deferred tool mcp__subagent__report is not registered in
	// this session").
	"qwen": {flags: []string{"--acp"}, awaitTools: true, state: []string{".qwen"}},
	// gemini-cli speaks ACP with --acp; without --skip-trust a folder it
	// does not trust gets none of the session's MCP servers, so the child
	// could not call back ("Tool mcp_subagent_report not found").
	"gemini": {flags: []string{"--acp", "--skip-trust"}, state: []string{".gemini"}},
	// opencode speaks ACP as its "acp" subcommand; a child must not
	// update itself.
	"opencode": {first: []string{"acp"}, env: []string{"OPENCODE_DISABLE_AUTOUPDATE=1"},
		state: []string{".local/share/opencode", ".config/opencode", ".cache/opencode", ".local/state/opencode"}},
	// copilot speaks ACP with --acp; a child must not update itself.
	"copilot": {flags: []string{"--acp", "--no-auto-update"}, state: []string{".copilot", ".cache/copilot"}},
	// claude-code-acp (and its successor claude-agent-acp) run Claude Code
	// with --dangerously-skip-permissions, which Claude Code refuses as root
	// unless IS_SANDBOX=1 ("cannot be used with root/sudo privileges").
	// claude-code-acp 0.16.2 reports no usage over ACP.
	"claude-code-acp":  {rootEnv: []string{"IS_SANDBOX=1"}, state: []string{".claude"}, stateFiles: []string{".claude.json"}, transcriptUsage: true},
	"claude-agent-acp": {rootEnv: []string{"IS_SANDBOX=1"}, state: []string{".claude"}, stateFiles: []string{".claude.json"}},
}

// presetFor is the preset of the agent at command (as configured) or path
// (as resolved), by executable name; ok is false for an unknown agent.
func presetFor(command, path string) (preset, bool) {
	for _, p := range []string{command, path} {
		if pr, ok := presets[filepath.Base(p)]; ok {
			return pr, true
		}
	}
	return preset{}, false
}

// apply adds what the preset needs and the configuration lacks: a flag
// already given (also as --flag=value) or a variable already set is left
// alone.
func (pr preset) apply(args, env []string, root bool) ([]string, []string) {
	out := append([]string(nil), args...)
	if len(pr.first) > 0 && !slices.Equal(firstN(out, len(pr.first)), pr.first) {
		out = append(append([]string(nil), pr.first...), out...)
	}
	for _, f := range pr.flags {
		if !slices.ContainsFunc(out, func(a string) bool { return a == f || strings.HasPrefix(a, f+"=") }) {
			out = append(out, f)
		}
	}
	env = append([]string(nil), env...)
	add := func(vars []string) {
		for _, kv := range vars {
			name, _, _ := strings.Cut(kv, "=")
			if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, name+"=") }) {
				env = append(env, kv)
			}
		}
	}
	add(pr.env)
	if root {
		add(pr.rootEnv)
	}
	return out, env
}

// confinement is Options.Confine with the state of the agent, when it is a
// known one, writable: its preset's directories under the agent's HOME
// (with CLAUDE_CONFIG_DIR, that directory for the claude agents). An
// unknown agent's state goes in the provider's write_roots. env is the
// child's environment (a session's, under its settings), whose HOME it is.
func (p *Provider) confinement(env []string) sandbox.Agent {
	c := p.opts.Confine
	pr, ok := presetFor(p.opts.Command, p.path)
	if !c.Confined() || !ok {
		return c
	}
	home := proc.HomeDir(env)
	var dirs, files []string
	if dir := proc.Getenv(env, "CLAUDE_CONFIG_DIR"); dir != "" && slices.Contains(pr.state, ".claude") {
		dirs = append(dirs, dir)
	} else {
		for _, d := range pr.state {
			dirs = append(dirs, filepath.Join(home, d))
		}
		for _, f := range pr.stateFiles {
			// See proc.CreateIfMissing: the agent rewrites it in place.
			proc.CreateIfMissing(filepath.Join(home, f), "{}\n")
			files = append(files, filepath.Join(home, f))
		}
	}
	c.StateDirs = append(dirs, c.StateDirs...)
	c.StateFiles = append(files, c.StateFiles...)
	return c
}

func firstN(s []string, n int) []string {
	if len(s) < n {
		return s
	}
	return s[:n]
}

var runningAsRoot = os.Geteuid() == 0

// callbackTools are this server's tools a child reaches through the
// callback server, by their plain names.
var callbackTools = []string{"subagent", "send_message", "interrupt_agent", "list_agents", "report"}

// callbackToolNames are the names the agents give a callback tool, the
// server being callbackServer: mcp__subagent__report (claude-code-acp's
// title, qwen's _meta.toolName), "report (subagent MCP Server)"
// (gemini's and qwen's display title), mcp_subagent_report (gemini's
// registry name), subagent_report (opencode) and subagent-report
// (copilot).
var callbackToolNames = func() map[string]bool {
	m := map[string]bool{}
	for _, t := range callbackTools {
		for _, n := range []string{
			"mcp__" + callbackServer + "__" + t,
			t + " (" + callbackServer + " MCP Server)",
			"mcp_" + callbackServer + "_" + t,
			callbackServer + "_" + t,
			callbackServer + "-" + t,
			callbackServer + "/" + t,
		} {
			m[n] = true
		}
	}
	return m
}()

// riskyKinds are tool kinds no callback tool has: a request of one of
// these kinds is never taken for a callback, whatever its title says (a
// shell command's title is the command itself).
var riskyKinds = []acpsdk.ToolKind{acpsdk.ToolKindExecute, acpsdk.ToolKindEdit, acpsdk.ToolKindDelete, acpsdk.ToolKindMove}

// seenTool is what the tool_call updates said of a tool call, for a
// permission request that says less (claude-code-acp sends only a title).
type seenTool struct {
	names []string
	kind  acpsdk.ToolKind
}

// toolNames are the names a tool call's fields give it: its title and the
// tool name in its _meta (qwen: toolName; claude-code-acp:
// claudeCode.toolName).
func toolNames(title *string, meta map[string]any) []string {
	var out []string
	if title != nil && *title != "" {
		out = append(out, *title)
	}
	if s, ok := meta["toolName"].(string); ok && s != "" {
		out = append(out, s)
	}
	if cc, ok := meta["claudeCode"].(map[string]any); ok {
		if s, ok := cc["toolName"].(string); ok && s != "" {
			out = append(out, s)
		}
	}
	return out
}

// isCallbackTool reports whether a permission request is for one of our
// callback server's tools: one of its names (or the names its tool_call
// update gave) is exactly a callback tool's name as some agent spells it,
// and its kind is not one that edits, moves, deletes or executes. Exact
// names only: a substring would let a shell command that mentions
// "mcp__subagent__report" through.
func isCallbackTool(tc acpsdk.ToolCallUpdate, seen seenTool) bool {
	kind := seen.kind
	if tc.Kind != nil {
		kind = *tc.Kind
	}
	if slices.Contains(riskyKinds, kind) {
		return false
	}
	for _, n := range append(toolNames(tc.Title, tc.Meta), seen.names...) {
		if callbackToolNames[strings.TrimSpace(n)] {
			return true
		}
	}
	return false
}

// promptUsage is the token usage of a session/prompt answer: the standard
// usage (opencode, copilot, claude-agent-acp), else gemini's
// _meta.quota.token_count {input_tokens, output_tokens}.
func promptUsage(r acpsdk.PromptResponse) (seam.Usage, bool) {
	if u := r.Usage; u != nil {
		return seam.Usage{InputTokens: int64(u.InputTokens), OutputTokens: int64(u.OutputTokens)}, true
	}
	if q, ok := r.Meta["quota"].(map[string]any); ok {
		if tc, ok := q["token_count"].(map[string]any); ok {
			in, ok1 := number(tc["input_tokens"])
			out, ok2 := number(tc["output_tokens"])
			if ok1 || ok2 {
				return seam.Usage{InputTokens: in, OutputTokens: out}, true
			}
		}
	}
	return seam.Usage{}, false
}

// chunkUsage is the usage qwen attaches to an agent_message_chunk after
// each model call: _meta.usage {inputTokens, outputTokens}.
func chunkUsage(meta map[string]any) (seam.Usage, bool) {
	u, ok := meta["usage"].(map[string]any)
	if !ok {
		return seam.Usage{}, false
	}
	in, ok1 := number(u["inputTokens"])
	out, ok2 := number(u["outputTokens"])
	if !ok1 && !ok2 {
		return seam.Usage{}, false
	}
	return seam.Usage{InputTokens: in, OutputTokens: out}, true
}

// number reads a JSON number decoded into any.
func number(v any) (int64, bool) {
	switch n := v.(type) {
	case float64:
		if n >= 0 {
			return int64(n), true
		}
	case int64:
		return n, n >= 0
	case int:
		return int64(n), n >= 0
	}
	return 0, false
}
