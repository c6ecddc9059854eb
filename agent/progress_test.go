package agent_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/llm"
)

func TestProgressNotesAreTheSameForEveryProvider(t *testing.T) {
	long := "[ran: " + strings.Repeat("é", 100) + "]"
	msg := func(role llm.Role, content string, calls ...llm.ToolCall) agent.Event {
		return agent.Event{Kind: agent.EventMessage, Message: &llm.Message{Role: role, Content: content, ToolCalls: calls}}
	}
	events := []agent.Event{
		{Kind: agent.EventTurnStart, Turn: 1},
		msg(llm.RoleUser, "do it"),
		msg(llm.RoleAssistant, "", llm.ToolCall{Name: "read_file"}, llm.ToolCall{Name: "search"}),
		msg(llm.RoleTool, "contents"),
		msg(llm.RoleAssistant, "[ran: ls (exit 0)]"),          // Codex's command
		msg(llm.RoleAssistant, "[tool: Read file (pending)]"), // an ACP agent's tool call
		msg(llm.RoleAssistant, long),
		msg(llm.RoleAssistant, "here is the answer"),
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
