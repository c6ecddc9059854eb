package manager

import (
	"cmp"
	"context"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// queuedDiagnostic is the diagnostic of a turn stopped while it waited for
// a running slot.
const queuedDiagnostic = "stopped while queued for a running slot (limits.max_running_children or max_running_total); no model request was made"

// lendTo lends the caller's slot to the turn that handles msgID, for as
// long as the caller waits on w (see waitTurn).
func (m *Manager) lendTo(w *waiter, caller seam.ParentRef, childID, msgID string) {
	if w != nil {
		w.loan = m.adm.Lend(caller.AgentID, childID, msgID)
	}
}

// runTurn runs a claimed turn once it has a seat (package admission), under
// its budget (package budget). A turn stopped while queued (interrupted,
// or its child's writes failed) never reaches its driver: it ends aborted,
// journaled as a turn with its inputs, so the journal keeps what the child
// was given and the stored inbox lets the messages go, as for any
// interrupted turn. At shutdown nothing is journaled: the messages stay
// queued in the store for the next start.
func (a *activation) runTurn(ctx context.Context, msg inboxMsg, inputs []agent.Input) agent.TurnResult {
	q := a.m.adm
	s := q.Enter(a.hdr.Principal, a.hdr.ID, msg.id, msg.at)
	defer q.Leave(s)
	if err := q.Await(ctx, s); err != nil {
		res := agent.TurnResult{StopReason: agent.StopAborted, Diagnostic: queuedDiagnostic}
		if a.ctx.Err() == nil {
			journalSkipped(a.driver.Journal(), inputs, res)
		}
		return res
	}
	return a.m.budgets.Turn(ctx, a.hdr.ID, a.hdr.Parent, msg.budget, false, a.driver, inputs)
}

// journalSkipped records a turn that ended before its driver ran.
func journalSkipped(j *agent.Journal, inputs []agent.Input, res agent.TurnResult) {
	turn := j.NextTurn()
	j.Append(agent.Event{Kind: agent.EventTurnStart, Turn: turn})
	for _, in := range inputs {
		j.Append(agent.Event{Kind: agent.EventMessage, Turn: turn, Source: cmp.Or(in.Source, agent.SourceUser),
			Message: &seam.Message{Role: seam.RoleUser, Content: in.Text}})
	}
	j.Append(agent.Event{Kind: agent.EventTurnEnd, Turn: turn, StopReason: res.StopReason, Diagnostic: res.Diagnostic})
}

// runTurn runs a one-shot run's turn once it has a seat (on its caller's
// slot when the caller is an agent: it waits for the run).
func (r *oneShot) runTurn(ctx context.Context, prompt string) agent.TurnResult {
	q := r.m.adm
	defer r.loan.End(q)
	s := q.Enter(r.principal, r.id, "", r.at)
	defer q.Leave(s)
	if err := q.Await(ctx, s); err != nil {
		return agent.TurnResult{StopReason: agent.StopAborted, Diagnostic: queuedDiagnostic}
	}
	return r.m.budgets.Turn(ctx, r.id, r.parent, nil, true, r.drv, []agent.Input{{Text: prompt, Source: agent.SourceUser}})
}
