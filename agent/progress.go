package agent

import (
	"strings"

	"github.com/mcp-subagent/mcp-subagent/llm"
)

// ProgressNotes returns a journal listener that turns the model's steps
// into short notes for send ("calling read_file, search", "answered").
func ProgressNotes(send func(note string)) func(Event) {
	return func(e Event) {
		if e.Kind != EventMessage || e.Message == nil || e.Message.Role != llm.RoleAssistant {
			return
		}
		if len(e.Message.ToolCalls) == 0 {
			send("answered")
			return
		}
		names := make([]string, len(e.Message.ToolCalls))
		for i, c := range e.Message.ToolCalls {
			names[i] = c.Name
		}
		send("calling " + strings.Join(names, ", "))
	}
}
