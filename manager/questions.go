package manager

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// A child's question to the person (DESIGN §14): a provider's driver asks
// through the AskFunc its DriverRequest carries; the question is stored,
// its child's parent gets a notice naming it, listings show the child
// input_required with it, and whoever may send to the child answers it
// (Answer, send_message's answer_to). The asking call is held meanwhile;
// its deadline gives the policy's answer, recorded as timed out; the end
// of its ctx (an interrupt, the turn's end, shutdown) cancels it. Every
// outcome is stored with who gave it.

// pendingQuestion is a question a driver waits on.
type pendingQuestion struct {
	q        seam.Question
	hdr      seam.Header
	declines []string
	answered chan seam.Answer // buffered 1: the one who claimed it sends
}

// asker is the AskFunc of hdr's child; nil without a store (a question
// that cannot be stored is never asked).
func (m *Manager) asker(hdr seam.Header) seam.AskFunc {
	if m.store == nil {
		return nil
	}
	return func(ctx context.Context, r seam.AskRequest) seam.Question { return m.ask(ctx, hdr, r) }
}

func newQuestionID() string { return "q-" + NewID()[len("agent-"):] }

func (m *Manager) ask(ctx context.Context, hdr seam.Header, r seam.AskRequest) seam.Question {
	now := time.Now().UTC()
	q := seam.Question{ID: newQuestionID(), ChildID: hdr.ID, Kind: r.Kind, Message: r.Message, Choices: r.Choices, Created: now}
	if r.Timeout > 0 {
		q.Deadline = now.Add(r.Timeout)
	}
	if err := m.putQuestion(q); err != nil {
		m.log.Error("storing a child's question failed; the policy answers it", "agent_id", hdr.ID, "err", err)
		q.ID = ""
		q.Answer = &seam.Answer{Text: r.Fallback, By: seam.ByPolicy, Outcome: outcomeOf(r.Fallback, r.Declines), At: now}
		return q
	}
	p := &pendingQuestion{q: q, hdr: hdr, declines: r.Declines, answered: make(chan seam.Answer, 1)}
	m.mu.Lock()
	m.questions[q.ID] = p
	m.mu.Unlock()
	if err := m.deliver(hdr, seam.Notice{Source: agent.SourceQuestion, Text: questionText(q)}); err != nil {
		m.log.Error("the notice of a child's question could not be stored; it still lists", "agent_id", hdr.ID, "question", q.ID, "err", err)
	}

	var deadline <-chan time.Time
	if r.Timeout > 0 {
		t := time.NewTimer(r.Timeout)
		defer t.Stop()
		deadline = t.C
	}
	var a seam.Answer
	answered := false
	select {
	case a = <-p.answered:
		answered = true
	case <-deadline:
		a = seam.Answer{Text: r.Fallback, By: seam.ByDeadline, Outcome: seam.OutcomeTimedOut}
	case <-ctx.Done():
		a = seam.Answer{By: seam.ByInterrupt, Outcome: seam.OutcomeCancelled}
	case <-m.ctx.Done():
		a = seam.Answer{By: seam.ByInterrupt, Outcome: seam.OutcomeCancelled}
	}
	if !answered && !m.claimQuestion(p) {
		// Someone answered as the deadline or the interrupt came: the
		// answer given wins, it is already on its way.
		a = <-p.answered
	}
	if a.At.IsZero() {
		a.At = time.Now().UTC()
	}
	q.Answer = &a
	if err := m.putQuestion(q); err != nil {
		m.log.Error("storing the answer to a child's question failed", "agent_id", hdr.ID, "question", q.ID, "err", err)
	}
	m.signalAddr(hdr.Parent)
	return q
}

// claimQuestion takes p out of the pending questions; false when someone
// else took it first (and answers it).
func (m *Manager) claimQuestion(p *pendingQuestion) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.questions[p.q.ID] != p {
		return false
	}
	delete(m.questions, p.q.ID)
	return true
}

func (m *Manager) putQuestion(q seam.Question) error {
	ctx, cancel := m.bg()
	defer cancel()
	return m.storeWrite(ctx, func(ctx context.Context) error { return m.store.PutQuestion(ctx, q) })
}

// questionText is the notice of q: the child, the question's id and the
// question, and how to answer it.
func questionText(q seam.Question) string {
	var b strings.Builder
	fmt.Fprintf(&b, "subagent %s asks (question %s): %s\n", q.ChildID, q.ID, q.Message)
	if q.Kind == seam.QuestionApproval {
		b.WriteString(`Answer with send_message (subagent_id, answer_to: ` + q.ID + `, message "allow" or "deny"`)
		if len(q.Choices) > 0 {
			b.WriteString(" or one of: " + strings.Join(q.Choices, ", "))
		}
		b.WriteString(")")
	} else {
		b.WriteString("Answer with send_message (subagent_id, answer_to: " + q.ID + ", your answer as the message)")
	}
	if !q.Deadline.IsZero() {
		fmt.Fprintf(&b, " by %s; after that it is denied.", q.Deadline.Format(time.RFC3339))
	}
	return b.String()
}

// outcomeOf is whether answer text accepts or declines.
func outcomeOf(text string, declines []string) string {
	t := strings.TrimSpace(text)
	if strings.EqualFold(t, "deny") {
		return seam.OutcomeDeclined
	}
	for _, d := range declines {
		if strings.EqualFold(t, d) {
			return seam.OutcomeDeclined
		}
	}
	return seam.OutcomeAccepted
}

