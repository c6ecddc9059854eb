// Package codex provides the codex provider: children that are runs of the
// Codex CLI (`codex exec --json`), continued turn after turn on one Codex
// thread with `codex exec resume <thread_id>`.
//
// The package owns the command line, the mapping of Codex's JSONL events to
// the child's journal and result, and the child's process: one process
// group per turn, nothing resident between turns. The thread lives in
// Codex's own session files (under the child's CODEX_HOME); its id is
// recorded in the journal as a session event the moment thread.started
// arrives, so a follow-up, an interrupted turn's successor and a cold
// resume after a server restart all continue the same thread. The
// provider contributes the creation inputs and the driver; the manager runs
// every child, one-shot or continuable, from that driver.
//
// # Commands
//
//	first turn    codex exec [Args] --json --skip-git-repo-check --ignore-user-config -s SANDBOX -C CWD [-m MODEL] -c ... [--output-schema FILE] -
//	later turns   codex exec [Args] --json --skip-git-repo-check --ignore-user-config -s SANDBOX -C CWD [-m MODEL] -c ... [--output-schema FILE] resume THREAD -
//	one-shot run  the first form with --ephemeral (DriverRequest.OneShot: the thread is not kept)
//
// The exec-level options go before the resume subcommand (codex 0.171's
// `exec resume` takes no -C or -s of its own; placed before it they apply).
// The prompt is "-": the turn's inputs, joined by extturn.Prompt, are
// written to stdin, which is then closed. The -c overrides come in this
// order, so that a later one wins: the user's model settings carried over
// (see Isolation); the provider's own, approval_policy="never",
// features.multi_agent=false and features.multi_agent_v2=false, with a
// persona developer_instructions, with a callback endpoint
// mcp_servers.subagent.{url,bearer_token_env_var,default_tools_approval_mode};
// then Options.Config, so an explicit setting there wins; last the child's
// effort (Descriptor.Effort, the subagent call's) as model_reasoning_effort,
// since a call's own choice is the most specific. MODEL is the call's model
// (Descriptor.Model: Codex's own model id), else Options.Model.
//
// # Confinement
//
// With Options.Confine in sandbox.WorkspaceWrite (the server's default
// where the kernel has Landlock), each turn's Codex process and everything
// it starts run in this server's sandbox (package sandbox, applied by the
// subreaper supervisor): writes only in the child's cwd, a temp dir of the
// turn's ($TMPDIR, removed after) and $CODEX_HOME (else ~/.codex, created
// when missing); nothing else of the home directory readable but the
// toolchains and Codex's own installation; the network on (Codex needs its
// API); no capabilities. Codex's own sandbox cannot run inside it (its
// bubblewrap needs the user namespaces the seccomp filter refuses; its
// legacy Landlock variant refuses to restrict files without bubblewrap),
// so a confined child runs -s danger-full-access unless Options.Sandbox
// says otherwise: its commands are confined by ours, network included
// (TestRealCodexRunsConfined: a real Codex's command cannot write outside
// its workspace or read a secret under $HOME, and can unconfined).
//
// # Isolation
//
// A child starts none of the user's own MCP servers and is unaffected by
// how the user registered this server (under any name, "subagent"
// included): the only MCP server it has is its callback. Codex merges -c
// overrides into the user's $CODEX_HOME/config.toml table by table (an
// override cannot remove a [mcp_servers.NAME] entry; -c mcp_servers={} is
// a no-op, and a callback url merged into a stdio entry named subagent is
// a config error: "url is not supported for stdio"), so the child's Codex
// runs with --ignore-user-config and loads no config.toml of the user's at
// all. Without it the project's .codex/config.toml is not trusted either
// (trust is recorded in the user's config), so a project's MCP servers
// stay off too.
//
// What the child keeps of the user's setup:
//
//	CODEX_HOME      unchanged: auth.json (the user's login), the session
//	                files a resume reads, AGENTS.md and the rest stay where they are;
//	                --ignore-user-config skips only config.toml. So a thread resumes
//	                across the change and across server restarts.
//	model settings  read by the provider from the same config.toml (CODEX_HOME, else
//	                HOME/.codex, as Options.Env sets them) and passed as -c overrides:
//	                model and every model_* key (model_provider, model_providers with
//	                their env_key, auth command and headers, model_reasoning_effort, …),
//	                openai_base_url, chatgpt_base_url, cli_auth_credentials_store,
//	                forced_login_method and forced_chatgpt_workspace_id; with a legacy
//	                `profile = NAME`, that profile's own such keys after them.
//	the rest        not carried: mcp_servers, projects (trust), approval and sandbox
//	                settings, notify, hooks, features, plugins, …. What a deployment
//	                wants of that goes in Options.Config.
//
// The config is read afresh each turn; one the provider cannot parse ends
// the turn with an error naming the file, and no Codex runs. Options.Args
// with --ignore-user-config of their own mean the operator keeps the user's
// config out entirely: then nothing is carried.
// TestAChildStartsNoneOfTheUsersMCPServersAndKeepsTheirModelSettings,
// TestRealCodexChildSeesOnlyThisServer (which first checks that the same
// CLI run plainly does start them),
// TestRealCodexChildKeepsTheUsersLoginAndInstructions.
//
// Caveats: the carried values are on the child's command line, which other
// local users can read; a provider's secret belongs in an environment
// variable (env_key, env_http_headers), not in experimental_bearer_token or
// http_headers. The system-wide /etc/codex/config.toml and managed
// configuration are the administrator's and still apply.
//
// # Events
//
//	thread.started                  the session handle (extturn SetSession)
//	item.completed agent_message    an assistant message; the last is the output
//	item.completed reasoning        ignored
//	item.completed command_execution, file_change, mcp_tool_call, web_search
//	                                a note ("ran: <command> (exit N)"); a failed or refused one
//	                                is also a diagnostic line
//	item.completed error, error     a diagnostic line; not terminal
//	turn.completed                  completed; its usage is the thread's running total, so the
//	                                turn is credited the difference from what the journal
//	                                already counted for the thread
//	turn.failed                     error, its message first in the diagnostic
//	exit without either             error, with the exit status and the stderr tail
//	interrupt (ctx cancelled)       aborted: the process group is stopped (SIGTERM, SIGKILL
//	                                after 400ms) and reaped, well within a second
//	Options.Timeout passed          error, group stopped likewise
//
// With an output schema, the final agent message must be a JSON object that
// validates against it; it is then the result's Structured, else the turn
// ends with an error (Output keeps the text).
//
// # Capabilities
//
//	OutputSchema  true   written to a temp file for --output-schema (Codex sends it to the model
//	                     as a strict json_schema text format) and the answer validated here.
//	                     TestAnOutputSchemaGoesToCodexAndItsAnswerIsStructured,
//	                     TestRealCodexHonoursTheOutputSchema.
//	Persona       true   -c developer_instructions=<persona>: the real CLI sends it to the model
//	                     as a developer message. TestAPersonaBecomesDeveloperInstructions,
//	                     TestRealCodexCompletesAFollowupAndAColdResumeOnOneThread.
//	DepthLimit    true   Codex's own sub-agents (features multi_agent, multi_agent_v2) are off, so
//	                     a child nests only by calling this server back, where the manager
//	                     enforces the depth cap. The real-CLI test checks that no agent tool is
//	                     offered to the model. The user's own MCP servers (this server over
//	                     stdio, say, which would be a second way to nest) are not started
//	                     (see Isolation); Options.Config and the system config could still
//	                     add one, which a deployment must not do.
//	ToolFilter    false  Codex's built-in tools cannot be listed and removed per child; a filter
//	                     is refused before start. TestCapabilitiesAreCheckedBeforeStart.
//
// # Headless policy
//
// No approval is ever left pending: approval_policy="never" makes Codex
// run what its sandbox (Options.Sandbox, default workspace-write: writes
// inside the cwd only) permits and hand anything else back to the model as
// a failed command. Each failed or refused command is a diagnostic line
// (TestASandboxDenialIsDiagnosed). Allowing more is explicit configuration:
// Options.Sandbox, or approval settings in Options.Config.
//
// Under that policy Codex refuses every MCP tool call that would need an
// approval, including calls to this server. When the child has a callback
// endpoint, this server is configured as the MCP server "subagent"
// (streamable HTTP), its bearer token passed through the TokenEnv variable
// (bearer_token_env_var: the token is never on a command line) and its
// tools pre-approved (default_tools_approval_mode="approve"): the server
// authorises each call itself, with a token bound to this child.
// TestTheChildCallsThisServerBackWithItsBearerToken,
// TestRealCodexCallsThisServerBackOverMCPWithoutAnApproval.
//
// # Processes
//
// The child's environment is Options.Env and nothing else of the server's
// (plus TokenEnv when there is a callback), so Env must give Codex what it
// needs: HOME or CODEX_HOME (which also locate the config.toml the model
// settings are read from), the variables its model provider's env_key
// names, and a PATH that finds node for the npm launcher. Each turn's
// process runs in its own group via the proc package; interrupt, timeout
// and server shutdown stop the whole group, and a turn never returns with a
// member of the group still running. Stdout is read to its end on a
// duplicate of the pipe (exec closes its own read end once the process is
// reaped, which would lose the last lines); lines are always drained, so
// Codex never blocks on a full pipe.
//
// # Caveats
//
// Interrupting a turn stops the process; Codex writes its session files as
// it goes, so the next turn resumes the thread with whatever the
// interrupted turn had recorded. A turn whose process died before
// thread.started leaves no thread id; if no earlier turn recorded one
// either, the next turn starts a new thread and says so in its diagnostic.
package codex
