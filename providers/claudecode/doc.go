// Package claudecode provides the claude-code provider: children that are
// Claude Code CLI agents. Each turn is one `claude -p` process in the
// child's cwd; a continuable child's turns continue one Claude session
// (--session-id on the first turn, --resume after), so follow-ups and a
// restart of this server pick up the same conversation.
//
// # What it owns
//
// The command line of every turn, reading the CLI's stream-json output
// into the child's journal (through providers/internal/extturn), mapping
// the CLI's result to a stop reason, and the turn's processes (through
// providers/internal/proc). The lifecycle — one-shot runs included, which
// the manager runs from the same driver — activation, persistence, depth
// and the callback endpoint belong to the manager.
//
// # Command line
//
//	claude [Options.Args] -p --output-format stream-json --verbose
//	  [--model=M]                      Descriptor.Model: the call's Claude model id or alias, else Options.Model
//	  [--effort=E]                     Descriptor.Effort: the call's effort (low, medium, high)
//	  --permission-mode=P              Options.PermissionMode; zero: dontAsk (default under Options.Ask)
//	  [--permission-prompt-tool mcp__subagent__permission_prompt]  Options.Ask, when the person can be asked
//	  --session-id=UUID | --resume=ID  first turn | later turns and cold resume (ID: the journal's last session event)
//	  --no-session-persistence         instead, for one-shot runs (DriverRequest.OneShot)
//	  [--json-schema=S]                output schema, compacted
//	  [--append-system-prompt=P]       persona
//	  [--tools B…]                     allow filter: the built-in tools it names
//	  [--allowedTools R…]              allow filter's names; callback tools the filter keeps
//	  --disallowedTools Task Agent Workflow [deny filter's names] [callback tools filtered out]
//	  --strict-mcp-config [--mcp-config FILE]
//
// The prompt (the turn's inputs, each non-user one under its source kind)
// goes on stdin, so no free text is ever an argument the CLI could read as
// a flag or a subcommand; free-text values use --flag=value for the same
// reason. The process runs in the child's cwd (Header.Cwd) with exactly
// Options.Env as its environment: nothing of the server's environment
// leaks in, and the provider adds nothing.
//
// When the deployment offers a callback (DriverRequest.Callback), FILE is
// a private (0600) temporary file, removed after the turn, holding
//
//	{"mcpServers":{"subagent":{"type":"http","url":URL,"headers":{"Authorization":"Bearer TOKEN"}}}}
//
// — a file rather than the JSON itself, because the command line is
// readable by every local user and the token is the child's identity. The
// child then has this server's tools as mcp__subagent__subagent,
// …send_message, …interrupt_agent, …list_agents and …report, pre-approved
// unless the tool filter removes them. --strict-mcp-config is passed
// always (see Isolation).
//
// # Confinement
//
// With Options.Confine in sandbox.WorkspaceWrite (the server's default
// where the kernel has Landlock), each turn's claude process and
// everything it starts (its Bash tool's commands) run in this server's
// sandbox: writes only in the child's cwd, a temp dir of the turn's
// ($TMPDIR, removed after) and its state, $CLAUDE_CONFIG_DIR or else
// ~/.claude and ~/.claude.json (created when missing, the file holding {}:
// the CLI would create it by a rename in the home directory, which it
// cannot write, and then rewrites it in place); nothing else of the home directory readable but the toolchains and the
// CLI's installation; the network on; no capabilities. Claude Code's own
// sandbox is off by default and is not needed for this.
// TestRealClaudeRunsConfined: a real claude's Bash command writes in the
// workspace but not outside it and cannot read a secret under $HOME, and
// unconfined can; its session in ~/.claude resumes.
//
// # Isolation
//
// A child starts none of the user's own MCP servers and is unaffected by
// how the user registered this server: --strict-mcp-config makes the CLI
// use only the servers of --mcp-config, that is the callback as
// "subagent", or none without a callback. Checked with the real CLI
// (2.1.332), with HOME alone and with CLAUDE_CONFIG_DIR, in
// TestRealCLIChildSeesOnlyThisServer, which first runs the same CLI
// plainly and sees it start the servers: the user scope (.claude.json's
// mcpServers, this server among them as "subagent"), the local scope (its
// projects entry for the child's cwd), the project's .mcp.json in the cwd
// (approved in settings.json), and settings.json's own mcpServers (which
// this CLI does not read anyway). A user's "subagent" does not clash with
// the callback: the callback is the only "subagent" the child has, and its
// tools are mcp__subagent__*. Plugins' MCP servers are ignored the same
// way (checked by hand with --plugin-dir).
//
// Everything else of the user's Claude setup stays as the environment
// (Options.Env) finds it: the login or API key, the model settings, the
// session files a --resume reads, CLAUDE.md, skills and settings.json
// (permission rules in it still apply; hooks in it still run).
//
// # Stream and result
//
// The system/init line names the session, recorded at once as a journal
// session event (so even an interrupted first turn is resumable). Assistant
// text becomes assistant messages (the last one is the output); tool_use
// blocks become notes ("tool_use: Bash"); tool results, thinking and the
// lines of nested agents are not recorded. Synthetic assistant messages
// the CLI writes itself (an API error) are notes, not output. The result
// line ends the turn:
//
//	success, is_error false          completed (with a schema: structured_output, checked against it, or error)
//	success, is_error true           error: an API failure; its message (result) in the diagnostic
//	error_max_turns                  error: "hit its turn limit"
//	error_during_execution           error (aborted when the turn was interrupted)
//	error_max_budget_usd             error: "hit its budget limit"
//	error_max_structured_output_retries  error
//	no result line                   aborted if interrupted; error "timed out after …" on Options.Timeout;
//	                                 otherwise error "exited without a result", with the stderr tail
//
// Usage is the result's: input tokens include cache creation and cache
// reads, cost is total_cost_usd; a turn that died before its result
// counts the messages it saw. Each permission denial in the result is a
// diagnostic line ("denied: Bash (2 times)").
//
// # Capabilities
//
//	OutputSchema  true  --json-schema: the CLI adds a StructuredOutput tool, validates the model's
//	                    call and returns the object; we check it against the schema again.
//	                    Tests: TestStructuredOutputComesFromTheResult; TestRealCLI/structured_output.
//	ToolFilter    true  allow: --tools limits the built-in tools the model is shown and --allowedTools
//	                    pre-approves the names; deny: --disallowedTools removes them from the model's
//	                    context in every permission mode. The callback tools answer to either name.
//	                    Tests: TestToolFilterPersonaAndCallbackFlags; TestRealCLI/persona_and_tool_filter…
//	                    (the tools in the real CLI's request to the model).
//	Persona       true  --append-system-prompt: appended to Claude's system prompt.
//	                    Tests: TestToolFilterPersonaAndCallbackFlags; TestRealCLI (the system prompt).
//	DepthLimit    true  max_depth caps delegation through this server: a child's subagent calls come
//	                    back through its callback as that child, and the manager refuses a start past
//	                    the cap (TestDepthIsEnforcedForDelegationsThroughTheCallback). The CLI's own
//	                    ways to start agents, Task/Agent and Workflow, are always removed, so nesting
//	                    cannot bypass it (checked on the wire in TestRealCLI).
//
// The provider is not a seam.ToolNamer: Claude's tool names are
// open-ended (built-ins vary by version; permission rules such as
// "Bash(git *)" are valid names), so a filter's names are passed through
// unchecked. The CLI ignores a --tools name it does not know.
//
// # Headless policy
//
// No approval is ever left pending: in -p mode the CLI cannot ask, and the
// default permission mode, dontAsk, denies every tool use that is not
// pre-approved (read-only tools run; edits, shell and the like do not
// unless an allow filter names them). Each denial is recorded in the
// diagnostic. Anything more permissive is an explicit configuration
// (Options.PermissionMode acceptEdits or bypassPermissions; the CLI
// refuses the latter as root unless IS_SANDBOX=1 is in Options.Env).
//
// Under Options.Ask (config permission "ask") the CLI runs in the default
// mode with --permission-prompt-tool naming the callback server's
// permission_prompt (seam.PromptTool): a use the mode does not allow is a
// question to the person (seam.DriverRequest.Ask), the tool call held open
// until the person answers, the deadline (Options.QuestionTimeout) denies
// it, or the turn ends. The answer goes back as Claude Code reads it
// (allow with the input unchanged, or deny with why); the journal notes
// who answered, and a refused use is in the turn's diagnostic too.
//
// # Processes
//
// Every turn's CLI runs in its own process group. Interrupt (ctx), the
// per-turn timeout and server shutdown stop the whole group: SIGTERM, then
// SIGKILL after half a second, so an interrupted turn ends within a second
// even if the CLI ignores SIGTERM. A CLI that lingers after its result
// line is stopped after three seconds; when the leader exits, any member
// left in its group is killed too. stdout is read to EOF in its own
// goroutine and the turn waits for the process, so nothing blocks on a
// pipe. A process that leaves the group (setsid) is outside this
// guarantee; the turn still ends, a second after the group is gone.
//
// # Caveats
//
// The CLI keeps sessions under $CLAUDE_CONFIG_DIR (or $HOME/.claude),
// per cwd: Options.Env must keep those stable across server restarts and
// the child's cwd must not move, or the next turn fails ("No conversation
// found with session ID") and ends with StopError; the child is not
// silently restarted on a fresh session. A turn whose CLI died before its
// init line recorded no session; the next turn starts a fresh one.
//
// A permission rule's specifier narrows approval, not the tool: an allow
// filter naming "Bash(git *)" shows the model Bash and pre-approves git
// commands, which dontAsk makes the only ones that run; under
// bypassPermissions it is all of Bash.
package claudecode
