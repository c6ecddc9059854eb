// Package edge owns what MCP clients connect to: the tool definitions,
// their input validation, the caller's identity, the mapping from the
// manager's results to MCP tool results, the sessions, the durable tasks
// layer (taskdoc.go), the HTTP guards and the one token registry.
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
package edge
