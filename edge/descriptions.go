package edge

import (
	"fmt"
	"strings"
)

// The descriptions are what every model pays for on every request, so they
// say what a model needs and nothing twice: what the call returns, that a
// child that did not complete is an error (never a half answer), that
// send_message returns no answer, that list_agents is not for polling.
// cmd/mcp-subagent's surface test holds them to that and to a byte budget.

func (s *Server) subagentDescription() string {
	var b strings.Builder
	b.WriteString("Delegate a task to a child agent. It does not see your conversation unless its provider says so: put everything it needs in `prompt`. ")
	b.WriteString("The call waits and returns the child's last message; one that did not complete is an error result with a diagnostic, never a half answer. ")
	if s.catalog.Persistent() {
		b.WriteString("Children are continuable: `send_message` gives one more work, `interrupt_agent` stops its turn, `list_agents` shows them. ")
	}
	fmt.Fprintf(&b, "Depth cap: %d; calls may run in parallel.\n\nProviders (all options unless noted):", s.catalog.MaxDepth())
	for _, p := range s.catalog.Providers() {
		fmt.Fprintf(&b, "\n- %s", p.Name)
		if p.Name == s.opts.DefaultProvider {
			b.WriteString(" (default)")
		}
		if p.Description != "" {
			b.WriteString(": " + p.Description)
		}
		var missing []string
		c := p.Capabilities
		for _, f := range []struct {
			on   bool
			name string
		}{{c.OutputSchema, "output_schema"}, {c.DepthLimit, "max_depth"}, {c.ToolFilter, "tool_filter"}, {c.Persona, "persona"},
			{p.Continuable && s.catalog.Persistent(), "run_in_background"}} {
			if !f.on {
				missing = append(missing, f.name)
			}
		}
		switch {
		case len(missing) == 5:
			b.WriteString(" [supports none of the options]")
		case len(missing) > 0:
			b.WriteString(" [no " + strings.Join(missing, ", ") + "]")
		}
		if p.InheritsParentContext {
			b.WriteString(" (for agents, not MCP clients)")
		}
	}
	return b.String()
}

const sendMessageDescription = "Give one of your direct children its next turn (queued behind a running one) or answer its question (`answer_to`). Returns the message id and route, not an answer, unless `wait_seconds` waits. On failure the message was NOT delivered."

const interruptDescription = "Stop the current turn of one of your descendants (children and theirs, any depth). Its queue stays parked until you send it more; its children keep running; it stays resumable. A finished or unknown id is a no-op."

const listAgentsDescription = "Your continuable children, paged: id, label, status (ready: stored, resumable), how it last ended, provider, model, usage. Not for polling: a notice comes when one settles; `wait_seconds` waits."

const reportDescription = "Send your parent a message now, while you keep working: a progress note or a partial result. Your turn goes on; your final answer still goes in your last message. delivery next-step (default) makes it your parent's next turn; quiet lets it ride along with your parent's next turn."
