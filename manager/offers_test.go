package manager_test

import (
	"context"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// gatedAsker is askProvider whose turn asks only once gate is closed, so
// a test can offer to take the question first.
type gatedAsker struct {
	askProvider
	gate chan struct{}
}

func (p *gatedAsker) NewDriver(ctx context.Context, r seam.DriverRequest) (seam.Driver, error) {
	d, _ := p.askProvider.NewDriver(ctx, r)
	return askGatedDriver{askDriver: d.(*askDriver), gate: p.gate}, nil
}

type askGatedDriver struct {
	*askDriver
	gate chan struct{}
}

func (d askGatedDriver) RunTurn(ctx context.Context, in []agent.Input) agent.TurnResult {
	<-d.gate
	return d.askDriver.RunTurn(ctx, in)
}

func newGatedAsking(t *testing.T) (askSetup, chan struct{}) {
	t.Helper()
	p := &gatedAsker{askProvider: askProvider{timeout: time.Minute, got: make(chan seam.Question, 4)}, gate: make(chan struct{})}
	s := startAsker(t, p, &p.askProvider)
	return s, p.gate
}

func offered(t *testing.T, ch <-chan seam.Question) seam.Question {
	t.Helper()
	select {
	case q := <-ch:
		return q
	case <-time.After(10 * time.Second):
		t.Fatal("no question was offered")
	}
	return seam.Question{}
}

// A question asked while a call offers to take its child's questions goes
// to that call, not to the parent as a notice; the person's decline is
// stored as given by the person and reaches the child as a denial.
func TestAnOfferedQuestionGoesToTheWaitingCall(t *testing.T) {
	s, gate := newGatedAsking(t)
	ch, stop := s.m.OfferQuestions(s.child)
	defer stop()
	close(gate)
	q := offered(t, ch)
	if q.ChildID != s.child || q.Kind != seam.QuestionApproval || q.Message != "permission to run: Write notes.txt" {
		t.Fatalf("offered %+v", q)
	}
	for _, n := range s.m.TakeNotices("p", "") {
		if n.Source == agent.SourceQuestion {
			t.Fatalf("the offered question also went out as a notice: %s", n.Text)
		}
	}
	if _, err := s.m.Decline(context.Background(), seam.ParentRef{Principal: "other", Cwd: s.root.Cwd}, s.child, q.ID); err == nil {
		t.Fatal("another principal declined the question")
	}
	got, err := s.m.Decline(context.Background(), s.root, s.child, q.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := seam.Answer{Text: "deny", By: seam.ByPerson, Outcome: seam.OutcomeDeclined}
	if a := got.Answer; a.Text != want.Text || a.By != want.By || a.Outcome != want.Outcome {
		t.Errorf("Decline answered %+v, want %+v", a, want)
	}
	if a := s.answered(t).Answer; a.Text != "deny" || a.By != seam.ByPerson {
		t.Errorf("the child got %+v", a)
	}
	if a := s.stored(t).Answer; a == nil || a.By != seam.ByPerson || a.Outcome != seam.OutcomeDeclined {
		t.Errorf("stored answer %+v", a)
	}
}

// What an offer could not put to the person becomes a notice: a question
// offered but not taken when the offer stops, and one handed back with
// NoticeQuestion. A question that waited before the offer is offered too.
func TestAQuestionTheOfferDidNotTakeBecomesANotice(t *testing.T) {
	s, gate := newGatedAsking(t)
	ch0, stop := s.m.OfferQuestions(s.child)
	close(gate)
	waitOffered(t, ch0)
	stop()
	n := questionNotice(t, s)
	q := s.stored(t)
	if !q.Pending() || n.ChildID != s.child {
		t.Fatalf("question %+v, notice %+v", q, n)
	}

	ch, stop2 := s.m.OfferQuestions(s.child)
	if got := offered(t, ch); got.ID != q.ID {
		t.Errorf("the waiting question was not offered: %+v", got)
	}
	s.m.NoticeQuestion(q.ID)
	questionNotice(t, s)
	stop2()
	if _, err := s.m.Answer(context.Background(), s.root, s.child, q.ID, "allow"); err != nil {
		t.Fatal(err)
	}
	s.answered(t)
	s.m.NoticeQuestion(q.ID) // settled: no notice
	for _, n := range s.m.TakeNotices("p", "") {
		if n.Source == agent.SourceQuestion {
			t.Errorf("a settled question was noticed: %s", n.Text)
		}
	}
}

// waitOffered waits until a question sits in ch, not taken.
func waitOffered(t *testing.T, ch <-chan seam.Question) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(ch) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the child asked nothing")
		}
		time.Sleep(time.Millisecond)
	}
}

func questionNotice(t *testing.T, s askSetup) seam.Notice {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		for _, n := range s.m.WaitNotices(ctx, "p", "") {
			if n.Source == agent.SourceQuestion {
				return n
			}
		}
	}
	t.Fatal("no question notice")
	return seam.Notice{}
}
