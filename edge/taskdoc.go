// Durable MCP tasks (tasklayer.go): the Tasks extension
// (io.modelcontextprotocol/tasks, SEP-2663, on protocol 2026-07-28) as a
// layer of ours in front of mcp-go's handler, not a fork of it. mcp-go
// v1.2.1 knows only the older in-memory 2025-11-25 Tasks API, whose task
// context ends with the first reply (mark3labs/mcp-go#897).
//
// The layer sees every request first (TaskLayer.Handle on a daemon or
// --no-daemon stdio session, TaskLayer.HTTP in front of the streamable HTTP
// handler) and hands on, byte for byte, everything that is not its own:
//
//   - tasks/get, tasks/update and tasks/cancel are answered here;
//   - a tools/call of subagent or send_message whose request declares the
//     extension in _meta["io.modelcontextprotocol/clientCapabilities"]
//     .extensions, from a root principal, runs through mcp-go's handler
//     on a goroutine the layer owns, in task mode: the inner call's
//     _meta names the layer's call, and its handler's request carries it
//     (call.task). When the call starts a child (a continuable subagent,
//     a send_message with a wait), the handler's start in task mode
//     (Server.startContinuable, Server.followup) starts it without an
//     in-band wait, so its record is committed before its id is known,
//     then waits on its turn through manager.AwaitTurn (a follow-up
//     forwarded to the instance the child is resident on:
//     manager.AwaitSent, which waits on the store); the layer commits the task record and answers
//     the request with the task handle, and the call goes on: its answer,
//     exactly the CallToolResult a foreground call gives (notices riding
//     along included), becomes the task's result. A call that starts no
//     child (a refused argument, a one-shot provider, a send without a
//     wait) is answered as it would be, without a task.
//
// The capability is advertised through mcp-go's server.WithExtensions
// (Capabilities), in server/discover and initialize alike.
//
// # Guarantees
//
//   - A handle is replied only once its record is committed to the Store
//     (the session store, persist), so a tasks/get for it resolves.
//   - Without the declaration nothing changes: the message reaches mcp-go
//     as it came and its answer is returned untouched.
//   - A task belongs to the principal that created it; any other
//     principal's tasks/get, tasks/update or tasks/cancel of it gets the
//     spec's not-found error (-32602), as an unknown id does.
//   - A task outlives its session: its call runs under a context that the
//     request's end no longer reaches once the handle is replied. Nor does
//     a notifications/cancelled of the request's id (the call reaches the
//     MCP server under an id of the layer's own, and the client's id is
//     forgotten once answered): only tasks/cancel cancels a task. Before
//     the handle, such a cancel ends the call, as for any request.
//   - Across a restart a task is answered from the store. Recover (at
//     start, after the manager's) resolves each task a stop left working:
//     completed with the result rebuilt from the child's stored outcome
//     when its last turn completed (a subagent task; send_message tasks
//     are not rebuilt), else failed with the diagnostic — never working
//     forever.
//   - Several instances on one store (TaskOptions.Instance set): a task
//     records the instance whose call waits on it, which rewrites the
//     record's beat every Heartbeat while it works. Any instance answers
//     tasks/get from the store; another instance resolves a working task
//     (at tasks/get, in Recover, in the sweep) only once its beat is three
//     Heartbeats old, as one a stop left. tasks/cancel at another
//     instance than the runner sets the stored record's CancelRequested;
//     the runner's beat returns the record it wrote, and the runner
//     honours a request in it as a tasks/cancel of its own (cancelTask),
//     so within a Heartbeat. Every write of a stored task after its
//     creation is a compare-and-set (taskstore.Store.UpdateTask): the
//     request, the beat (which changes the beat alone), the runner's
//     settled record and another instance's resolve each apply only
//     while the stored task works, so a settled task is never written
//     working again nor settled twice. The store orders a request and the
//     runner's result: a result stored first stands (the request finds
//     the task settled and stores nothing); a request stored first makes
//     the task cancelled, its call's result kept in the record, even when
//     the turn had ended on its own before the runner heard of it: the
//     client was told its cancel was accepted while the task worked. (A
//     tasks/cancel at the runner itself is ordered against the turn's
//     end instead: a turn that finished first stays completed.)
//   - A task expires TTL after it settled: a tasks/get then deletes it and
//     answers -32602 "Task has expired"; Recover deletes expired tasks,
//     and so does a sweep every Options.SweepEvery (10 minutes) after it.
//     ttlMs is counted from createdAt, as the spec counts it: while the
//     child works, at least TTL from now.
//   - tasks/cancel interrupts the child's turn (manager.Interrupt, as
//     interrupt_agent does); the call then answers aborted and the task is
//     cancelled. A turn that finished first stays completed.
//   - Every answer has the spec's wire shape: the protocol tests check
//     each against schemas/tasks-2026-07-28.json, our transcription of the
//     extension's shapes (closed: no field beyond the spec's). Over HTTP a
//     -32021 comes with status 400, as the base protocol requires.
//   - tasks/update is acknowledged and reserved: no task asks for input
//     yet (a later issue).
//   - An error tool result (isError) stays one inside a completed task;
//     failed is kept for JSON-RPC errors and for a call a stop cut off.
//
// # Caveats
//
//   - Close makes the calls of live tasks stop waiting (their children go
//     on) without storing what they then answer; the next start resolves
//     those tasks.
//   - A task's wait is the foreground call's: an explicit wait_seconds, or
//     a configured bound, that passes first completes the task with the
//     "still running" handle a foreground call would give.
//   - A child whose turn ended before the hook could register (a race of
//     microseconds against a model round trip) is answered from its last
//     outcome, without its worktree changes or structured output; its
//     settlement notice is then delivered as for a background child.
//
// # What Claude Code 2.1.332 does (probed offline, stdio)
//
// With `claude -p --input-format stream-json --output-format stream-json
// --verbose`, CLAUDE_AUTO_BACKGROUND_TASKS=1,
// CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF=1 and
// {"cachedGrowthBookFeatures":{"tengu_glowing_lark":true}} in
// $CLAUDE_CONFIG_DIR/.claude.json:
//
//   - It opens with server/discover (id "server-discover-probe-1"), never
//     initialize, and speaks 2026-07-28: every request, tools/list
//     included, carries _meta protocolVersion, clientInfo
//     {name:"claude-code", version:"2.1.332"} and clientCapabilities
//     {roots, elicitation, extensions:{"io.modelcontextprotocol/tasks":{}}}.
//     tools/call adds "claudecode/toolUseId" and a progressToken.
//   - A handle it accepts: flat, resultType "task", taskId, status
//     "working", statusMessage, createdAt, lastUpdatedAt, ttlMs,
//     pollIntervalMs (its poller reads status and pollIntervalMs). Its
//     model is told the call "was moved to the background as task <its
//     own id>" and the turn goes on; it polls tasks/get {taskId} at
//     pollIntervalMs; on completed it starts a turn whose user message
//     holds <task-notification> with <status>completed</status> and
//     <result> the result's structuredContent as JSON.
//   - A stream-json control_request {subtype:"stop_task", task_id:<its
//     own id>} sends tasks/cancel {taskId} (twice, seen), and it emits a
//     task_notification with status "stopped".
//   - The client and the spec agree on the wire shapes above; the spec
//     (modelcontextprotocol/ext-tasks) is followed where the client is
//     silent: resultType "complete" on tasks/get, tasks/update and
//     tasks/cancel answers, -32602 for unknown ids, -32021 for an
//     undeclared task request.
//   - With CLAUDE_CODE_DISABLE_MCP_TASKS=1 it declares no extensions, and
//     refuses a task handle ("Unsupported result type 'task' for
//     tools/call"): why no task ever answers an undeclared request.
//     Then a call that runs longer than CLAUDE_CODE_MCP_AUTO_BACKGROUND_MS
//     is backgrounded by Claude Code itself: the call stays an ordinary
//     foreground call here, its model hears "moved to the background as
//     task <its id>", and the call's result comes back to the model in a
//     <task-notification> (TestClientBackgroundRealClaudeCode; a later
//     delegation in the session completes too).

package edge
