package edge

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// Sent is the structuredContent of send_message.
type Sent struct {
	MessageID string        `json:"message_id"`
	Route     manager.Route `json:"route"`
	AgentID   string        `json:"agent_id"`
	Outcome   *TurnOutcome  `json:"outcome,omitempty"`
}

// Answered is the structuredContent of send_message when it answered a
// child's question.
type Answered struct {
	AgentID    string `json:"agent_id"`
	QuestionID string `json:"question_id"`
	Answer     string `json:"answer"`
	Outcome    string `json:"outcome"` // accepted or declined
}

// TurnOutcome is how a waited-for turn ended.
type TurnOutcome struct {
	StopReason agent.StopReason `json:"stop_reason"`
	Output     string           `json:"output"`
	Structured any              `json:"structured,omitempty"`
	Diagnostic string           `json:"diagnostic,omitempty"`
	Usage      seam.Usage       `json:"usage"`
}

func (s *Server) sendMessage(ctx context.Context, c call) *mcp.CallToolResult {
	var in struct {
		SubagentID  string       `json:"subagent_id"`
		Message     string       `json:"message"`
		WaitSeconds float64      `json:"wait_seconds,omitempty"`
		Budget      *seam.Budget `json:"budget,omitempty"`
		AnswerTo    string       `json:"answer_to,omitempty"`
	}
	if bad := s.tool("send_message").decode(c, &in); bad != nil {
		return bad
	}
	// A message to a child that waits on one question answers it; answer_to
	// names the question when it waits on several.
	q, err := s.answerUnlessResumed(ctx, c.caller, in.SubagentID, in.AnswerTo, in.Message)
	if err != nil {
		return errorResult(err)
	}
	if q != nil {
		text := fmt.Sprintf("answered question %s of subagent %s: %s (%s); its turn goes on.", q.ID, q.ChildID, q.Answer.Text, q.Answer.Outcome)
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(text)},
			StructuredContent: Answered{AgentID: q.ChildID, QuestionID: q.ID, Answer: q.Answer.Text, Outcome: q.Answer.Outcome}}
	}
	sent, err := s.followup(ctx, c, in.SubagentID, in.Message, in.WaitSeconds > 0, in.Budget)
	if err != nil {
		return errorResult(err)
	}
	out := Sent{MessageID: sent.MessageID, Route: sent.Route, AgentID: in.SubagentID}
	text := fmt.Sprintf("message %s queued as the next turn for subagent %s (%s).", sent.MessageID, in.SubagentID, sent.Route)
	if in.WaitSeconds <= 0 {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(text)}, StructuredContent: out}
	}
	in.WaitSeconds = s.boundWait(ctx, in.WaitSeconds)
	wctx, cancel := context.WithTimeout(ctx, seconds(in.WaitSeconds))
	defer cancel()
	res, ok, asking := s.waitTurn(ctx, wctx, c, "send_message", *sent)
	if asking != nil {
		return asking
	}
	if !ok {
		text += fmt.Sprintf(" Its turn is still running after %gs; you will get a notice when it settles (list_agents with wait_seconds waits for it).", in.WaitSeconds)
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(text)}, StructuredContent: out}
	}
	out.Outcome = &TurnOutcome{StopReason: res.StopReason, Output: res.Output, Diagnostic: res.Diagnostic, Usage: res.Usage}
	if res.Structured != nil {
		out.Outcome.Structured = res.Structured
	}
	if res.StopReason != agent.StopCompleted {
		r := foregroundResult(in.SubagentID, res)
		r.StructuredContent = out
		return r
	}
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(res.Output)}, StructuredContent: out}
}

func (s *Server) interrupt(ctx context.Context, c call) *mcp.CallToolResult {
	var in struct {
		AgentID string `json:"agent_id"`
	}
	if bad := s.tool("interrupt_agent").decode(c, &in); bad != nil {
		return bad
	}
	if err := s.interrupter.Interrupt(c.caller, in.AgentID); err != nil {
		return errorResult(err)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent("interrupt requested for agent " + in.AgentID)},
		StructuredContent: map[string]any{"accepted": true}}
}

