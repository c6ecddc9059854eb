// Package view is the live web view of a principal's tree of children:
// an http.Handler serving one embedded page (HTML, CSS and JavaScript
// compiled into the binary with go:embed; no external asset, no CDN, it
// works offline) and its API, over a narrow Source of what it needs from
// the manager.
//
// Authority. A view acts for one principal with the same authority as a
// stdio session of that principal: every read and every action goes
// through the manager's own checks (Manager.ListDescendants rooted at the
// principal, Transcript and Watch with their lineage check, Interrupt for
// a direct child or a live ancestor, Followup for the direct parent only,
// AnswerVia for whoever may send to the child), as a root caller with no
// session. A principal's view token
// (Server.Token: 128 bits from crypto/rand, base64url, in the page's query
// string as ?token=) is the only credential: a request without a valid
// one gets a plain "token required" page (403) and no data, and the API
// answers 401 without a token and 403 with an unknown one. A token lives
// as long as the Server (the daemon); each principal has one, so asking
// again gives the same URL. Actions must be POSTs with a JSON body and no
// foreign Origin, and responses carry no-referrer and a strict CSP so the
// token does not leak to another origin.
//
// Where a principal gets its URL. The daemon serves the view on its own
// loopback listener (127.0.0.1, a free port), started lazily by the first
// `mcp-subagent ui` (the daemon's "ui" admin op) and kept while the daemon
// lives; the op answers the URL of its caller's principal (local). Under
// `serve --http`, the same view is mounted at /view/ on the HTTP listener,
// and GET /view/url, authenticated by a principal's bearer token like /mcp,
// answers that principal's view URL (the bearer token is exchanged for a
// view token; the browser never holds the bearer token).
//
// Live updates are server-sent events. The tree stream (api/tree) sends
// one bounded snapshot of the tree (its newest rows), then only the rows
// that changed and the ids that went away. It re-reads the tree when the
// manager's lifecycle events say a child started or settled, and on a
// short tick while a child is resident (a turn ending inside an activation
// is no lifecycle event; with none resident the tick is ten times slower,
// for removals). The tree streams of one principal share that reading:
// one feed per principal lists the tree once per wake-up and hands the
// bounded, encoded rows to every stream, so ten tabs cost one listing per
// tick, not ten. A principal holds at most Options.MaxStreams streams
// (tree and transcript); one more is answered 429. A transcript stream (api/transcript) sends the entries it
// has not sent yet whenever the manager's Watch signals; for a child
// resident at another instance sharing the store, the Watch follows the
// store (each step of a turn as its owner commits it), and the tree lists it
// with its owner's status. Each stream is
// served on its request's own goroutine, which ends when the request's
// context ends or Close is called; Close waits for every stream to end.
//
// The page marks each transcript entry's source kind in words and in
// style: the child's own messages, its parent's, a child's
// subagent-report, the runtime's subagent-settled notice, tool calls and
// tool results. A child asking the person (status input_required) shows
// its questions with a way to answer each (api/answer: allow, deny or an
// option's words for an approval, free text for a question), recorded as
// the person's answer given in the web view (seam.ViaWebView). Its send,
// answer and interrupt buttons are off for a grandchild: only a child's
// parent may steer it, and a principal is the parent of its root children
// only.
package view
