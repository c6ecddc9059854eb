package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

type lsOptions struct {
	all, tree bool
	status    string
}

// lsCmd is `mcp-subagent ls`: the principal's children (of this project
// unless --all), every page of list_agents.
func lsCmd(ctx context.Context, c *cliClient, o lsOptions, asJSON bool, w io.Writer) error {
	args := map[string]any{"limit": manager.MaxPageLimit}
	if o.all {
		args["all_projects"] = true
	}
	if o.status != "" {
		args["status"] = o.status
	}
	if o.tree {
		args["scope"] = "descendants"
	}
	rows := []manager.Row{}
	for {
		var page struct {
			Agents []manager.Row `json:"agents"`
			Next   string        `json:"next_cursor"`
		}
		if _, err := c.call(ctx, "list_agents", args, &page); err != nil {
			return err
		}
		rows = append(rows, page.Agents...)
		if page.Next == "" {
			break
		}
		args["cursor"] = page.Next
	}
	if asJSON {
		return printJSON(w, rows)
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no subagents")
		return err
	}
	if o.tree {
		rows = treeOrder(rows)
	}
	return printRows(w, rows, o.tree, isTerminal(w), time.Now())
}

// printRows is ls's table: a row per child, and under a child waiting
// for the person each question it asks, with how to answer it.
func printRows(w io.Writer, rows []manager.Row, tree, colour bool, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tPROVIDER\tMODEL\tDEPTH\tLABEL\tAGE\tUSAGE\tLAST")
	var asks []string // printed after the table, so the columns stay aligned
	for _, r := range rows {
		if r.Kind != "child" {
			fmt.Fprintf(tw, "%s\t%s\t\t\t\t\t\t\t\n", r.ID, paint(colour, "cannot be read: "+r.Reason))
			continue
		}
		id := r.ID
		if tree {
			id = strings.Repeat("  ", max(r.Depth-1, 0)) + id
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", id, paint(colour, r.Status), r.Provider, dash(r.Model), r.Depth,
			dash(clip(r.Label, 40)), age(now, r.CreatedAt), usageText(r.Usage), dash(string(r.LastStopReason)))
		for _, q := range r.Questions {
			asks = append(asks, askText(r.ID, q))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, a := range asks {
		if _, err := fmt.Fprintln(w, a); err != nil {
			return err
		}
	}
	return nil
}

// askText is one question a child waits on, as ls shows it: who asks,
// what, and the command that answers it.
func askText(id string, q manager.PendingQuestion) string {
	answer := `"<your answer>"`
	if q.Kind == string(seam.QuestionApproval) {
		answer = "allow|deny"
		for _, c := range q.Choices {
			if strings.ContainsAny(c, " \t\"'") {
				c = strconv.Quote(c)
			}
			answer += "|" + c
		}
	}
	return fmt.Sprintf("\n%s asks (question %s): %s\n  answer: mcp-subagent send %s --answer-to %s %s",
		id, q.ID, clip(strings.Join(strings.Fields(q.Text), " "), 300), id, q.ID, answer)
}

// treeOrder puts each child right after its parent (depth first, creation
// order among siblings); rows whose parent is not listed stay roots.
func treeOrder(rows []manager.Row) []manager.Row {
	ids := map[string]bool{}
	kids := map[string][]manager.Row{}
	for _, r := range rows {
		ids[r.ID] = true
	}
	var roots []manager.Row
	for _, r := range rows {
		if ids[r.Parent] {
			kids[r.Parent] = append(kids[r.Parent], r)
		} else {
			roots = append(roots, r)
		}
	}
	out := make([]manager.Row, 0, len(rows))
	var walk func(rs []manager.Row)
	walk = func(rs []manager.Row) {
		for _, r := range rs {
			out = append(out, r)
			walk(kids[r.ID])
		}
	}
	walk(roots)
	return out
}

// paint colours a status on a terminal. Every code has the same length,
// so the table's columns stay aligned; the status is always spelled out.
func paint(on bool, status string) string {
	if !on {
		return status
	}
	code := "\x1b[90m" // ready, and anything else: grey
	switch status {
	case manager.StatusRunning:
		code = "\x1b[32m"
	case manager.StatusQueued:
		code = "\x1b[33m"
	case manager.StatusIdle:
		code = "\x1b[36m"
	case manager.StatusInputRequired:
		code = "\x1b[35m"
	}
	if strings.HasPrefix(status, "cannot") {
		code = "\x1b[31m"
	}
	return code + status + "\x1b[0m"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// age is a coarse duration since t: 42s, 5m, 3h, 2d.
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", max(int(d.Seconds()), 0))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// usageText is "in/out tok" and the cost when known.
func usageText(u *seam.Usage) string {
	if u == nil {
		return "-"
	}
	s := fmt.Sprintf("%d/%d tok", u.InputTokens, u.OutputTokens)
	if u.CostUSD > 0 {
		s += fmt.Sprintf(" $%.4f", u.CostUSD)
	}
	return s
}
