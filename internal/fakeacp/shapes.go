package fakeacp

import (
	"context"
	"encoding/json"
	"strings"

	acpsdk "github.com/coder/acp-go-sdk"
)

// Scenarios that send what real agents send where the protocol leaves
// room: a permission request shaped as a given agent shapes it, and token
// usage where a given agent puts it.
//
//   - "ask as: {"call": ToolCallUpdate, "ask": ToolCallUpdate}" sends
//     call (if given) as a tool_call update, then
//     session/request_permission with ask as its tool call (and
//     allow/reject options); the outcome is recorded as
//     "permission-outcome" and answered as "outcome: <option id>".
//   - "usage as qwen": two agent_message_chunk updates carrying
//     _meta.usage {inputTokens, outputTokens} (10/2 and 30/4), no usage in
//     the answer.
//   - "usage as gemini": the answer's _meta.quota.token_count
//     {input_tokens: 40, output_tokens: 6}.
//   - "usage as claude-code-acp": no usage anywhere (0.16.2).
func (f *fakeAgent) shapeScenario(ctx context.Context, sid acpsdk.SessionId, text string) (acpsdk.PromptResponse, bool) {
	end := acpsdk.PromptResponse{StopReason: acpsdk.StopReasonEndTurn}
	switch {
	case strings.HasPrefix(text, "ask as: "):
		var shape struct {
			Call *acpsdk.ToolCallUpdate `json:"call"` // sent first as a tool_call, if given
			Ask  acpsdk.ToolCallUpdate  `json:"ask"`  // the permission request's tool call
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(text, "ask as: ")), &shape); err != nil {
			f.send(sid, acpsdk.UpdateAgentMessageText("bad tool call: "+err.Error()))
			return end, true
		}
		if c := shape.Call; c != nil {
			u := &acpsdk.SessionUpdateToolCall{SessionUpdate: "tool_call", ToolCallId: c.ToolCallId, Status: acpsdk.ToolCallStatusPending, Meta: c.Meta}
			if c.Title != nil {
				u.Title = *c.Title
			}
			if c.Kind != nil {
				u.Kind = *c.Kind
			}
			f.send(sid, acpsdk.SessionUpdate{ToolCall: u})
		}
		tc := shape.Ask
		resp, err := f.c().RequestPermission(ctx, acpsdk.RequestPermissionRequest{SessionId: sid, ToolCall: tc,
			Options: []acpsdk.PermissionOption{
				{Kind: acpsdk.PermissionOptionKindAllowOnce, Name: "Allow", OptionId: "allow"},
				{Kind: acpsdk.PermissionOptionKindRejectOnce, Name: "Reject", OptionId: "reject"},
			}})
		outcome := "cancelled"
		if err != nil {
			outcome = "error: " + err.Error()
		} else if resp.Outcome.Selected != nil {
			outcome = string(resp.Outcome.Selected.OptionId)
		}
		f.record(Record{Method: "permission-outcome", Session: string(sid), Text: outcome})
		f.send(sid, acpsdk.UpdateAgentMessageText("outcome: "+outcome))
		return end, true
	case text == "usage as qwen":
		for _, u := range [][2]int{{10, 2}, {30, 4}} {
			f.send(sid, acpsdk.SessionUpdate{AgentMessageChunk: &acpsdk.SessionUpdateAgentMessageChunk{
				Content: acpsdk.TextBlock(""), SessionUpdate: "agent_message_chunk",
				Meta: map[string]any{"usage": map[string]any{"inputTokens": u[0], "outputTokens": u[1], "totalTokens": u[0] + u[1]}, "durationMs": 5}}})
		}
		f.send(sid, acpsdk.UpdateAgentMessageText("counted"))
		return end, true
	case text == "usage as gemini":
		f.send(sid, acpsdk.UpdateAgentMessageText("counted"))
		end.Meta = map[string]any{"quota": map[string]any{
			"token_count": map[string]any{"input_tokens": 40, "output_tokens": 6},
			"model_usage": []any{map[string]any{"model": "fake-model", "token_count": map[string]any{"input_tokens": 40, "output_tokens": 6}}}}}
		return end, true
	case text == "usage as claude-code-acp":
		f.send(sid, acpsdk.UpdateAgentMessageText("counted"))
		return end, true
	}
	return acpsdk.PromptResponse{}, false
}
