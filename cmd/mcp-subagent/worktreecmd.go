package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist"
)

// runWorktree is `mcp-subagent worktree rm ID`: it removes a child's
// worktree and its branch, changes and all (a changed worktree otherwise
// stays until the child is pruned). It works on the store directly, so the
// daemon must be stopped first, as for doctor: a resident child may be
// working in its worktree. A later message to the child starts it afresh
// from its recorded base.
func runWorktree(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "rm" {
		fmt.Fprintf(stderr, "mcp-subagent worktree: the only command is rm\n\n%s", usage)
		return 2
	}
	fs := flag.NewFlagSet("worktree rm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o serveOptions
	fs.StringVar(&o.dataDir, "data-dir", "", "`DIR` of the session store (default $XDG_STATE_HOME/mcp-subagent)")
	fs.StringVar(&o.configPath, "config", "", "JSON config `FILE` (for its data_dir)")
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
		fmt.Fprintf(stderr, "mcp-subagent worktree rm: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if id == "" {
		fmt.Fprintln(stderr, "mcp-subagent worktree rm: name the subagent whose worktree to remove (its agent-... id)")
		return 2
	}
	cfg, err := loadConfig(o.configPath)
	if err != nil {
		fmt.Fprintln(stderr, "mcp-subagent worktree rm:", err)
		return 2
	}
	dir, err := resolveDataDir(o, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "mcp-subagent worktree rm:", err)
		return 2
	}
	st, err := persist.Open(dir, persist.Options{})
	if errors.Is(err, persist.ErrLocked) {
		fmt.Fprintf(stderr, "mcp-subagent worktree rm: %v\nStop the server first (mcp-subagent daemon stop --data-dir %s).\n", err, dir)
		return 1
	}
	if err != nil {
		fmt.Fprintln(stderr, "mcp-subagent worktree rm:", err)
		return 1
	}
	defer st.Close()
	m := manager.New(manager.Options{Store: st, Worktrees: filepath.Join(dir, "worktrees")})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	defer m.Close(ctx)
	w, err := m.RemoveWorktree(ctx, id)
	if err != nil {
		var e *manager.Error
		if errors.As(err, &e) {
			err = errors.New(e.Message)
		}
		fmt.Fprintln(stderr, "mcp-subagent worktree rm:", err)
		return 1
	}
	fmt.Fprintf(stdout, "removed worktree %s and branch %s of subagent %s\n", w.Path, w.Branch, id)
	return 0
}
