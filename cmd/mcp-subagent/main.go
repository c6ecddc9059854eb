// Command mcp-subagent is an MCP server that lets a model client delegate
// work to child agents.
//
//	mcp-subagent serve                 # stdio
//	mcp-subagent serve --http 127.0.0.1:8765
//	mcp-subagent doctor
//	mcp-subagent ls | show ID | tail -f ID | send ID MESSAGE | interrupt ID
//	mcp-subagent prune --older-than 30d [--dry-run]
//	mcp-subagent compact
//	mcp-subagent ui [--open]
//	mcp-subagent version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/mcp-subagent/mcp-subagent/daemon"
	"github.com/mcp-subagent/mcp-subagent/internal/subreaper"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	// Re-executed as the supervisor of an external agent or a shell
	// command, it does only that (and never returns).
	subreaper.Main()
	// Started by a session as its data directory's daemon: leave the
	// session's process tree first (detach.go).
	detach()
	stop := startProfile()
	code := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		args = []string{"serve"}
	}
	cmd := args[0]
	control := ""
	switch cmd {
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "mcp-subagent", version)
		return 0
	case "serve":
	case "daemon":
		if len(args) > 1 && (args[1] == "stop" || args[1] == "status") {
			control = args[1]
			args = args[1:]
		}
	case "doctor":
		return runDoctor(args[1:], stdout, stderr)
	case "worktree":
		return runWorktree(args[1:], stdout, stderr)
	case "ls", "show", "tail", "send", "interrupt":
		return runCLI(cmd, args[1:], stdout, stderr)
	case "prune":
		return runPrune(args[1:], stdout, stderr)
	case "compact":
		return runCompact(args[1:], stdout, stderr)
	case "ui":
		return runUI(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stderr, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "mcp-subagent: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o serveOptions
	fs.StringVar(&o.httpAddr, "http", "", "serve streamable HTTP at `ADDR`/mcp instead of stdio (loopback unless tokens are configured)")
	fs.StringVar(&o.configPath, "config", "", "JSON config `FILE` (schema: schemas/config.json)")
	fs.StringVar(&o.dataDir, "data-dir", "", "`DIR` for the session store (default $XDG_STATE_HOME/mcp-subagent)")
	fs.StringVar(&o.store, "store", "", "keep the session store in the PostgreSQL database at `URL` (postgres://...) instead of the data directory (also MCP_SUBAGENT_STORE, config \"store\")")
	fs.BoolVar(&o.ephemeral, "ephemeral", false, "run without a session store: foreground one-shot children only; send_message, interrupt_agent, list_agents and background children are unavailable")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&o.logFormat, "log-format", "auto", "log format: auto (tint on a terminal, JSON otherwise), text, json")
	fs.StringVar(&o.principal, "principal", "local", "the principal a stdio client acts as")
	fs.BoolVar(&o.noDaemon, "no-daemon", false, "serve in this process instead of relaying to the data directory's daemon (containers, tests); --ephemeral implies it")
	fs.DurationVar(&o.idle, "idle-timeout", 0, "a daemon started for this session exits after this long with no session and no live child (default 10m, or daemon.idle_seconds)")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mcp-subagent %s: unexpected argument %q\n", cmd, fs.Arg(0))
		return 2
	}
	log, err := newLogger(stderr, o.logLevel, o.logFormat)
	if err != nil {
		fmt.Fprintln(stderr, "mcp-subagent:", err)
		return 2
	}
	// A client that goes away closes our stderr too: without this, the next
	// log line would kill the server by SIGPIPE before it can stop its
	// children. Writes to a closed pipe return an error instead.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch {
	case control != "":
		err = daemonControl(ctx, control, o, stdout)
	case cmd == "daemon":
		var cfg Config
		if cfg, err = loadConfig(o.configPath); err == nil {
			err = runDaemon(ctx, o, cfg, false, log)
		} else {
			daemon.ReportReady("", err)
		}
	default:
		if onTerminal(stdin, stderr) {
			o.terminal = stderr
		}
		err = serve(ctx, o, stdin, stdout, log)
	}
	if err != nil {
		log.Error("server stopped", "err", err)
		return 1
	}
	return 0
}

const usage = `Usage:
  mcp-subagent serve [--http ADDR] [--config FILE] [--data-dir DIR | --ephemeral] [--no-daemon] [--log-level LEVEL] [--log-format FORMAT] [--principal NAME]
  mcp-subagent daemon [stop|status] [--data-dir DIR] [--config FILE]
  mcp-subagent doctor [--data-dir DIR]   copy every readable child of a damaged store into a fresh one
  mcp-subagent doctor --store URL        check a PostgreSQL store: its schema, owners' leases, stale claims
  mcp-subagent worktree rm ID [--data-dir DIR] [--json]   remove a settled child's worktree and branch, changes and all
  mcp-subagent ls [--all] [--status S] [--tree] [--json]   this project's children (--all: every project's)
  mcp-subagent show ID [--json]          a child's transcript: turns, messages, tool calls, reports and notices
  mcp-subagent tail [-f] ID [--json]     its last steps; -f follows it live until it settles (or Ctrl-C)
  mcp-subagent send ID MESSAGE [--wait] [--json]   send it its next turn (--wait: print the outcome)
  mcp-subagent interrupt ID [--json]     stop its current turn
  mcp-subagent prune [--older-than AGE] [--dry-run] [--json] [--data-dir DIR]
                                        remove settled children idle longer than AGE (default 30d; units s, m, h, d)
  mcp-subagent compact [--json] [--data-dir DIR]   shrink the store file in place
  mcp-subagent ui [--open] [--json] [--data-dir DIR]   print the live web view's URL (--open: open a browser)
  mcp-subagent version

serve over stdio relays to the one daemon of the data directory, starting it
when none runs; the daemon owns every child, so children outlive the session
that started them. serve --http runs the daemon itself, in the foreground.
The daemon's logs: DIR/daemon.log.

Environment (when the config does not say otherwise):
  OPENAI_BASE_URL, OPENAI_API_KEY   the OpenAI-compatible chat API for in-process children
  MCP_SUBAGENT_MODEL                the model name
  DEEPSEEK_API_KEY                  use DeepSeek's API when OPENAI_API_KEY is not set
`
