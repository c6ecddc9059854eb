package questions

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// host records what the board asked of the manager.
type host struct {
	mu       sync.Mutex
	putErr   error
	puts     []seam.Question
	notices  []seam.Notice
	answered int
	asked    chan string // each question's id, once its notice is out
}

func (h *host) Put(q seam.Question) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.puts = append(h.puts, q)
	return h.putErr
}

func (h *host) Notify(_ seam.Header, n seam.Notice) error {
	h.mu.Lock()
	h.notices = append(h.notices, n)
	h.mu.Unlock()
	if h.asked != nil {
		h.asked <- n.Text
	}
	return nil
}

func (h *host) Answered(seam.Header) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.answered++
}

var child = seam.Header{ID: "agent-1", Parent: seam.PrincipalAddress("alice")}

// ask asks r in a goroutine and returns the pending question and where its
// outcome arrives.
func ask(t *testing.T, b *Board, h *host, ctx context.Context, r seam.AskRequest) (*Pending, <-chan seam.Question) {
	t.Helper()
	out := make(chan seam.Question, 1)
	go func() { out <- b.Ask(ctx, child, r) }()
	<-h.asked
	ps := b.Pending(child.ID)
	if len(ps) == 0 {
		t.Fatal("the question does not wait")
	}
	return ps[len(ps)-1], out
}

// TestAnApprovalTakesItsWords: an approval is answered by allow, deny or a
// choice (a declining one declines); any other word is refused naming
// them; the answer is stored and the parent's waiters are told.
func TestAnApprovalTakesItsWords(t *testing.T) {
	h := &host{asked: make(chan string, 1)}
	b := New(h, nil)
	p, out := ask(t, b, h, context.Background(), seam.AskRequest{Kind: seam.QuestionApproval, Message: "rm -rf build?", Choices: []string{"always", "never"}, Declines: []string{"never"}})
	if !strings.Contains(h.notices[0].Text, "answer_to: "+p.Question.ID) || !strings.Contains(h.notices[0].Text, "always, never") {
		t.Fatalf("notice %q does not say how to answer", h.notices[0].Text)
	}
	if _, err := b.Answer(p, "perhaps"); err == nil || !strings.Contains(err.Error(), "allow, deny, always, never") {
		t.Fatalf("Answer(perhaps) = %v, want a refusal naming the words", err)
	}
	q, err := b.Answer(p, " NEVER ")
	if err != nil {
		t.Fatal(err)
	}
	if q.Answer.Text != "never" || q.Answer.Outcome != seam.OutcomeDeclined || q.Answer.By != seam.ByPerson {
		t.Fatalf("answer %+v, want never, declined, by the person", q.Answer)
	}
	got := <-out
	if got.Answer.Outcome != seam.OutcomeDeclined {
		t.Fatalf("the asking driver got %+v", got.Answer)
	}
	if len(b.Pending(child.ID)) != 0 {
		t.Fatal("an answered question still waits")
	}
	if _, err := b.Answer(p, "allow"); err == nil {
		t.Fatal("a question was answered twice")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.puts) != 2 || h.puts[1].Answer == nil || h.answered != 1 {
		t.Fatalf("stored %d times (the last with answer %v), waiters told %d times; want 2, answered, 1", len(h.puts), h.puts[len(h.puts)-1].Answer, h.answered)
	}
}

// TestADeadlineGivesThePolicysAnswer and an interrupt cancels the wait.
func TestADeadlineGivesThePolicysAnswer(t *testing.T) {
	h := &host{asked: make(chan string, 1)}
	b := New(h, nil)
	_, out := ask(t, b, h, context.Background(), seam.AskRequest{Kind: seam.QuestionApproval, Message: "ok?", Timeout: 10 * time.Millisecond, Fallback: "deny"})
	q := <-out
	if q.Answer.By != seam.ByDeadline || q.Answer.Outcome != seam.OutcomeTimedOut || q.Answer.Text != "deny" {
		t.Fatalf("answer %+v, want the fallback at the deadline", q.Answer)
	}
	ctx, cancel := context.WithCancel(context.Background())
	_, out = ask(t, b, h, ctx, seam.AskRequest{Message: "name?"})
	cancel()
	if q := <-out; q.Answer.By != seam.ByInterrupt || q.Answer.Outcome != seam.OutcomeCancelled {
		t.Fatalf("answer %+v, want cancelled by the interrupt", q.Answer)
	}
	done := make(chan struct{})
	shut := New(h, done)
	_, out = ask(t, shut, h, context.Background(), seam.AskRequest{Message: "name?"})
	close(done)
	if q := <-out; q.Answer.Outcome != seam.OutcomeCancelled {
		t.Fatalf("answer %+v at shutdown, want cancelled", q.Answer)
	}
}

