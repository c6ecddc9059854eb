package agent

import (
	"context"
	"encoding/json"

	"github.com/mcp-subagent/mcp-subagent/llm"
)

// Tool is a function an agent's model may call.
//
// Call returns the text handed back to the model. An error is also handed
// back to the model (as "Error: ..."), never ends the turn: the model may
// correct itself. Implementations must be safe for concurrent use, since the
// loop runs the calls of one model message concurrently.
type Tool interface {
	Def() llm.ToolDef
	Call(ctx context.Context, args json.RawMessage) (string, error)
}
