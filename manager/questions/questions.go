// Package questions owns a child's questions to the person (DESIGN §14):
// a provider's driver asks through the AskFunc its DriverRequest carries
// (Board.Ask); the question is stored, its child's parent gets a notice
// naming it (Text), listings show the child input_required with it
// (Board.Pending), and whoever may send to the child answers it
// (Board.Pick chooses the question, Board.Answer takes the words;
// send_message's answer_to: who may is the manager's authority, checked
// before). The asking call is held meanwhile; its
// deadline gives the policy's answer, recorded as timed out; the end of
// its ctx (an interrupt, the turn's end, shutdown) cancels it. Every
// outcome is stored with who gave it. A call waiting for the child whose
// client can ask the person takes its questions instead of the notice
// (Board.Offer, offers.go). After a crash the questions a
// closed epoch left pending are stored as cancelled (CancelStored).
//
// What it needs of the manager (storing, notifying the parent) is passed
// in as a Host. Board.mu is a leaf: the Host is never called under it.
package questions

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Host is what asking needs of the manager.
type Host interface {
	// Put stores q (retrying as the manager's writes do).
	Put(q seam.Question) error
	// Notify delivers a notice to the parent of hdr's child.
	Notify(hdr seam.Header, n seam.Notice) error
	// Answered tells the parent of hdr's child's waiters that a question
	// was settled (its listing changed).
	Answered(hdr seam.Header)
}

// Board holds the questions children wait on.
type Board struct {
	host Host
	done <-chan struct{} // closed at shutdown: every wait is cancelled

	mu      sync.Mutex
	pending map[string]*Pending             // by question id; whoever removes one answers it
	offers  map[string][]chan seam.Question // by child id (Offer)
}

// New returns a board whose waits end when done is closed.
func New(host Host, done <-chan struct{}) *Board {
	return &Board{host: host, done: done, pending: map[string]*Pending{}}
}

// Pending is a question a driver waits on.
type Pending struct {
	Question seam.Question
	Header   seam.Header // the asking child's
	declines []string
	answered chan seam.Answer // buffered 1: the one who claimed it sends
}

func newQuestionID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "q-" + hex.EncodeToString(b[:])
}

// Ask asks r for hdr's child and waits for the answer: a person's, the
// policy's at the deadline (r.Fallback), or a cancellation when ctx ends
// or the board is done. A question that cannot be stored is answered by
// the policy at once, with no id.
func (b *Board) Ask(ctx context.Context, hdr seam.Header, r seam.AskRequest) seam.Question {
	now := time.Now().UTC()
	q := seam.Question{ID: newQuestionID(), ChildID: hdr.ID, Kind: r.Kind, Message: r.Message, Choices: r.Choices, Created: now}
	if r.Timeout > 0 {
		q.Deadline = now.Add(r.Timeout)
	}
	if err := b.host.Put(q); err != nil {
		q.ID = ""
		q.Answer = &seam.Answer{Text: r.Fallback, By: seam.ByPolicy, Outcome: outcomeOf(r.Fallback, r.Declines), At: now}
		return q
	}
	p := &Pending{Question: q, Header: hdr, declines: r.Declines, answered: make(chan seam.Answer, 1)}
	b.mu.Lock()
	b.pending[q.ID] = p
	b.mu.Unlock()
	if !b.offer(q) {
		_ = b.host.Notify(hdr, seam.Notice{Source: agent.SourceQuestion, Text: Text(q)}) // it still lists
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
	case <-b.done:
		a = seam.Answer{By: seam.ByInterrupt, Outcome: seam.OutcomeCancelled}
	}
	if !answered && !b.claim(p) {
		// Someone answered as the deadline or the interrupt came: the
		// answer given wins, it is already on its way.
		a = <-p.answered
	}
	if a.At.IsZero() {
		a.At = time.Now().UTC()
	}
	q.Answer = &a
	_ = b.host.Put(q) // the Host logs a failure
	b.host.Answered(hdr)
	return q
}

// claim takes p out of the pending questions; false when someone else took
// it first (and answers it).
func (b *Board) claim(p *Pending) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending[p.Question.ID] != p {
		return false
	}
	delete(b.pending, p.Question.ID)
	return true
}