// TestAQuestionThatCannotBeStoredIsAnsweredByThePolicy: never asked, no id.
func TestAQuestionThatCannotBeStoredIsAnsweredByThePolicy(t *testing.T) {
	h := &host{putErr: errors.New("disk full")}
	b := New(h, nil)
	q := b.Ask(context.Background(), child, seam.AskRequest{Kind: seam.QuestionApproval, Message: "ok?", Fallback: "deny"})
	if q.ID != "" || q.Answer == nil || q.Answer.By != seam.ByPolicy || q.Answer.Outcome != seam.OutcomeDeclined {
		t.Fatalf("question %+v, want no id and the policy's denial", q)
	}
	if len(h.notices) != 0 || len(b.Pending(child.ID)) != 0 {
		t.Fatal("a question that was not stored was announced or waits")
	}
}

// TestPendingIsOldestFirst and a free-text question takes any text.
func TestPendingIsOldestFirst(t *testing.T) {
	h := &host{asked: make(chan string, 1)}
	b := New(h, nil)
	first, out1 := ask(t, b, h, context.Background(), seam.AskRequest{Message: "one"})
	for !time.Now().After(first.Question.Created) { // distinct creation times, which order them
	}
	_, out2 := ask(t, b, h, context.Background(), seam.AskRequest{Message: "two"})
	ps := b.Pending(child.ID)
	if len(ps) != 2 || ps[0].Question.Message != "one" || ps[1].Question.Message != "two" {
		t.Fatalf("pending %v, want one then two", ps)
	}
	if b.Waiting(first.Question.ID) != first {
		t.Fatal("Waiting does not find a waiting question")
	}
	if _, err := b.Answer(first, "  "); err == nil {
		t.Fatal("an empty answer was taken")
	}
	for _, p := range ps {
		if _, err := b.Answer(p, "anything at all"); err != nil {
			t.Fatal(err)
		}
	}
	<-out1
	if q := <-out2; q.Answer.Outcome != seam.OutcomeAccepted || q.Answer.Text != "anything at all" {
		t.Fatalf("answer %+v", q.Answer)
	}
}

// TestPickChoosesTheQuestionAnAnswerGoesTo: a named one (of the named
// child), else the only one, else every one waiting, which the refusal
// names.
func TestPickChoosesTheQuestionAnAnswerGoesTo(t *testing.T) {
	h := &host{asked: make(chan string, 1)}
	b := New(h, nil)
	if p, waiting := b.Pick(child.ID, ""); p != nil || len(waiting) != 0 {
		t.Fatal("Pick found a question where none waits")
	}
	first, _ := ask(t, b, h, context.Background(), seam.AskRequest{Message: "one"})
	if p, _ := b.Pick(child.ID, ""); p != first {
		t.Fatal("Pick did not choose the only question")
	}
	if p, _ := b.Pick("agent-other", first.Question.ID); p != nil {
		t.Fatal("Pick gave a question of another child")
	}
	second, _ := ask(t, b, h, context.Background(), seam.AskRequest{Message: "two"})
	p, waiting := b.Pick(child.ID, "")
	if p != nil || len(waiting) != 2 {
		t.Fatalf("Pick = %v, %d waiting; want none chosen of 2", p, len(waiting))
	}
	if err := Ambiguous(child.ID, waiting); !strings.Contains(err.Error(), first.Question.ID) || !strings.Contains(err.Error(), second.Question.ID) {
		t.Fatalf("Ambiguous = %v, want both ids named", err)
	}
	if p, _ := b.Pick("", second.Question.ID); p != second {
		t.Fatal("Pick did not find a named question")
	}
}

// stored is a store of one child's questions.
type stored struct{ qs []seam.Question }

