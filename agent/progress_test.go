package agent_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

func TestProgressNotesAreTheSameForEveryProvider(t *testing.T) {
	long := "[ran: " + strings.Repeat("é", 100) + "]"
	msg := func(role seam.Role, content string, calls ...seam.ToolCall) agent.Event {
		return agent.Event{Kind: agent.EventMessage, Message: &seam.Message{Role: role, Content: content, ToolCalls: calls}}
	}
	events := []agent.Event{
		{Kind: agent.EventTurnStart, Turn: 1},
		msg(seam.RoleUser, "do it"),
		msg(seam.RoleAssistant, "", seam.ToolCall{Name: "read_file"}, seam.ToolCall{Name: "search"}),
		msg(seam.RoleTool, "contents"),
		msg(seam.RoleAssistant, "[ran: ls (exit 0)]"),          // Codex's command
		msg(seam.RoleAssistant, "[tool: Read file (pending)]"), // an ACP agent's tool call
		msg(seam.RoleAssistant, long),
		msg(seam.RoleAssistant, "here is the answer"),
		{Kind: agent.EventTurnEnd, Turn: 1, StopReason: agent.StopCompleted},
	}
	var notes []string
	listen := agent.ProgressNotes(func(n string) { notes = append(notes, n) })
	for _, e := range events {
		listen(e)
	}
	want := []string{"calling read_file, search", "ran: ls (exit 0)", "tool: Read file (pending)",
		"ran: " + strings.Repeat("é", 57) + "…", "answered"}
	if !slices.Equal(notes, want) {
		t.Errorf("notes = %q\nwant    %q", notes, want)
	}
}
