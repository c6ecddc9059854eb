package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/edge"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// readTranscript reads a child's transcript resource.
func (c *cliClient) readTranscript(ctx context.Context, id string) (manager.Transcript, error) {
	req := mcp.ReadResourceRequest{}
	req.Params.URI = edge.TranscriptURI(id)
	res, err := c.mc.ReadResource(ctx, req)
	if err != nil {
		return manager.Transcript{}, err
	}
	for _, rc := range res.Contents {
		if tc, ok := rc.(mcp.TextResourceContents); ok {
			var t manager.Transcript
			if err := json.Unmarshal([]byte(tc.Text), &t); err != nil {
				return t, fmt.Errorf("the transcript of %s: %w", truncate.Head(id, echoBytes), err)
			}
			return t, nil
		}
	}
	return manager.Transcript{}, errors.New("the transcript resource had no text")
}

// showCmd is `mcp-subagent show ID`: the whole transcript.
func showCmd(ctx context.Context, c *cliClient, id string, asJSON bool, w io.Writer) error {
	t, err := c.readTranscript(ctx, id)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(w, t)
	}
	p := &transcriptPrinter{w: w}
	p.header(t)
	p.entries(t.Entries)
	return p.err
}

// tailCmd is `mcp-subagent tail [-f] ID`: the last entries, and with -f
// each later step as it happens, until the child settles or ctx ends
// (Ctrl-C). It follows the transcript resource's updates.
func tailCmd(ctx context.Context, c *cliClient, id string, follow, asJSON bool, w io.Writer) error {
	if follow {
		req := mcp.SubscribeRequest{}
		req.Params.URI = edge.TranscriptURI(id)
		//lint:ignore SA1019 the legacy-era subscription is what this session speaks
		if err := c.mc.Subscribe(ctx, req); err != nil {
			return err
		}
	}
	t, err := c.readTranscript(ctx, id)
	if err != nil {
		return err
	}
	p := &transcriptPrinter{w: w, json: asJSON}
	if !asJSON {
		p.header(t)
	}
	const last = 20
	p.entries(t.Entries[max(len(t.Entries)-last, 0):])
	seen := t.Len
	for follow && p.err == nil && t.Status != manager.StatusReady {
		select {
		case <-ctx.Done():
			return nil // Ctrl-C: the user stopped following
		case n := <-c.notes:
			if n.Method != mcp.MethodNotificationResourceUpdated {
				continue
			}
		}
		if t, err = c.readTranscript(ctx, id); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, e := range t.Entries {
			if e.Seq >= seen {
				p.entries([]manager.TranscriptEntry{e})
			}
		}
		seen = max(seen, t.Len)
	}
	if follow && p.err == nil && !asJSON {
		fmt.Fprintf(w, "(%s settled)\n", id)
	}
	return p.err
}

// transcriptPrinter renders transcript entries for people: one block per
// entry, every message labelled with whose words it holds, a user message
// with its source kind, so a report or the runtime's settlement notice is
// never shown as the child's or its parent's own words.
type transcriptPrinter struct {
	w    io.Writer
	json bool // one JSON entry per line instead
	err  error
	turn seam.Usage // the current turn's usage so far
}

func (p *transcriptPrinter) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

func (p *transcriptPrinter) header(t manager.Transcript) {
	p.printf("%s  %q  status %s, provider %s, model %s, depth %d, parent %s, created %s\n",
		t.ID, t.Label, t.Status, t.Provider, dash(t.Model), t.Depth, t.Parent, t.CreatedAt.Format("2006-01-02 15:04:05Z07:00"))
}

func (p *transcriptPrinter) entries(es []manager.TranscriptEntry) {
	for _, e := range es {
		if p.json {
			b, _ := json.Marshal(e)
			p.printf("%s\n", b)
			continue
		}
		p.entry(e)
	}
}

func (p *transcriptPrinter) entry(e manager.TranscriptEntry) {
	if e.Usage != nil {
		p.turn = p.turn.Add(*e.Usage)
	}
	cut := ""
	if e.Truncated {
		cut = " (cut)"
	}
	switch e.Kind {
	case string(agent.EventTurnStart):
		p.turn = seam.Usage{}
		p.printf("\n── turn %d ── %s\n", e.Turn, e.Time.Format("15:04:05"))
	case string(agent.EventTurnEnd):
		p.printf("── turn %d ended: %s · %s", e.Turn, e.StopReason, usageText(&p.turn))
		if e.Diagnostic != "" {
			p.printf(" · %s", e.Diagnostic)
		}
		p.printf("\n")
	case string(agent.EventSession):
		p.printf("[session] external session recorded\n")
	case string(agent.EventBudget):
		p.printf("[budget] granted: %s\n", budgetText(e.Budget))
	case string(agent.EventMessage):
		switch e.Role {
		case "user":
			p.printf("[%s]%s %s\n", sourceLabel(e.Source), cut, indent(e.Text))
		case "assistant":
			if e.Text != "" {
				p.printf("[assistant]%s %s\n", cut, indent(e.Text))
			}
			if e.Refusal != "" {
				p.printf("[assistant refusal] %s\n", indent(e.Refusal))
			}
			for _, tc := range e.ToolCalls {
				p.printf("[tool call %s %s]%s %s\n", tc.Name, tc.ID, cut, indent(tc.Arguments))
			}
		case "tool":
			p.printf("[tool result %s]%s %s\n", e.ToolCallID, cut, indent(e.Text))
		default:
			p.printf("[%s]%s %s\n", e.Role, cut, indent(e.Text))
		}
	default:
		p.printf("[%s]\n", e.Kind)
	}
}

// sourceLabel names who wrote a user-side message.
func sourceLabel(source string) string {
	switch source {
	case agent.SourceReport:
		return agent.SourceReport + ": a child's report"
	case agent.SourceSettled:
		return agent.SourceSettled + ": the runtime's notice"
	case "", agent.SourceUser:
		return "user"
	}
	return source
}

// indent keeps a multi-line text inside its block.
func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n    ") }

// budgetText says what a budget grant allows: its limits, or unlimited.
func budgetText(b *seam.Budget) string {
	if b == nil || *b == (seam.Budget{}) {
		return "unlimited"
	}
	var parts []string
	if b.Tokens > 0 {
		parts = append(parts, fmt.Sprintf("tokens %d", b.Tokens))
	}
	if b.Steps > 0 {
		parts = append(parts, fmt.Sprintf("steps %d", b.Steps))
	}
	if b.Seconds > 0 {
		parts = append(parts, fmt.Sprintf("seconds %g", b.Seconds))
	}
	if b.CostUSD > 0 {
		parts = append(parts, fmt.Sprintf("cost_usd %g", b.CostUSD))
	}
	return strings.Join(parts, ", ")
}
