package edge

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

var _ server.SessionWithElicitation = (*streamSession)(nil)

// RequestElicitation asks the client to put a question to the person
// (elicitation/create) and waits for the answer: how a child's question
// reaches a client before protocol 2026-07-28 during its call.
func (s *streamSession) RequestElicitation(ctx context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	raw, err := s.request(ctx, string(mcp.MethodElicitationCreate), req.Params)
	if err != nil {
		return nil, err
	}
	var res mcp.ElicitationResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("elicitation/create answer: %w", err)
	}
	return &res, nil
}