func (s *stored) Questions(context.Context, string) ([]seam.Question, error) { return s.qs, nil }
func (s *stored) PutQuestion(_ context.Context, q seam.Question) error {
	for i := range s.qs {
		if s.qs[i].ID == q.ID {
			s.qs[i] = q
		}
	}
	return nil
}

// TestAfterACrashPendingQuestionsAreCancelled and an answer to one says
// how it was settled.
func TestAfterACrashPendingQuestionsAreCancelled(t *testing.T) {
	answered := seam.Answer{Text: "allow", By: seam.ByPerson, Outcome: seam.OutcomeAccepted}
	s := &stored{qs: []seam.Question{{ID: "q-1", ChildID: child.ID}, {ID: "q-2", ChildID: child.ID, Answer: &answered}}}
	CancelStored(context.Background(), s, child.ID, slog.New(slog.DiscardHandler))
	if a := s.qs[0].Answer; a == nil || a.By != seam.ByInterrupt || a.Outcome != seam.OutcomeCancelled {
		t.Fatalf("a pending question after a crash: %+v, want cancelled by the interrupt", a)
	}
	if s.qs[1].Answer.By != seam.ByPerson {
		t.Fatal("an answered question was cancelled")
	}
	if err := NotWaiting(child.ID, "q-2", s.qs); !strings.Contains(err.Error(), "already settled: accepted by person (allow)") {
		t.Fatalf("NotWaiting = %v, want how it was settled", err)
	}
	if err := NotWaiting(child.ID, "q-9", s.qs); !strings.Contains(err.Error(), "no question q-9 waits") {
		t.Fatalf("NotWaiting of an unknown question = %v", err)
	}
}

// TestSettleAuthorisesAndRefuses: no question, no answer and no error;
// one a caller may not answer is refused before anything is settled;
// several unnamed are ambiguous (to one who may answer); one that no
// longer waits is refused with how it was settled, read only then.
func TestSettleAuthorisesAndRefuses(t *testing.T) {
	h := &host{asked: make(chan string, 1)}
	b := New(h, nil)
	deny := errors.New("not yours")
	mayNot := func(seam.Header) error { return deny }
	may := func(hdr seam.Header) error {
		if hdr.ID != child.ID {
			t.Errorf("authorised for %q, want the asking child's header", hdr.ID)
		}
		return nil
	}
	reads := 0
	none := func() []seam.Question { reads++; return nil }
	accept := func(p *Pending) (seam.Question, error) { return b.Answer(p, "yes") }

	if q, err := b.Settle(child.ID, "", may, none, accept); q != nil || err != nil {
		t.Fatalf("Settle with nothing waiting = %v, %v; want nil, nil", q, err)
	}
	first, out := ask(t, b, h, context.Background(), seam.AskRequest{Message: "one"})
	if _, err := b.Settle(child.ID, "", mayNot, none, accept); !errors.Is(err, deny) {
		t.Fatalf("Settle by one who may not = %v, want the refusal", err)
	}
	if b.Waiting(first.Question.ID) == nil {
		t.Fatal("a refused caller settled the question")
	}
	second, _ := ask(t, b, h, context.Background(), seam.AskRequest{Message: "two"})
	if _, err := b.Settle(child.ID, "", mayNot, none, accept); !errors.Is(err, deny) {
		t.Fatalf("Settle of several by one who may not = %v, want the refusal, not the ids", err)
	}
	if _, err := b.Settle(child.ID, "", may, none, accept); err == nil || !strings.Contains(err.Error(), second.Question.ID) {
		t.Fatalf("Settle of several unnamed = %v, want them named", err)
	}
	q, err := b.Settle(child.ID, first.Question.ID, may, none, accept)
	if err != nil || q == nil || q.Answer.Text != "yes" {
		t.Fatalf("Settle = %+v, %v; want the answer", q, err)
	}
	<-out
	if reads != 0 {
		t.Fatalf("the stored questions were read %d times for questions still waiting", reads)
	}
	settled := func() []seam.Question { reads++; return []seam.Question{*q} }
	if _, err := b.Settle(child.ID, first.Question.ID, may, settled, accept); err == nil || !strings.Contains(err.Error(), "already settled: accepted by person (yes)") || reads != 1 {
		t.Fatalf("Settle of a settled question = %v (%d reads), want how it was settled", err, reads)
	}
}
