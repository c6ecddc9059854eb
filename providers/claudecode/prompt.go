package claudecode

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Under Options.Ask the CLI asks leave for each tool use its permission
// mode does not allow by calling the callback server's seam.PromptTool
// (--permission-prompt-tool). The call reaches prompt, which puts the
// question to the person and answers in the form Claude Code reads:
// {"behavior":"allow","updatedInput":<the input>} or
// {"behavior":"deny","message":<why>}.

// promptInput is what Claude Code sends its permission-prompt tool.
type promptInput struct {
	ToolName  string          `json:"tool_name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
}

// promptDecision is what the tool answers.
type promptDecision struct {
	Behavior     string          `json:"behavior"` // allow or deny
	UpdatedInput json.RawMessage `json:"updatedInput,omitempty"`
	Message      string          `json:"message,omitempty"`
}

// asked is one permission question of a turn, as the journal records it.
type asked struct {
	note, diagnostic string // diagnostic: "" unless the use was refused
}

// prompts is the asking state of a driver: the turn running (its ctx,
// which ends a question with the turn) and what its questions got.
type prompts struct {
	mu      sync.Mutex
	turnCtx context.Context // nil between turns
	asked   []asked
}

// begin marks a turn running under ctx; the returned func ends it and
// hands back what was asked during it.
func (ps *prompts) begin(ctx context.Context) func() []asked {
	ps.mu.Lock()
	ps.turnCtx, ps.asked = ctx, nil
	ps.mu.Unlock()
	return func() []asked {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		out := ps.asked
		ps.turnCtx, ps.asked = nil, nil
		return out
	}
}

// prompt answers one permission-prompt call (a seam.PromptFunc).
func (d *driver) prompt(ctx context.Context, args json.RawMessage) string {
	var in promptInput
	if err := json.Unmarshal(args, &in); err != nil || in.ToolName == "" {
		return decision(promptDecision{Behavior: "deny", Message: "the permission request could not be read"})
	}
	input := in.Input
	if len(input) == 0 || string(input) == "null" {
		input = json.RawMessage("{}")
	}
	d.prompts.mu.Lock()
	turnCtx := d.prompts.turnCtx
	d.prompts.mu.Unlock()
	if turnCtx == nil {
		return decision(promptDecision{Behavior: "deny", Message: "no turn of this subagent is running"})
	}
	// The question ends with the call or with the turn (an interrupt),
	// whichever comes first.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(turnCtx, cancel)
	defer stop()

	what := in.ToolName + " " + truncate.Head(string(input), 400)
	q := d.ask(ctx, seam.AskRequest{Kind: seam.QuestionApproval, Message: "Claude Code asks to use " + what,
		Timeout: d.p.opts.QuestionTimeout, Fallback: "deny"})
	a := q.Answer
	var rec asked
	var out promptDecision
	switch {
	case a.Outcome == seam.OutcomeAccepted:
		out = promptDecision{Behavior: "allow", UpdatedInput: input}
		rec.note = fmt.Sprintf("permission allowed by the %s (%s): %s", a.By, a.Text, what)
	case a.By == seam.ByPerson:
		out = promptDecision{Behavior: "deny", Message: "The person declined this tool use (question " + q.ID + "). Do not retry it; say in your answer what you could not do."}
		rec.note = fmt.Sprintf("permission declined by the person (%s): %s", a.Text, what)
		rec.diagnostic = "declined by the person: " + what
	case a.By == seam.ByDeadline:
		out = promptDecision{Behavior: "deny", Message: fmt.Sprintf("Nobody answered within %v, so the policy denied this tool use. Say in your answer what you could not do.", d.p.opts.QuestionTimeout)}
		rec.note = fmt.Sprintf("permission denied by the policy: timed out, nobody answered question %s within %v: %s", q.ID, d.p.opts.QuestionTimeout, what)
		rec.diagnostic = fmt.Sprintf("denied, timed out (nobody answered question %s within %v): %s", q.ID, d.p.opts.QuestionTimeout, what)
	case a.By == seam.ByInterrupt:
		out = promptDecision{Behavior: "deny", Message: "The turn was stopped before anyone answered."}
		rec.note = "permission request cancelled (question " + q.ID + " withdrawn): " + what
	default:
		out = promptDecision{Behavior: "deny", Message: "Denied by the policy."}
		rec.note = "permission denied by the policy: " + what
		rec.diagnostic = "denied: " + what
	}
	d.prompts.mu.Lock()
	if d.prompts.turnCtx == turnCtx {
		d.prompts.asked = append(d.prompts.asked, rec)
	}
	d.prompts.mu.Unlock()
	return decision(out)
}

func decision(p promptDecision) string {
	b, _ := json.Marshal(p)
	return string(b)
}
