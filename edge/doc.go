// Package edge owns what MCP clients connect to: the tool definitions,
// their input validation, the caller's identity, the mapping from the
// manager's results to MCP tool results, the sessions, the durable tasks
// layer (taskdoc.go), and the HTTP guards (httpguard.go: the loopback
// Host check, the view's Origin check, the bearer and callback token
// checks). Its tokens (HTTP bearer, callback, view) live in one registry,
// edge/tokens.
//
// # Sessions
//
// A session is the edge's own: a stream session (stream.go: a daemon
// connection, which the daemon hands over through its Options.Serve, or
// stdio with --no-daemon) is served by ServeConn or ServeStdio, which keep
// it in the Server's table while it runs; an HTTP session is mcp-go's,
// tracked by the registration hooks (sessions.go). The table tells the two
// apart by the session's type, never by a marker method or an id.
//
// # Task mode
//
// A tools/call the tasks layer runs is in task mode, and its handler's
// request says so (call.task): the layer names its call in the inner
// request's _meta, and a handler that starts a foreground child starts it
// through that mode (startContinuable, followup), which hands the child to
// the layer. Reading the subagent and send_message handlers shows which
// starts may become tasks.
//
// A child's question goes to the person through the client of a root
// call that waits for the child, when the client declared elicitation
// (elicit.go): as an input_required result with a sealed requestState to
// a 2026-07-28 client, which retries with the answer; as
// elicitation/create to an older one; else it stays the manager's notice.
//
// The same handlers serve every caller: a root MCP client (identified by the
// transport: "local" over stdio, a token's principal over HTTP) and an
// in-process child agent, which calls them in Go through AgentTools. The
// caller's identity never comes from arguments, and is never defaulted: a
// call the transport marked with no principal, or whose callback token was
// revoked after the transport resolved it, is refused with UNAUTHORIZED.
//
// A completed run is a result with structuredContent; any other stop reason
// is a result with isError, carrying the diagnostic and the partial output.
// A bad argument is a tool error naming the field; the server keeps serving.
// Arguments are bounded (Limits) and checked in the handlers before they
// are validated or copied, so the bounds hold for every transport; an
// error result quotes at most a few hundred bytes of its input. A label
// (the subagent description, shown in lists, logs and terminals) must be
// plain one-line text: NUL and other control characters (so ANSI escape
// sequences), line separators, bidi controls and invalid UTF-8 are
// refused, not stripped, so what is shown is what was asked for; labels
// stored before that check are shown escaped.
// Progress notes sent while a foreground run works may be dropped; the
// result never is.
//
// The subagent tool's model and effort pass through to the provider, which
// checks them: the published schema lists the configured model names
// (manager.ProviderInfo.Models) as an enum when every provider takes them,
// else in the field's description; the validating schema has no enum, so
// an unknown name is the provider's INVALID_REQUEST naming the field and
// the choices.
//
// The subagent tool's isolation ("worktree") passes through to the
// manager, which refuses what it cannot give naming the field; a result
// of an isolated child carries its worktree and changes (structured and,
// in one line, as text), and its list rows count as the project of a root
// session whose directory is, or lies in, the worktree's repository.
//
// Transcripts are resources (resources.go): the template
// subagent://agents/{id}/transcript, read through the manager's Transcript
// for the caller (only its lineage's principal may), the caller's tree
// added to resources/list by a hook (a page of manager.MaxPageLimit, its
// nextCursor the listing's own), and subscriptions served from hooks
// too: each subscribed session gets notifications/resources/updated from
// a manager Watch, forwarded by one goroutine per subscription that ends
// on unsubscribe, when its session unregisters, or at CloseSubscriptions.
// Sessions whose client is ObserverClient (the command line) take no
// pending notices with their tool results.
//
// The package knows nothing of vendors: it sees providers only through the
// manager.
//
// # Why mcp-go and not the official Go SDK
//
// We compared github.com/modelcontextprotocol/go-sdk with mcp-go v1.2.1
// for this edge (issue 25) and stay on mcp-go. What the official SDK would
// give: Server.Connect makes one ServerSession per connection (our
// streamSession does that by hand over mcp-go's MCPServer), a custom
// method API (AddReceivingCustomMethod, in its newer releases) for
// tasks/get, tasks/update and tasks/cancel, extension capabilities, and
// ServerSession.Elicit. What it would not remove:
//
//   - The tasks layer works on raw messages in front of the handler: it
//     re-dispatches a declaring tools/call under an id of its own (so the
//     client's notifications/cancelled of an id it answered with a task
//     handle reaches nothing), answers with the handle while the call
//     goes on, and passes everything else on byte for byte. The SDK checks
//     a request against its method table before any middleware runs, so
//     the three tasks methods would become custom methods, but the
//     tools/call side stays ours either way; it is the larger part.
//   - The stream framing is ours for reasons no SDK transport covers: a
//     message over max_message_bytes is refused by the id in its first
//     bytes without being held (internal/framing); ids come back byte for
//     byte (encodeResponse; TestIDsComeBackByteExact); at most MaxInFlight
//     requests run per session with backpressure; a handover line goes out
//     under a write deadline; a relayed session's cut-short answers are
//     not sent. A custom SDK Transport would keep all of that and add an
//     adapter.
//   - The HTTP side (the guards here; per-principal session binding,
//     idle expiry and the DELETE without a token in cmd/mcp-subagent) is
//     built on
//     mcp-go's StreamableHTTPServer and its session hooks, and the tool
//     list is filtered per session (WithToolFilter: report only for
//     children, a session's own model names); the SDK has no per-session
//     tool filter, so tools/list would need a middleware rewriting its
//     result.
//   - mcp-go v1.2.1 already has what the SDK was to bring for questions:
//     server-initiated elicitation (MCPServer.RequestElicitation) and
//     the 2026 multi round-trip input_required results (SEP-2322).
//
// So a switch would replace one library's session plumbing (about 150 of
// stream.go's lines) with another's, rewrite three transports and the
// resource hooks, and remove no protocol code we wrote for a behaviour;
// it would also put a second MCP library in go.mod for the migration.
// Revisit when mcp-go stops tracking the spec, or when the SDK's
// transports take a bounded, byte-exact line framing of ours.
package edge