// Text is the notice of q: the child, the question's id and the
// question, and how to answer it.
func Text(q seam.Question) string {
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

// Pending returns the questions childID waits on, oldest first.
func (b *Board) Pending(childID string) []*Pending {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*Pending
	for _, p := range b.pending {
		if p.Question.ChildID == childID {
			out = append(out, p)
		}
	}
	if len(out) > 1 {
		qs := make([]seam.Question, len(out))
		byID := map[string]*Pending{}
		for i, p := range out {
			qs[i], byID[p.Question.ID] = p.Question, p
		}
		seam.SortQuestions(qs)
		for i, q := range qs {
			out[i] = byID[q.ID]
		}
	}
	return out
}

// Waiting returns the question questionID if a driver waits on it.
func (b *Board) Waiting(questionID string) *Pending {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pending[questionID]
}

// Pick returns the question an answer to childID goes to: questionID's
// while a driver waits on it (and it is childID's, when childID is given),
// or, with no questionID, the one question childID waits on. waiting
// lists them when childID waits on more than one and none was named.
func (b *Board) Pick(childID, questionID string) (p *Pending, waiting []*Pending) {
	if questionID != "" {
		if p = b.Waiting(questionID); p != nil && childID != "" && p.Question.ChildID != childID {
			p = nil
		}
		return p, nil
	}
	waiting = b.Pending(childID)
	if len(waiting) == 1 {
		return waiting[0], nil
	}
	return nil, waiting
}

// Ambiguous is the refusal of an answer that names no question to a child
// waiting on several.
func Ambiguous(childID string, waiting []*Pending) error {
	ids := make([]string, len(waiting))
	for i, p := range waiting {
		ids[i] = p.Question.ID
	}
	return &seam.Error{Code: seam.CodeInvalidRequest, AgentID: childID, Message: fmt.Sprintf(
		"subagent %s waits on %d questions (%s): name the one you answer with answer_to", childID, len(waiting), strings.Join(ids, ", "))}
}

// Answer answers p with text, from a person: an approval takes "allow",
// "deny" or one of its choices; a question any text. It returns the
// question with its answer, or why text cannot answer it, or that it was
// settled meanwhile.
func (b *Board) Answer(p *Pending, text string) (seam.Question, error) {
	return b.AnswerVia(p, text, "")
}

// AnswerVia is Answer for an answer that came another way than a tool
// call (seam.ViaWebView), recorded with it (seam.Answer.Via).
func (b *Board) AnswerVia(p *Pending, text, via string) (seam.Question, error) {
	a, err := answerOf(p, text)
	if err != nil {
		return seam.Question{}, err
	}
	a.Via = via
	return b.settle(p, a)
}

// answerOf is what text answers p with, or why it cannot.
func answerOf(p *Pending, text string) (seam.Answer, error) {
	t := strings.TrimSpace(text)
	if t == "" {
		return seam.Answer{}, &seam.Error{Code: seam.CodeInvalidRequest, AgentID: p.Question.ChildID, Message: "field \"message\": the answer must not be empty"}
	}
	a := seam.Answer{Text: t, By: seam.ByPerson, Outcome: seam.OutcomeAccepted, At: time.Now().UTC()}
	if p.Question.Kind != seam.QuestionApproval {
		return a, nil
	}
	switch {
	case strings.EqualFold(t, "allow"):
		a.Text = "allow"
	case strings.EqualFold(t, "deny"):
		a.Text, a.Outcome = "deny", seam.OutcomeDeclined
	default:
		found := false
		for _, c := range p.Question.Choices {
			if strings.EqualFold(t, c) {
				a.Text, found = c, true
				break
			}
		}
		if !found {
			words := append([]string{"allow", "deny"}, p.Question.Choices...)
			return seam.Answer{}, &seam.Error{Code: seam.CodeInvalidRequest, AgentID: p.Question.ChildID, Message: fmt.Sprintf(
				"field \"message\": question %s is an approval; answer with one of: %s", p.Question.ID, strings.Join(words, ", "))}
		}
		a.Outcome = outcomeOf(a.Text, p.declines)
	}
	return a, nil
}

// NotWaiting is the refusal of an answer to question questionID of
// childID, which no driver waits on: settled already (saying how, from
// the stored questions), or unknown.
func NotWaiting(childID, questionID string, stored []seam.Question) error {
	for _, q := range stored {
		if q.ID == questionID && q.Answer != nil {
			return &seam.Error{Code: seam.CodeInvalidRequest, AgentID: childID, Message: fmt.Sprintf(
				"question %s was already settled: %s by %s (%s)", questionID, q.Answer.Outcome, q.Answer.By, q.Answer.Text)}
		}
	}
	return &seam.Error{Code: seam.CodeInvalidRequest, AgentID: childID, Message: fmt.Sprintf(
		"no question %s waits on subagent %s; list_agents shows the questions waiting (status input_required)", questionID, childID)}
}

// Settle settles the question an answer to childID goes to (Pick) with
// what of gives it, for a caller may authorises, given the asking
// child's header. It returns the question with its answer; nil and no
// error when questionID is empty and the child waits on no question (the
// message is then an ordinary send). One that does not wait is refused
// (NotWaiting) with what stored returns, called only then: how a settled
// one was settled is told only to one who may answer the child, so stored
// checks that itself.
func (b *Board) Settle(childID, questionID string, may func(seam.Header) error, stored func() []seam.Question, of func(*Pending) (seam.Question, error)) (*seam.Question, error) {
	p, waiting := b.Pick(childID, questionID)
	switch {
	case len(waiting) > 1:
		if err := may(waiting[0].Header); err != nil {
			return nil, err
		}
		return nil, Ambiguous(childID, waiting)
	case p == nil && questionID == "":
		return nil, nil
	case p == nil:
		return nil, NotWaiting(childID, questionID, stored())
	}
	if err := may(p.Header); err != nil {
		return nil, err
	}
	q, err := of(p)
	if err != nil {
		return nil, err
	}
	return &q, nil
}

// Stored is what CancelStored reads and writes of the session store.
type Stored interface {
	Questions(ctx context.Context, childID string) ([]seam.Question, error)
	PutQuestion(ctx context.Context, q seam.Question) error
}

// CancelStored closes the questions a closed epoch of childID left
// pending: the turn that held them is gone, so nobody's answer can reach
// it, and a later list_agents or answer must not show them as waiting.
// They are recorded as cancelled by the turn's end (ByInterrupt), never as
// a person's answer.
func CancelStored(ctx context.Context, store Stored, childID string, log *slog.Logger) {
	qs, err := store.Questions(ctx, childID)
	if err != nil {
		log.Warn("reading a recovered child's questions failed; they stay pending in the store", "agent_id", childID, "err", err)
		return
	}
	for _, q := range qs {
		if !q.Pending() {
			continue
		}
		q.Answer = &seam.Answer{By: seam.ByInterrupt, Outcome: seam.OutcomeCancelled, At: time.Now()}
		if err := store.PutQuestion(ctx, q); err != nil {
			log.Warn("closing a recovered child's question failed", "agent_id", childID, "question", q.ID, "err", err)
		}
	}
}
