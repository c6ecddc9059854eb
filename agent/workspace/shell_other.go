//go:build !unix

package workspace

import (
	"errors"

	"github.com/mcp-subagent/mcp-subagent/agent"
)

func (w *workspace) runShellTool() (agent.Tool, error) {
	return nil, errors.New("workspace: run_shell needs process groups, which this platform lacks; leave Shell off")
}
