// Package acp provides the acp provider: children that are Agent Client
// Protocol agents (codex-acp, claude-agent-acp, gemini --acp, …) run as
// child processes and driven over stdio with github.com/coder/acp-go-sdk,
// protocol version 1.
//
// # What it owns
//
// A driver per child activation owns one agent process (in its own process
// group, with exactly the configured environment: nothing of the server's
// leaks in) and one ACP connection. The process is started by the first
// turn that needs it and kept for the rest of the activation; Close closes
// its stdin, gives it a moment to exit, then stops the whole group and
// reaps it, so no orphan and no zombie outlives the child. The manager
// owns everything else (activation, residency, settlement, persistence)
// and runs one-shot children from the same driver: one turn, then Close.
//
// # Protocol mapping
//
//   - initialize: protocol v1, clientCapabilities with fs and terminal
//     false (the agent works in its cwd with its own tools; fs/* and
//     terminal/* calls are answered "method not found").
//     agentCapabilities.loadSession and mcpCapabilities.http are recorded.
//   - session/new: cwd is the child's cwd made absolute; mcpServers is []
//     or, when the deployment offers a callback and the agent accepts HTTP
//     MCP servers, this server as {type:"http", name:"subagent", url,
//     headers:[Authorization: Bearer <token>]}. An agent without HTTP MCP
//     support gets [] and a warning in the log: it cannot call back. The
//     session id goes into the journal as a session event.
//   - session/load: on a cold resume (a new activation of a child whose
//     journal records a session) and after the process was stopped, when
//     the agent offers loadSession. The history it replays is discarded:
//     the journal already holds it.
//   - session/prompt: one per turn, the turn's inputs joined into one text
//     block (non-user sources labelled). session/update notifications
//     stream into the journal: agent_message_chunk text accumulates into
//     one assistant message, flushed before each note and at the turn's
//     end; tool_call and a tool_call_update that completes or fails become
//     short notes ("[tool: Read file (pending)]", "[tool completed: Read
//     file]"); usage_update's cumulative USD cost adds the turn's share to
//     the usage, and the turn's token usage is read where the agent puts
//     it (see Known agents). Thoughts, plans, replayed user chunks and the
//     other kinds are not recorded. The update handler never blocks: it
//     appends to a queue drained by the turn's goroutine. The SDK's own
//     queue holds 1024 notifications and closes the connection when it
//     overflows, which a burst (a long session/load replay) does even with
//     a handler that never blocks; so the agent's stdout is read no further
//     while 256 updates wait to be handled, and the agent's writes wait on
//     the pipe instead.
//   - session/cancel: when the turn's ctx ends (interrupt, shutdown,
//     timeout). The turn waits up to one second for the prompt's answer;
//     an agent that does not answer has its process group stopped, and the
//     next turn starts a new process that loads the session (or opens a
//     new one, see below). Permission requests that arrive after the
//     cancel are answered "cancelled".
//
// # Stop reasons
//
//	ACP stopReason        result          diagnostic
//	end_turn              completed
//	max_tokens            max-tokens      token limit
//	refusal               refusal         the agent declined
//	cancelled             aborted
//	max_turn_requests     error           request limit per turn
//	anything else         error           the unknown reason, quoted
//	(interrupted)         aborted         the turn was cancelled
//	(Options.Timeout)     error           the turn timed out
//	(agent died/failed)   error           the error and the tail of its stderr
//
// The output is the last non-empty assistant message, also for a turn that
// did not complete.
//
// # Permission policy
//
// No request is ever left pending: session/request_permission is answered
// at once, or under Ask when the person (or the deadline) answers. Ask
// holds the request (the SDK runs each request on its own goroutine, so
// neither the reader nor the notifications wait) and asks through
// seam.DriverRequest.Ask: "allow" selects allow_once (else allow_always),
// "deny" reject_once (else reject_always, else "cancelled"), an option's
// own words that option; the deadline (QuestionTimeout) gives deny, noted
// as timed out; a cancelled turn or a closed connection withdraws the
// question ("cancelled"). A person's decline adds "declined by the person:
// <title>" to the diagnostic, a timeout "denied, timed out ...". Deny (the default) selects a reject_once option, else
// reject_always, else answers "cancelled", and adds "denied: <tool call
// title>" to the turn's diagnostic. Allow (explicit configuration only)
// selects allow_once, else allow_always, else answers "cancelled". Every
// answer is also a note in the journal.
//
// A request for one of our callback server's tools (report, list_agents,
// subagent, send_message, interrupt_agent) is allowed whatever the
// policy, when the session was given that server: it is the child's
// channel back to us, where depth and the child's token are checked, and
// qwen, copilot and claude-code-acp ask before every MCP tool call, so
// under deny they could never report. ACP does not say how a request names
// its tool, so the request's title, its _meta.toolName (qwen),
// _meta.claudeCode.toolName, and the same fields of the tool call's
// earlier tool_call update are compared, exactly, with the tool's name as
// each agent spells it: mcp__subagent__report (claude-code-acp's title,
// qwen's meta), "report (subagent MCP Server)" (gemini's title),
// mcp_subagent_report, subagent_report (opencode), subagent-report
// (copilot, whose request is titled "report" after a tool_call titled
// "subagent-report"). A request of kind execute, edit, delete or move is never
// taken for one, whatever its title says (a shell command's title is the
// command). The note reads "permission allowed (callback tool): …".
//
// # Known agents
//
// New adds, by the executable's name and only where Options.Args or Env
// lack them (Options.NoPreset turns this off), what these agents need as
// headless children (verified with the versions given):
//
//	qwen             --acp; the first prompt waits (10 s at most) until qwen has
//	                 listed the callback tools, through a loopback watch in front of
//	                 the callback server, and another session is opened (3 in all)
//	                 when it has not: qwen connects MCP servers in the background,
//	                 calls its model without waiting for them, and drops an HTTP
//	                 one that took 5 s (@qwen-code/qwen-code 0.24.4)
//	gemini           --acp --skip-trust          (@google/gemini-cli 0.61.0; without
//	                                              --skip-trust an untrusted folder gets
//	                                              no MCP servers, so no callback)
//	opencode         acp (subcommand), OPENCODE_DISABLE_AUTOUPDATE=1  (opencode-ai 1.18.33)
//	copilot          --acp --no-auto-update      (@github/copilot 1.0.102)
//	claude-code-acp  IS_SANDBOX=1 when running as root (@zed-industries/claude-code-acp
//	claude-agent-acp                              0.16.2; Claude Code refuses to skip
//	                                              permissions as root otherwise)
//
// The model wiring (base URL, key, model) stays the config's: see the
// README's ACP agents table.
//
// Token usage comes from where each agent puts it, one source per turn:
// the prompt answer's standard usage (opencode, copilot, claude-agent-acp),
// else its _meta.quota.token_count {input_tokens, output_tokens} (gemini),
// else the sum of _meta.usage {inputTokens, outputTokens} on the turn's
// agent_message_chunk updates (qwen, one per model call), else, for
// claude-code-acp 0.16.2 (which reports none over ACP), what Claude Code's
// transcript of the session (<CLAUDE_CONFIG_DIR or ~/.claude>/projects/
// */<session>.jsonl) gained during the turn, each assistant message once.
//
// Agents add text of their own to the answer (claude-agent-acp 0.101
// streams a warning chunk after it); it is kept as part of the output.
//
// # Capabilities
//
//	OutputSchema  false  ACP has no standard output schema
//	ToolFilter    false  ACP has no standard tool filter
//	Persona       false  ACP has no standard system prompt
//	DepthLimit    false  the manager enforces depth on delegations made
//	                     through our callback, but an agent may nest
//	                     agents of its own that no cap of ours can see
//	model, effort refused ACP v1 has no standard way to choose either, so a
//	                     request naming one is refused (UNSUPPORTED_CAPABILITY)
//	                     by Prepare rather than run on the agent's own choice;
//	                     configure the agent's model in its own command line
//
// TestCapabilitiesAreRefusedBeforeStart pins that requests needing them are
// refused with UNSUPPORTED_CAPABILITY before any process starts. The
// deployment's depth cap still holds for every delegation the child makes
// through this server.
//
// # Continuable children and resume
//
// The provider is continuable. An activation keeps its process between
// queued turns; when the child settles the process is stopped, and its next
// activation (a follow-up, or a restart of the server) starts a new process
// and continues the journal's session with session/load. An agent that does
// not offer loadSession (or fails to load the session) continues in a new
// session without its earlier conversation: the journal notes it and
// records the new session id. Such a child is still resumable, but the
// agent itself forgets what came before.
//
// # Confinement
//
// With Options.Confine in sandbox.WorkspaceWrite (the server's default
// where the kernel has Landlock), the agent's process and everything it
// starts run in this server's sandbox: writes only in the child's cwd, a
// temp dir of the process's own ($TMPDIR, removed after) and the agent's
// state directories, nothing else of the home directory readable but the
// toolchains and the agent's installation, the network on, no
// capabilities. A known agent's state directories, under its HOME (created
// when missing): qwen ~/.qwen; gemini ~/.gemini; opencode
// ~/.local/share/opencode, ~/.config/opencode, ~/.cache/opencode,
// ~/.local/state/opencode; copilot ~/.copilot, ~/.cache/copilot (where
// it unpacks its bundled package); claude-code-acp and
// claude-agent-acp ~/.claude and ~/.claude.json, created holding {} (with
// CLAUDE_CONFIG_DIR, that directory). An unknown agent's go in
// Confine.WriteRoots (the config's confine.write_roots).
//
// # Caveats
//
// Cancelling the ctx of the SDK's Prompt call (v0.13.0) makes it return at
// once and drop the agent's answer; that is why a turn sends session/cancel
// itself and waits for the answer under its own bound. The driver sets the
// connection's logger to the provider's, since the SDK logs to
// slog.Default otherwise.
package acp
