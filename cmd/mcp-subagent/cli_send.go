package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/mcp-subagent/mcp-subagent/edge"
)

// cliWait bounds `send --wait`: the tool's own maximum (a day).
const cliWait = 24 * time.Hour

// sendCmd is `mcp-subagent send ID MESSAGE [--answer-to Q] [--wait]`:
// send_message, and with --wait the turn's outcome.
func sendCmd(ctx context.Context, c *cliClient, id, msg, answerTo string, wait, asJSON bool, w io.Writer) error {
	args := map[string]any{"subagent_id": id, "message": msg}
	if answerTo != "" {
		args["answer_to"] = answerTo
	}
	if wait {
		args["wait_seconds"] = cliWait.Seconds()
	}
	return toolCmd(ctx, c, "send_message", args, asJSON, w)
}

// interruptCmd is `mcp-subagent interrupt ID`: interrupt_agent.
func interruptCmd(ctx context.Context, c *cliClient, id string, asJSON bool, w io.Writer) error {
	return toolCmd(ctx, c, "interrupt_agent", map[string]any{"agent_id": id}, asJSON, w)
}

// toolCmd calls a tool and prints its structured result (--json) or its
// text.
func toolCmd(ctx context.Context, c *cliClient, name string, args map[string]any, asJSON bool, w io.Writer) error {
	var out map[string]any
	res, err := c.call(ctx, name, args, &out)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(w, out)
	}
	_, err = fmt.Fprintln(w, edge.ResultText(res))
	return err
}
