package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/daemon"
	"github.com/mcp-subagent/mcp-subagent/edge"
)

// The human commands (ls, show, tail, send, interrupt) are an MCP client
// of the data directory's daemon over its socket, as principal local, like
// a stdio session of the same user: they use the same tools and transcript
// resources a model client does, so there is no second control path. They
// start the daemon when none runs. Their sessions take none of the
// principal's pending notices (edge.ObserverClient).

// cliOptions are the flags every human command takes.
type cliOptions struct {
	serve serveOptions
	json  bool
}

// cliFlags is a command's flag set with the common flags.
func cliFlags(cmd string, stderr io.Writer, o *cliOptions) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.serve.configPath, "config", "", "JSON config `FILE`")
	fs.StringVar(&o.serve.dataDir, "data-dir", "", "`DIR` of the session store (default $XDG_STATE_HOME/mcp-subagent)")
	fs.BoolVar(&o.json, "json", false, "print JSON for scripts instead of a table")
	o.serve.logLevel, o.serve.principal = "info", "local"
	return fs
}

// parseInterleaved parses fs over args with flags before, between or
// after the positional arguments ("--" ends the flags), and checks their
// count.
func parseInterleaved(fs *flag.FlagSet, args []string, names ...string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			pos = append(pos, rest...) // after "--": all positional
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	if len(pos) != len(names) {
		want := "no arguments"
		if len(names) > 0 {
			want = strings.Join(names, " ")
		}
		return nil, fmt.Errorf("mcp-subagent %s takes %s; got %d argument(s)", fs.Name(), want, len(pos))
	}
	return pos, nil
}

// runCLI runs one human command; its exit code: 0, 1 (it failed), 2 (bad
// usage).
func runCLI(cmd string, args []string, stdout, stderr io.Writer) int {
	var o cliOptions
	fs := cliFlags(cmd, stderr, &o)
	var run func(ctx context.Context, c *cliClient, pos []string) error
	var names []string
	switch cmd {
	case "ls":
		var lo lsOptions
		fs.BoolVar(&lo.all, "all", false, "include other projects' children")
		fs.StringVar(&lo.status, "status", "", "only children with this status: running, queued, idle, ready or input_required")
		fs.BoolVar(&lo.tree, "tree", false, "the whole tree, grandchildren under their parents")
		run = func(ctx context.Context, c *cliClient, _ []string) error { return lsCmd(ctx, c, lo, o.json, stdout) }
	case "show":
		names = []string{"ID"}
		run = func(ctx context.Context, c *cliClient, pos []string) error {
			return showCmd(ctx, c, pos[0], o.json, stdout)
		}
	case "tail":
		var follow bool
		fs.BoolVar(&follow, "f", false, "follow: print each step as it happens until the child settles (or Ctrl-C)")
		names = []string{"ID"}
		run = func(ctx context.Context, c *cliClient, pos []string) error {
			return tailCmd(ctx, c, pos[0], follow, o.json, stdout)
		}
	case "send":
		var wait bool
		var answerTo string
		fs.BoolVar(&wait, "wait", false, "wait for the turn's outcome and print it")
		fs.StringVar(&answerTo, "answer-to", "", "the question (its id, as ls shows it) the message answers")
		names = []string{"ID", "MESSAGE"}
		run = func(ctx context.Context, c *cliClient, pos []string) error {
			return sendCmd(ctx, c, pos[0], pos[1], answerTo, wait, o.json, stdout)
		}
	case "interrupt":
		names = []string{"ID"}
		run = func(ctx context.Context, c *cliClient, pos []string) error {
			return interruptCmd(ctx, c, pos[0], o.json, stdout)
		}
	}
	pos, err := parseInterleaved(fs, args, names...)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if !strings.HasPrefix(err.Error(), "flag") {
			fmt.Fprintln(stderr, err)
		}
		return 2
	}
	if len(names) > 0 && names[0] == "ID" {
		if err := checkID(pos[0]); err != nil {
			fmt.Fprintf(stderr, "mcp-subagent %s: %v\n", cmd, err)
			return 2
		}
	}
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := dialCLI(ctx, o.serve)
	if err == nil {
		defer c.close()
		err = run(ctx, c, pos)
	}
	if err != nil {
		fmt.Fprintln(stderr, "mcp-subagent "+cmd+":", err)
		return 1
	}
	return 0
}

// cliClient is an MCP session with the daemon.
type cliClient struct {
	mc    *client.Client
	notes chan mcp.JSONRPCNotification
}

// dialCLI connects to the data directory's daemon (starting it when none
// runs) and initializes an MCP session over the socket.
func dialCLI(ctx context.Context, o serveOptions) (*cliClient, error) {
	cfg, err := loadConfig(o.configPath)
	if err != nil {
		return nil, err
	}
	dataDir, err := resolveDataDir(o, cfg)
	if err != nil {
		return nil, err
	}
	cwd, _ := os.Getwd()
	conn, err := daemon.Connect(ctx, daemon.ConnectOptions{
		DataDir:  dataDir,
		Hello:    daemon.Hello{Version: version, Cwd: cwd, Principal: o.principal, PID: os.Getpid()},
		Start:    func() *exec.Cmd { return daemonCommand(o, dataDir) },
		Takeover: func(v string) bool { return daemon.Newer(version, v) },
	})
	if err != nil {
		return nil, err
	}
	mc := client.NewClient(transport.NewIO(closedIsEOF{conn.R}, conn, nil))
	c := &cliClient{mc: mc, notes: make(chan mcp.JSONRPCNotification, 64)}
	mc.OnNotification(func(n mcp.JSONRPCNotification) {
		select {
		case c.notes <- n:
		default: // a full buffer already means "re-read"
		}
	})
	if err := mc.Start(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION // resources/subscribe is legacy-era
	init.Params.ClientInfo = mcp.Implementation{Name: edge.ObserverClient, Version: version}
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := mc.Initialize(ictx, init); err != nil {
		mc.Close()
		return nil, fmt.Errorf("the daemon's MCP session: %w", err)
	}
	return c, nil
}

func (c *cliClient) close() { _ = c.mc.Close() }

// closedIsEOF reads r, reporting a read on the connection our own close
// ended as the end of the stream: mcp-go's read loop logs every other
// error through the default logger, which would print transport noise
// after every command.
type closedIsEOF struct{ r io.Reader }

func (c closedIsEOF) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if errors.Is(err, net.ErrClosed) {
		err = io.EOF
	}
	return n, err
}

// call invokes a tool; a tool error is returned as an error carrying the
// tool's text ("Error: CODE: ...").
func (c *cliClient) call(ctx context.Context, name string, args map[string]any, out any) (*mcp.CallToolResult, error) {
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = name, args
	res, err := c.mc.CallTool(ctx, req)
	if err != nil {
		return nil, err
	}
	if res.IsError {
		return res, errors.New(edge.ResultText(res))
	}
	if out != nil {
		raw := []byte(res.RawStructuredContent)
		if raw == nil {
			if raw, err = json.Marshal(res.StructuredContent); err != nil {
				return res, err
			}
		}
		if err := json.Unmarshal(raw, out); err != nil {
			return res, fmt.Errorf("the %s result %.200s: %w", name, raw, err)
		}
	}
	return res, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
