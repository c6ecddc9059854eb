package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/mcp-subagent/mcp-subagent/daemon"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// worktreeRmArgs are the daemon's worktree-rm arguments.
type worktreeRmArgs struct {
	ID string `json:"id"`
}

// runWorktree is `mcp-subagent worktree rm ID`: the daemon (started when
// none runs) removes a child's worktree and its branch, changes and all (a
// changed worktree otherwise stays until the child is pruned). It asks the
// daemon rather than opening the store because the daemon owns the store
// and knows which children are resident: a resident child's worktree is
// refused, since the child may be working in it. A later message to the
// child starts it afresh from its recorded base.
func runWorktree(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "rm" {
		fmt.Fprintf(stderr, "mcp-subagent worktree: the only command is rm\n\n%s", usage)
		return 2
	}
	fs, o, asJSON := adminFlags("worktree rm", stderr)
	// The id may come before or after the flags.
	rest := args[1:]
	var id string
	if len(rest) > 0 && len(rest[0]) > 0 && rest[0][0] != '-' {
		id, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if id == "" && fs.NArg() > 0 {
		id = fs.Arg(0)
	} else if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mcp-subagent worktree rm: unexpected argument %q\n", truncate.Head(fs.Arg(0), echoBytes))
		return 2
	}
	if id == "" {
		fmt.Fprintln(stderr, "mcp-subagent worktree rm: name the subagent whose worktree to remove (its agent-... id)")
		return 2
	}
	if err := checkID(id); err != nil {
		fmt.Fprintln(stderr, "mcp-subagent worktree rm:", err)
		return 2
	}
	var w seam.Worktree
	if !askDaemon(daemon.OpWorktreeRm, worktreeRmArgs{ID: id}, o, &w, stderr) {
		return 1
	}
	if *asJSON {
		return jsonOut(stdout, stderr, w)
	}
	fmt.Fprintf(stdout, "removed worktree %s and branch %s of subagent %s\n", w.Path, w.Branch, id)
	return 0
}
