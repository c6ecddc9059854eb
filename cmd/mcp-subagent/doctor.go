package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/mcp-subagent/mcp-subagent/persist"
)

// runDoctor is `mcp-subagent doctor`: it copies every readable child of
// the data directory's session store into a fresh store, keeps the
// original beside it, and says what it could not read. The server must be
// stopped first (the store's lock says whether it is). With a PostgreSQL
// store (--store, MCP_SUBAGENT_STORE, config "store") it checks the
// database instead (doctorStore).
func runDoctor(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o serveOptions
	fs.StringVar(&o.dataDir, "data-dir", "", "`DIR` of the session store to repair (default $XDG_STATE_HOME/mcp-subagent)")
	fs.StringVar(&o.configPath, "config", "", "JSON config `FILE` (for its data_dir and store)")
	fs.StringVar(&o.store, "store", "", "check the PostgreSQL store at `URL` (postgres://...): its schema, owners and stale claims (also MCP_SUBAGENT_STORE, config \"store\")")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mcp-subagent doctor: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg, err := loadConfig(o.configPath)
	if err != nil {
		fmt.Fprintln(stderr, "mcp-subagent doctor:", err)
		return 2
	}
	dir, err := resolveDataDir(o, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "mcp-subagent doctor:", err)
		return 2
	}
	if url, err := resolveStore(o, cfg); err != nil || url != "" {
		if err != nil {
			fmt.Fprintln(stderr, "mcp-subagent doctor:", err)
			return 2
		}
		// PostgreSQL keeps its own data whole; doctor repairs bbolt files.
		return doctorStore(context.Background(), url, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, persist.FileName)); err != nil {
		fmt.Fprintf(stderr, "mcp-subagent doctor: no session store in %s (%v)\n", dir, err)
		return 1
	}
	rep, err := persist.Repair(dir, persist.Options{})
	if errors.Is(err, persist.ErrLocked) {
		fmt.Fprintf(stderr, "mcp-subagent doctor: %v\nStop the server first (mcp-subagent daemon stop --data-dir %s).\n", err, dir)
		return 1
	}
	if err != nil {
		fmt.Fprintln(stderr, "mcp-subagent doctor:", err)
		return 1
	}
	fmt.Fprintf(stdout, "repaired %s\n  %d children copied whole, %d in part, %d queued notices\n  the original is kept as %s\n",
		rep.Path, rep.Children, rep.Partial, rep.Notices, rep.Backup)
	if len(rep.Lost) == 0 {
		fmt.Fprintln(stdout, "  nothing was unreadable")
		return 0
	}
	fmt.Fprintf(stdout, "  could not read (%d):\n", len(rep.Lost))
	for _, l := range rep.Lost {
		fmt.Fprintln(stdout, "   -", l)
	}
	return 0
}
