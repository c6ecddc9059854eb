package tools

import (
	"fmt"
	"strings"
)

func (s *Server) subagentDescription() string {
	var b strings.Builder
	b.WriteString("Delegate a task to a child agent. The child works on its own with its own tools in a working directory inside yours, and does not see your conversation unless its provider says so: put everything it needs in `prompt`. ")
	b.WriteString("By default the call waits and returns the child's last message (and `structured` when you gave an `output_schema` and the child met it). A child that did not complete (cancelled, out of tokens, declined, failed) is an error result with a diagnostic and its partial output, never a half answer. ")
	if s.catalog.Persistent() {
		b.WriteString("With `run_in_background: true` it returns the child's durable id at once; when the child settles you receive a notice with its outcome and closing message. Children are continuable: `send_message` gives one more work later (even after a server restart), `interrupt_agent` stops its current turn, `list_agents` shows them. ")
	}
	fmt.Fprintf(&b, "Children may delegate further, up to the depth cap (%d). Several calls may run at once.\n\nProviders:", s.catalog.MaxDepth())
	for _, p := range s.catalog.Providers() {
		fmt.Fprintf(&b, "\n- %s", p.Name)
		if p.Name == s.opts.DefaultProvider {
			b.WriteString(" (default)")
		}
		if p.Description != "" {
			b.WriteString(": " + p.Description)
		}
		var caps []string
		c := p.Capabilities
		for _, f := range []struct {
			on   bool
			name string
		}{{c.OutputSchema, "output_schema"}, {c.DepthLimit, "max_depth"}, {c.ToolFilter, "tool_filter"}, {c.Persona, "persona"}} {
			if f.on {
				caps = append(caps, f.name)
			}
		}
		if p.Continuable && s.catalog.Persistent() {
			caps = append(caps, "run_in_background")
		}
		if len(caps) > 0 {
			b.WriteString(" [supports " + strings.Join(caps, ", ") + "]")
		} else {
			b.WriteString(" [supports none of output_schema, max_depth, tool_filter, persona, run_in_background]")
		}
		if p.InheritsParentContext {
			b.WriteString(" The child sees your completed turns; only agents with a conversation (not an MCP client) can use it.")
		}
	}
	return b.String()
}

const sendMessageDescription = "Send a message to one of your own direct children (by the id `subagent` gave you). It becomes the child's next turn: queued behind the turn it is working on, taken at once if it is idle, or after resuming it from storage if it has settled (also after a server restart). It cannot redirect a turn already running. It returns the message id and how it was routed, not an answer — unless you pass `wait_seconds`, which waits that long for the outcome of the turn your message starts. If it fails, the message was NOT delivered."

const interruptDescription = "Stop the current turn of one of your descendants. Its queued messages are kept but parked until you send it another message; its own children keep running; it stays resumable. A finished or unknown id is accepted and does nothing."

const listAgentsDescription = "List your continuable subagents: id, label, status (running: working on a turn; idle: resident, waiting for its own children or a parked message; ready: stored and resumable — last_stop_reason tells whether it finished or was stopped, last_message is its closing message), provider, depth and token usage. scope=descendants includes your children's children. This is not for polling: you are sent a notice when a child settles. To wait for one, pass `wait_seconds`: the call blocks until something is pending for you (or the time passes) and delivers it."

const reportDescription = "Send your parent a message now, while you keep working: a progress note or a partial result. Your turn goes on; your final answer still goes in your last message. delivery next-step (default) makes it your parent's next turn; quiet lets it ride along with your parent's next turn."
