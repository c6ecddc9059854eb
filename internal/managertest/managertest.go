// Package managertest drives a manager in tests the way the MCP tools do,
// for packages whose tests need a one-shot run or a whole listing without
// an MCP client, and provides providers whose turns journal steps on cue
// (Rounds) or hold until released (Hold).
package managertest

import (
	"context"

	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// RunOnce runs a one-shot child as the subagent tool does: Start, wait
// for the result, Dispose. It returns the child's id and its result.
func RunOnce(ctx context.Context, m *manager.Manager, provider string, req seam.StartRequest) (string, seam.Result, error) {
	run, err := m.Start(ctx, provider, req)
	if err != nil {
		return "", seam.Result{}, err
	}
	defer run.Dispose()
	<-run.Done()
	return run.ID(), run.Result(), nil
}

// ListChildren is every direct child of caller as the list tool reads
// them: Manager.List's pages, followed to the last.
func ListChildren(m *manager.Manager, caller seam.ParentRef) ([]manager.Row, error) {
	var rows []manager.Row
	q := manager.ListQuery{Limit: manager.MaxPageLimit}
	for {
		p, err := m.List(caller, q)
		if err != nil {
			return nil, err
		}
		rows = append(rows, p.Rows...)
		if p.Next == "" {
			return rows, nil
		}
		q.Cursor = p.Next
	}
}
