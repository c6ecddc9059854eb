package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/mcp-subagent/mcp-subagent/persist/pgstore"
)

// doctorStore is `mcp-subagent doctor` of a PostgreSQL store: PostgreSQL
// keeps its own data whole, so there is nothing to repair; it checks the
// schema's version against this build's and shows the owners' leases, the
// stale claims (those of expired owners, which a live instance's sweep
// resumes) and the root sessions recorded as connected, all judged by the
// database's clock. It changes nothing. The URL is shown with its password
// redacted. It fails (1) when the database cannot be read or its schema is
// newer than this build's.
func doctorStore(ctx context.Context, url string, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	fmt.Fprintf(stdout, "store: PostgreSQL %s\n", pgstore.Redact(url))
	rep, err := pgstore.Inspect(ctx, url)
	if err != nil {
		fmt.Fprintln(stderr, "mcp-subagent doctor:", err)
		return 1
	}
	code := 0
	switch build := pgstore.SchemaVersion; {
	case rep.Schema == 0:
		fmt.Fprintf(stdout, "schema: none yet; the first server to start on it creates version %d\n", build)
	case rep.Schema == build:
		fmt.Fprintf(stdout, "schema: version %d, this build's\n", rep.Schema)
	case rep.Schema < build:
		fmt.Fprintf(stdout, "schema: version %d, older than this build's %d; the next server of this build to start migrates it\n", rep.Schema, build)
	default:
		fmt.Fprintf(stdout, "schema: version %d, NEWER than this build's %d: this build refuses it; run a newer mcp-subagent\n", rep.Schema, build)
		code = 1
	}
	fmt.Fprintf(stdout, "database clock: %s\n", rep.Now.UTC().Format(time.RFC3339))
	fmt.Fprintf(stdout, "owners (%d):\n", len(rep.Owners))
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for _, o := range rep.Owners {
		state, rel := "expired", "ago"
		d := rep.Now.Sub(o.Expires)
		if o.Live {
			state, rel, d = "live", "from now", -d
		}
		fmt.Fprintf(tw, "  %s\tlease until %s (%s %s)\t%s\t%d claims\n", o.ID, o.Expires.UTC().Format(time.RFC3339), d.Round(time.Second), rel, state, o.Claims)
	}
	tw.Flush()
	if len(rep.Stale) == 0 {
		fmt.Fprintln(stdout, "stale claims: none")
	} else {
		fmt.Fprintf(stdout, "stale claims (%d), resumed by the next live instance's takeover sweep:\n", len(rep.Stale))
		for _, c := range rep.Stale {
			fmt.Fprintf(tw, "  %s\towner %s\tepoch %d\n", c.ChildID, c.Owner.ID, c.Epoch)
		}
		tw.Flush()
	}
	// Where a principal's settlement notices go: to a live session of it
	// at any instance; a stale record is reaped by the next renewal.
	fmt.Fprintf(stdout, "root sessions (%d):\n", len(rep.Sessions))
	for _, s := range rep.Sessions {
		state := "live"
		if !s.Live {
			state = "stale (its owner's lease expired)"
		}
		fmt.Fprintf(tw, "  %s\tsession %s\tat %s\t%s\n", s.Principal, s.ID, s.Owner, state)
	}
	tw.Flush()
	return code
}
