package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/mcp-subagent/mcp-subagent/daemon"
	"github.com/mcp-subagent/mcp-subagent/manager/retention"
	"github.com/mcp-subagent/mcp-subagent/persist"
)

// dayTerm is one "<number>d" term of an age.
var dayTerm = regexp.MustCompile(`([0-9]+(?:\.[0-9]+)?)d`)

// parseAge reads an age such as "30d", "12h", "90m", "45s" or "1d12h":
// Go's duration syntax with d for days of 24 hours. It must be positive.
func parseAge(s string) (time.Duration, error) {
	bad := error(nil)
	if strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
		bad = errors.New("signed")
	}
	g := dayTerm.ReplaceAllStringFunc(s, func(t string) string {
		n, err := strconv.ParseFloat(t[:len(t)-1], 64)
		if err != nil {
			bad = err
		}
		return strconv.FormatFloat(n*24, 'f', -1, 64) + "h"
	})
	d, err := time.ParseDuration(g)
	if bad != nil || err != nil || d <= 0 {
		return 0, fmt.Errorf("%q: write a positive age such as 30d, 12h, 90m or 45s (units s, m, h, d)", s)
	}
	return d, nil
}

// pruneArgs are a prune's arguments over the daemon's socket.
type pruneArgs struct {
	OlderThan time.Duration `json:"older_than_ns"`
	DryRun    bool          `json:"dry_run,omitempty"`
}

// adminFlags are the flags every admin command takes.
func adminFlags(name string, stderr io.Writer) (*flag.FlagSet, *serveOptions, *bool) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &serveOptions{logLevel: "info"}
	fs.StringVar(&o.dataDir, "data-dir", "", "`DIR` of the daemon (default $XDG_STATE_HOME/mcp-subagent)")
	fs.StringVar(&o.configPath, "config", "", "JSON config `FILE` (for its data_dir, and the daemon started when none runs)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	return fs, o, asJSON
}

// runPrune is `mcp-subagent prune`: the daemon removes the settled root
// children of principal local whose last activity is older than the age.
func runPrune(args []string, stdout, stderr io.Writer) int {
	fs, o, asJSON := adminFlags("prune", stderr)
	older := fs.String("older-than", "30d", "remove settled children idle longer than this `AGE` (units s, m, h, d)")
	dry := fs.Bool("dry-run", false, "name the children that would be removed; remove none")
	if code, ok := parseAdmin(fs, args, stderr); !ok {
		return code
	}
	age, err := parseAge(*older)
	if err != nil {
		fmt.Fprintln(stderr, "mcp-subagent prune: --older-than", err)
		return 2
	}
	var res retention.Result
	if !askDaemon(daemon.OpPrune, pruneArgs{OlderThan: age, DryRun: *dry}, o, &res, stderr) {
		return 1
	}
	if *asJSON {
		return jsonOut(stdout, stderr, res)
	}
	verb := "pruned"
	if res.DryRun {
		verb = "would prune"
	}
	fmt.Fprintf(stdout, "%s %d settled children idle longer than %s", verb, len(res.Pruned), *older)
	if res.Resident > 0 {
		fmt.Fprintf(stdout, "; kept %d old enough but resident", res.Resident)
	}
	if res.Unreadable > 0 {
		fmt.Fprintf(stdout, "; kept %d unreadable (mcp-subagent doctor)", res.Unreadable)
	}
	fmt.Fprintln(stdout)
	if len(res.Pruned) == 0 {
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLABEL\tPROVIDER\tLAST ACTIVE\tSTOP\tDESCENDANTS")
	now := time.Now()
	for _, p := range res.Pruned {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\t%s\t%d\n", p.ID, oneLine(p.Label), p.Provider, roundAge(now.Sub(p.LastActive)), p.StopReason, p.Descendants)
	}
	_ = tw.Flush()
	return 0
}

// runCompact is `mcp-subagent compact`: the daemon rewrites the store file
// in place to give back the space deleted children held.
func runCompact(args []string, stdout, stderr io.Writer) int {
	fs, o, asJSON := adminFlags("compact", stderr)
	if code, ok := parseAdmin(fs, args, stderr); !ok {
		return code
	}
	var st persist.CompactStats
	if !askDaemon(daemon.OpCompact, nil, o, &st, stderr) {
		return 1
	}
	if *asJSON {
		return jsonOut(stdout, stderr, st)
	}
	fmt.Fprintf(stdout, "compacted %s: %s → %s\n", st.Path, byteSize(st.Before), byteSize(st.After))
	return 0
}

// parseAdmin parses an admin command's flags; ok false: exit with code.
func parseAdmin(fs *flag.FlagSet, args []string, stderr io.Writer) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mcp-subagent %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return 2, false
	}
	return 0, true
}

// askDaemon runs an admin operation on the data directory's daemon,
// starting one when none runs, as principal local, and decodes its result
// into out; false: it failed, and said why on stderr.
func askDaemon(op string, args any, o *serveOptions, out any, stderr io.Writer) bool {
	raw, err := admin(op, args, o)
	if err == nil {
		if err = json.Unmarshal(raw, out); err != nil {
			err = fmt.Errorf("the daemon's answer: %w", err)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "mcp-subagent %s: %v\n", op, err)
		return false
	}
	return true
}

func admin(op string, args any, o *serveOptions) (json.RawMessage, error) {
	cfg, err := loadConfig(o.configPath)
	if err != nil {
		return nil, err
	}
	dataDir, err := resolveDataDir(*o, cfg)
	if err != nil {
		return nil, err
	}
	h := daemon.Hello{Version: version, Op: op, PID: os.Getpid()}
	h.Cwd, _ = os.Getwd()
	if args != nil {
		if h.Args, err = json.Marshal(args); err != nil {
			return nil, err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return daemon.Admin(ctx, daemon.ConnectOptions{DataDir: dataDir,
		Start: func() *exec.Cmd { return daemonCommand(*o, dataDir) }}, h)
}

// oneLine clips a label to one short line for a table.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 40 {
		return string(r[:39]) + "…"
	}
	return s
}

// roundAge is an age to the unit that matters: 3d4h, 5h12m, 7m, 12s.
func roundAge(d time.Duration) string {
	switch {
	case d >= 24*time.Hour:
		return fmt.Sprintf("%dd%dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
	case d >= time.Hour:
		return fmt.Sprintf("%dh%dm", d/time.Hour, d%time.Hour/time.Minute)
	case d >= time.Minute:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return fmt.Sprintf("%ds", max(d/time.Second, 0))
}

// byteSize is a file size in bytes, KiB or MiB.
func byteSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// jsonOut prints v as indented JSON, an exit code: 1 when it cannot.
func jsonOut(stdout, stderr io.Writer, v any) int {
	if err := printJSON(stdout, v); err != nil {
		fmt.Fprintln(stderr, "mcp-subagent:", err)
		return 1
	}
	return 0
}