// PendingQuestion is a question waiting for its answer, as a listing row
// shows it.
type PendingQuestion struct {
	ID      string   `json:"id"`
	Text    string   `json:"text"`
	Kind    string   `json:"kind"`
	Choices []string `json:"choices,omitempty"`
}

// pendingOf returns the questions childID waits on, oldest first.
func (m *Manager) pendingOf(childID string) []*pendingQuestion {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*pendingQuestion
	for _, p := range m.questions {
		if p.q.ChildID == childID {
			out = append(out, p)
		}
	}
	if len(out) > 1 {
		qs := make([]seam.Question, len(out))
		byID := map[string]*pendingQuestion{}
		for i, p := range out {
			qs[i], byID[p.q.ID] = p.q, p
		}
		seam.SortQuestions(qs)
		for i, q := range qs {
			out[i] = byID[q.ID]
		}
	}
	return out
}

// Answer answers a child's question for caller: questionID names it, or,
// empty, the one question childID waits on. It returns the question with
// its answer; nil and no error when questionID is empty and the child
// waits on no question (the message is then an ordinary send). Whoever
// may send to the child may answer (mayAnswer). An approval takes
// "allow", "deny" or one of its choices; a question any text.
func (m *Manager) Answer(ctx context.Context, caller seam.ParentRef, childID, questionID, text string) (*seam.Question, error) {
	return m.AnswerVia(ctx, caller, childID, questionID, text, "")
}

// AnswerVia is Answer for an answer that came another way than a tool
// call (seam.ViaWebView), recorded with it (seam.Answer.Via).
func (m *Manager) AnswerVia(ctx context.Context, caller seam.ParentRef, childID, questionID, text, via string) (*seam.Question, error) {
	var p *pendingQuestion
	if questionID == "" {
		ps := m.pendingOf(childID)
		switch len(ps) {
		case 0:
			return nil, nil
		case 1:
			p = ps[0]
		default:
			ids := make([]string, len(ps))
			for i, p := range ps {
				ids[i] = p.q.ID
			}
			if err := mayAnswer(caller, ps[0].hdr); err != nil {
				return nil, err
			}
			return nil, &seam.Error{Code: seam.CodeInvalidRequest, AgentID: childID, Message: fmt.Sprintf(
				"subagent %s waits on %d questions (%s): name the one you answer with answer_to", childID, len(ps), strings.Join(ids, ", "))}
		}
	} else {
		m.mu.Lock()
		p = m.questions[questionID]
		m.mu.Unlock()
		if p == nil || (childID != "" && p.q.ChildID != childID) {
			return nil, m.notPending(ctx, caller, childID, questionID)
		}
	}
	if err := mayAnswer(caller, p.hdr); err != nil {
		return nil, err
	}
	a, err := answerOf(p, text)
	if err != nil {
		return nil, err
	}
	a.Via = via
	if !m.claimQuestion(p) {
		return nil, &seam.Error{Code: seam.CodeInvalidRequest, AgentID: p.q.ChildID, Message: fmt.Sprintf(
			"question %s was answered (or timed out) just now; list_agents shows whether subagent %s asks again", p.q.ID, p.q.ChildID)}
	}
	p.answered <- a
	q := p.q
	q.Answer = &a
	return &q, nil
}

// answerOf is what text answers p with, or why it cannot.
func answerOf(p *pendingQuestion, text string) (seam.Answer, error) {
	t := strings.TrimSpace(text)
	if t == "" {
		return seam.Answer{}, &seam.Error{Code: seam.CodeInvalidRequest, AgentID: p.q.ChildID, Message: "field \"message\": the answer must not be empty"}
	}
	a := seam.Answer{Text: t, By: seam.ByPerson, Outcome: seam.OutcomeAccepted, At: time.Now().UTC()}
	if p.q.Kind != seam.QuestionApproval {
		return a, nil
	}
	switch {
	case strings.EqualFold(t, "allow"):
		a.Text = "allow"
	case strings.EqualFold(t, "deny"):
		a.Text, a.Outcome = "deny", seam.OutcomeDeclined
	default:
		found := false
		for _, c := range p.q.Choices {
			if strings.EqualFold(t, c) {
				a.Text, found = c, true
				break
			}
		}
		if !found {
			words := append([]string{"allow", "deny"}, p.q.Choices...)
			return seam.Answer{}, &seam.Error{Code: seam.CodeInvalidRequest, AgentID: p.q.ChildID, Message: fmt.Sprintf(
				"field \"message\": question %s is an approval; answer with one of: %s", p.q.ID, strings.Join(words, ", "))}
		}
		a.Outcome = outcomeOf(a.Text, p.declines)
	}
	return a, nil
}

// notPending is the refusal of an answer to a question that does not
// wait: answered already (with how), or unknown.
func (m *Manager) notPending(ctx context.Context, caller seam.ParentRef, childID, questionID string) error {
	if childID != "" && m.store != nil {
		if hdr, err := m.header(ctx, childID); err == nil && mayAnswer(caller, hdr) == nil {
			if qs, err := m.store.Questions(ctx, childID); err == nil {
				for _, q := range qs {
					if q.ID == questionID && q.Answer != nil {
						return &seam.Error{Code: seam.CodeInvalidRequest, AgentID: childID, Message: fmt.Sprintf(
							"question %s was already settled: %s by %s (%s)", questionID, q.Answer.Outcome, q.Answer.By, q.Answer.Text)}
					}
				}
			}
		}
	}
	return &seam.Error{Code: seam.CodeInvalidRequest, AgentID: childID, Message: fmt.Sprintf(
		"no question %s waits on subagent %s; list_agents shows the questions waiting (status input_required)", questionID, childID)}
}
