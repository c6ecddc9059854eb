package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

// cliWait bounds `send --wait`: the tool's own maximum (a day).
const cliWait = 24 * time.Hour

// sendCmd is `mcp-subagent send ID MESSAGE [--wait]`: send_message, and
// with --wait the turn's outcome.
func sendCmd(ctx context.Context, c *cliClient, id, msg string, wait, asJSON bool, w io.Writer) error {
	args := map[string]any{"subagent_id": id, "message": msg}
	if wait {
		args["wait_seconds"] = cliWait.Seconds()
	}
	var out map[string]any
	res, err := c.call(ctx, "send_message", args, &out)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(w, out)
	}
	_, err = fmt.Fprintln(w, resultText(res))
	return err
}

// interruptCmd is `mcp-subagent interrupt ID`: interrupt_agent.
func interruptCmd(ctx context.Context, c *cliClient, id string, asJSON bool, w io.Writer) error {
	var out map[string]any
	res, err := c.call(ctx, "interrupt_agent", map[string]any{"agent_id": id}, &out)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(w, out)
	}
	_, err = fmt.Fprintln(w, resultText(res))
	return err
}
