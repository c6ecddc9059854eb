// Package workspace is the small file and shell tool set of in-process
// children: read_file, list_dir, search and write_file, plus run_shell when
// the deployment enables it (DESIGN.md §6). [Tools] builds the tools for one
// working directory, the root; [Names] lists their names so that a tool
// filter can be validated before a child starts.
//
// # Confinement
//
// The file tools reach nothing outside the root:
//
//   - Every path argument is relative to the root; an absolute path is
//     accepted only if it lies inside it. Paths are cleaned lexically first,
//     so "a/../b" is "b" and "../x" is refused.
//   - Symbolic links are resolved (the longest existing prefix of the path,
//     with filepath.EvalSymlinks) and the real location must lie inside the
//     real root. Links between places inside the root work, relative or
//     absolute; a link leading out is refused for reading, listing,
//     searching and writing, including writing through it and creating a
//     file under a linked directory.
//   - The operations themselves go through an [os.Root] on the real root,
//     which refuses escapes by construction, so a path changed between the
//     check and its use still cannot leave the root. search does not follow
//     symbolic links while walking.
//   - write_file writes nothing in a git directory: a path with a
//     component named .git (in any case, and as a case-insensitive or
//     HFS+ file system would read it), as given or after its symbolic
//     links are resolved, is refused. Git runs commands named there
//     (core.fsmonitor in .git/config, hooks), and a worktree's .git file
//     decides which repository git uses. There is no delete or rename.
//   - What os.Root does not prevent is not prevented here either: mount
//     points and bind mounts inside the root, and hard links to outside
//     files made by someone else.
//
// run_shell is confined by [Options].Sandbox (package sandbox), by default
// in mode workspace-write: the command, and everything it starts, can
// write only in the root and in a temporary directory made for the one
// command ($TMPDIR, removed after it) and the cache directory; it can read
// everything but the server user's home directory (there only the root,
// the toolchains and the configured read roots); it has no network, no
// capabilities, and cannot signal or connect (abstract sockets) outside
// its own tree. Read-only mode also keeps the root unwritable. In mode
// unconfined it starts /bin/sh -c with the server's privileges and may
// read and write anywhere the server can. Either way its environment is
// the server's minus variables whose names suggest credentials, and it is
// off unless [Options].Shell is set.
//
// What it does guarantee: nothing the command starts outlives the call.
// Where the binary calls subreaper.Main (the server does; Linux), the
// shell runs under a child-subreaper supervisor: when the shell exits,
// times out or is cancelled, every process it started is killed and
// reaped before the call returns, also those that left its process group
// or session (setsid, a double fork, nohup). Elsewhere the shell leads its
// own process group and the whole group is killed then; a process that
// moved to another group escapes that. The shell is always waited for (no
// zombie), and on Linux the group is killed before its leader is reaped,
// so the group id cannot have been reused.
//
// # What the model sees
//
// Arguments are decoded strictly against the advertised JSON Schema (the
// schema and the decoder are built from one description): unknown fields,
// wrong types and missing required fields are errors naming the field.
// Errors say what went wrong and what to do instead, in terms of the
// model's own path argument; they never contain the host path of the root.
// Output is bounded: read_file by MaxReadBytes, cut at a line boundary
// with a note giving the offset_line to continue from; list_dir, search
// (also at 200 matches) and run_shell by MaxOutputBytes, each with a note.
//
// The tools hold no state between calls (each call opens the root afresh)
// and are safe for concurrent use.
package workspace
