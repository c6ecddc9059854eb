// Package daemon owns the one process per data directory that serves every
// MCP session of a user: the unix socket it listens on, the handshake, the
// connections behind it, the relay, and how a daemon is found, started,
// replaced and retired. It knows connections and processes, not MCP: past
// the handshake it hands each session's connection to Options.Serve (the
// MCP edge, wired by the command), and it links no MCP library.
//
// Layout in the data directory (made 0700):
//
//	daemon.lock   flock held for the daemon's whole life: at most one per directory
//	daemon.sock   the socket; a connection from another uid is refused
//	daemon.log    the daemon's stderr when a session started it
//
// A data directory whose socket path would not fit a sockaddr_un (about 100
// bytes) gets its socket in a 0700 directory under the system's temporary
// directory instead, named by a hash of the data directory. That name is
// guessable, so the directory is used only when it is a real directory of
// the daemon's uid with mode 0700; and a client checks that the process
// serving the socket runs as its own uid before it sends a byte.
//
// # Bounds
//
// A hello is at most 64 KiB and must arrive within 10 s. Past it, the
// bounds of a session are the edge's (edge.MaxInFlight requests at once,
// edge.ByeTimeout for the handover line), so no client can hold the data
// directory.
//
// # Protocol
//
// A client connects and writes one JSON line, a Hello; the daemon answers
// with one JSON line, a Welcome. After that, a session connection carries
// newline-delimited JSON-RPC (MCP's stdio framing) both ways, so `serve`
// relays bytes and parses nothing (internal/framing bounds its lines).
// Hello.Op other than "" asks the daemon
// to stop ("stop") or to hand over to a newer binary ("takeover"): the
// daemon stops taking work, shuts its children down (their active marks
// stay, so the next daemon recovers them as resumable), releases the
// store and the lock, and closes the asking connection last, so that its
// EOF means the directory is free.
//
// The admin ops "prune", "compact", "ui" and "worktree-rm" (admin.go) are the human CLI's,
// never a model's: no MCP tool deletes. The hello carries the op and its
// Args; the daemon answers with its Welcome, runs Options.Admin (which
// counts as a session, so the daemon does not go idle under it) and writes
// one AdminReply line, then closes. They have the authority of a session
// of the same uid: a prune removes only the hello's principal's children
// ("local" when it names none); a compaction is of the whole store; ui
// answers the web view's URL for the hello's principal; worktree-rm
// removes the worktree of one of the hello's principal's children.
//
// # Settings
//
// A session's hello carries its settings (Settings: the variables that
// shape children, the config file it names), because the daemon's own
// environment is only that of the session that happened to start it. The
// daemon hands them to Options.Serve, which runs the session's children
// with them; a session whose settings differ from the daemon's own is
// said once in the log at its hello and listed by `daemon status`
// (Welcome.Differing) while connected, by variable names, never values.
// Values, secrets included, cross only the user's own socket and stay in
// memory; what a child records of them, and where a resumed child's key
// comes from, is the server's (cmd/mcp-subagent, settings.go).
//
// # Starting
//
// Connect dials the socket; when nothing answers it starts `<self> daemon`
// detached (its own session, stdin /dev/null, stderr to daemon.log), which
// reports on an inherited pipe that it is ready or that another daemon
// holds the lock (two sessions starting at the same moment), and dials
// again. A daemon killed with -9 leaves a stale socket and a free lock; the
// next start takes the lock, removes the socket and recovers the store.
//
// # Lifetime
//
// Children belong to the daemon, not to the session that started them: a
// session that ends leaves its children running. The daemon exits after
// IdleTimeout with no session connected and no child live.
package daemon
