package questions

import (
	"fmt"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Questions put to the person by a waiting call (DESIGN §14, best channel
// first): a call that waits for a child's turn and whose client can ask
// the person (MCP elicitation) offers to take the child's questions; a
// question asked meanwhile goes to it instead of becoming a notice. What
// the call cannot put to the person (its client failed, its wait ended)
// it hands back with Notice, and the notice goes out then.

// Offer has the caller take childID's questions: each one asked from now
// on, and those already waiting, arrives on the channel instead of as a
// notice (a waiting one was noticed already). stop ends the offer; a
// question offered but not taken by then becomes a notice.
func (b *Board) Offer(childID string) (questions <-chan seam.Question, stop func()) {
	pending := b.Pending(childID)
	ch := make(chan seam.Question, len(pending)+1)
	for _, p := range pending {
		ch <- p.Question
	}
	b.mu.Lock()
	if b.offers == nil {
		b.offers = map[string][]chan seam.Question{}
	}
	b.offers[childID] = append(b.offers[childID], ch)
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		list := b.offers[childID]
		for i, c := range list {
			if c == ch {
				list = append(list[:i:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(b.offers, childID)
		} else {
			b.offers[childID] = list
		}
		b.mu.Unlock()
		for {
			select {
			case q := <-ch:
				b.Notice(q.ID)
			default:
				return
			}
		}
	}
}

// offer hands q to the latest call that offered to take its child's
// questions and has room; false when none did.
func (b *Board) offer(q seam.Question) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	list := b.offers[q.ChildID]
	for i := len(list) - 1; i >= 0; i-- {
		select {
		case list[i] <- q:
			return true
		default:
		}
	}
	return false
}

// Notice sends the notice of a question an offer could not put to the
// person; nothing when it no longer waits.
func (b *Board) Notice(questionID string) {
	if p := b.Waiting(questionID); p != nil {
		_ = b.host.Notify(p.Header, seam.Notice{Source: agent.SourceQuestion, Text: Text(p.Question)})
	}
}

// Decline settles p as the person declined it (a client's elicitation
// declined or cancelled): an approval is denied, a question gets no
// answer.
func (b *Board) Decline(p *Pending) (seam.Question, error) {
	a := seam.Answer{By: seam.ByPerson, Outcome: seam.OutcomeDeclined, At: time.Now().UTC()}
	if p.Question.Kind == seam.QuestionApproval {
		a.Text = "deny"
	}
	return b.settle(p, a)
}

// settle gives p the answer a unless it was settled meanwhile.
func (b *Board) settle(p *Pending, a seam.Answer) (seam.Question, error) {
	if !b.claim(p) {
		return seam.Question{}, &seam.Error{Code: seam.CodeInvalidRequest, AgentID: p.Question.ChildID, Message: fmt.Sprintf(
			"question %s was answered (or timed out) just now; list_agents shows whether subagent %s asks again", p.Question.ID, p.Question.ChildID)}
	}
	p.answered <- a
	q := p.Question
	q.Answer = &a
	return q, nil
}
