package agent

import (
	"strings"

	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// maxNote bounds an activity note passed on as progress.
const maxNote = 120

// ProgressNotes returns a journal listener that turns a child's steps into
// short notes for send, the same for every provider: "calling read_file,
// search" for the model's tool calls; an external agent's activity note
// (recorded as a bracketed assistant message, "[ran: ls (exit 0)]") without
// its brackets, clipped; "answered" for any other assistant message.
func ProgressNotes(send func(note string)) func(Event) {
	return func(e Event) {
		if e.Kind != EventMessage || e.Message == nil || e.Message.Role != seam.RoleAssistant {
			return
		}
		if calls := e.Message.ToolCalls; len(calls) > 0 {
			names := make([]string, len(calls))
			for i, c := range calls {
				names[i] = c.Name
			}
			send("calling " + strings.Join(names, ", "))
			return
		}
		if s := e.Message.Content; len(s) >= 2 && s[0] == '[' && s[len(s)-1] == ']' {
			send(truncate.Head(s[1:len(s)-1], maxNote))
			return
		}
		send("answered")
	}
}