func (s *Server) listAgents(ctx context.Context, c call) *mcp.CallToolResult {
	var in struct {
		Scope       string  `json:"scope,omitempty"`
		AllProjects bool    `json:"all_projects,omitempty"`
		WaitSeconds float64 `json:"wait_seconds,omitempty"`
		Status      string  `json:"status,omitempty"`
		Limit       int     `json:"limit,omitempty"`
		Cursor      string  `json:"cursor,omitempty"`
	}
	if bad := s.tool("list_agents").decode(c, &in); bad != nil {
		return bad
	}
	var notes []seam.Notice
	if in.WaitSeconds > 0 {
		wctx, cancel := context.WithTimeout(ctx, seconds(s.boundWait(ctx, in.WaitSeconds)))
		if c.caller.AgentID == "" {
			notes = s.notices.WaitNotices(wctx, c.caller.Principal, c.caller.Session)
		} else {
			s.lister.WaitSignal(wctx, c.caller.Address())
		}
		cancel()
	}
	page, err := s.lister.List(c.caller, manager.ListQuery{Descendants: in.Scope == "descendants",
		Status: in.Status, Limit: in.Limit, Cursor: in.Cursor})
	if err != nil {
		return errorResult(err)
	}
	rows := page.Rows
	if c.caller.AgentID == "" && !in.AllProjects {
		rows = s.inProject(c.caller, rows)
	}
	for i := range rows {
		rows[i] = boundRow(rows[i])
	}
	var b strings.Builder
	if len(rows) == 0 {
		b.WriteString("(no subagents)")
	}
	for i, r := range rows {
		if i > 0 {
			b.WriteByte('\n')
		}
		if r.Kind == "diagnostic" {
			fmt.Fprintf(&b, "%s [%s] — cannot be read", r.ID, r.Reason)
			continue
		}
		fmt.Fprintf(&b, "%s [%s] — %s (provider %s, depth %d", r.ID, r.Status, displayLabel(r.Label), r.Provider, r.Depth)
		if r.Usage != nil {
			fmt.Fprintf(&b, ", %d in / %d out tokens", r.Usage.InputTokens, r.Usage.OutputTokens)
		}
		if r.LastStopReason != "" {
			fmt.Fprintf(&b, ", last turn %s", r.LastStopReason)
		}
		b.WriteByte(')')
		if r.LastMessage != "" {
			fmt.Fprintf(&b, "\n  closing message: %s", r.LastMessage)
		}
		for _, q := range r.Questions {
			fmt.Fprintf(&b, "\n  asks (question %s): %s", q.ID, q.Text)
		}
	}
	if rows == nil {
		rows = []manager.Row{}
	}
	out := map[string]any{"agents": rows}
	if page.Next != "" {
		// A page left short by other projects' rows still has a next one.
		fmt.Fprintf(&b, "\n(more: pass cursor %q for the next page)", page.Next)
		out["next_cursor"] = page.Next
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(b.String())}, StructuredContent: out}
	withNotices(res, notes)
	return res
}

// Bounds of a listing row's free-text fields, so a page's size is bounded
// by its limit: a row's closing message is a preview (the settlement
// notice carried it whole), its label and cwd are clipped.
const (
	maxRowLabel   = 200
	maxRowMessage = 512
	maxRowCwd     = 512
)

func boundRow(r manager.Row) manager.Row {
	r.Label = truncate.Bound(r.Label, maxRowLabel)
	r.LastMessage = truncate.Bound(r.LastMessage, maxRowMessage)
	r.Cwd = truncate.Bound(r.Cwd, maxRowCwd)
	r.Model = truncate.Bound(r.Model, maxRowLabel)
	r.ID = truncate.Bound(r.ID, maxRowLabel)
	r.Reason = truncate.Bound(r.Reason, maxRowMessage)
	if r.Questions != nil {
		qs := make([]manager.PendingQuestion, len(r.Questions))
		for i, q := range r.Questions {
			q.Text = truncate.Bound(q.Text, maxRowMessage)
			qs[i] = q
		}
		r.Questions = qs
	}
	return r
}

// inProject keeps a root session's rows whose cwd lies in the session's
// working directory: a session sees its own project's children unless it
// asks for all_projects.
func (s *Server) inProject(caller seam.ParentRef, rows []manager.Row) []manager.Row {
	si := s.session(caller.Session)
	if si == nil || si.Cwd == "" {
		return rows
	}
	out := rows[:0]
	for _, r := range rows {
		// An isolated child works outside the project, in a worktree of
		// its repository: the repository is its project.
		wt := r.Worktree != nil && (within(si.Cwd, r.Worktree.Repo) || within(r.Worktree.Repo, si.Cwd))
		if r.Kind != "child" || r.Cwd == "" || within(si.Cwd, r.Cwd) || wt {
			out = append(out, r)
		}
	}
	return out
}

// boundWait caps a wait at the calling client's bound (ClientWaitSeconds).
func (s *Server) boundWait(ctx context.Context, wait float64) float64 {
	if b := s.clientWait(ctx); b > 0 && (wait <= 0 || wait > b) {
		return b
	}
	return wait
}

func (s *Server) report(ctx context.Context, c call) *mcp.CallToolResult {
	var in struct {
		Output   string `json:"output"`
		Delivery string `json:"delivery,omitempty"`
	}
	if bad := s.tool("report").decode(c, &in); bad != nil {
		return bad
	}
	d := manager.DeliveryNextStep
	if in.Delivery == string(manager.DeliveryQuiet) {
		d = manager.DeliveryQuiet
	}
	id, err := s.reporter.ReportFrom(c.caller, in.Output, d)
	if err != nil {
		return errorResult(err)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent("reported to your parent; keep working, and give your final answer as your last message")},
		StructuredContent: map[string]any{"message_id": id}}
}
