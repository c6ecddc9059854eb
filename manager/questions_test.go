package manager_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// askProvider runs continuable children whose turn asks one approval
// through DriverRequest.Ask and ends with what came back.
type askProvider struct {
	timeout time.Duration
	got     chan seam.Question // what each Ask returned
}

func (*askProvider) Name() string                    { return "asker" }
func (*askProvider) Capabilities() seam.Capabilities { return seam.Capabilities{} }
func (*askProvider) InheritsParentContext() bool     { return false }
func (*askProvider) Continuable()                    {}
func (*askProvider) Prepare(context.Context, seam.StartRequest) (seam.CreationInputs, error) {
	return seam.CreationInputs{}, nil
}
func (p *askProvider) NewDriver(_ context.Context, r seam.DriverRequest) (seam.Driver, error) {
	return &askDriver{p: p, j: r.Journal, ask: r.Ask}, nil
}

type askDriver struct {
	p   *askProvider
	j   *agent.Journal
	ask seam.AskFunc
}

func (d *askDriver) RunTurn(ctx context.Context, _ []agent.Input) agent.TurnResult {
	q := d.ask(ctx, seam.AskRequest{Kind: seam.QuestionApproval, Message: "permission to run: Write notes.txt",
		Choices: []string{"Allow once", "Reject once"}, Declines: []string{"Reject once"}, Timeout: d.p.timeout, Fallback: "deny"})
	d.p.got <- q
	stop := agent.StopCompleted
	if ctx.Err() != nil {
		stop = agent.StopAborted
	}
	return agent.TurnResult{Output: q.Answer.Text + " by " + q.Answer.By, StopReason: stop}
}
func (d *askDriver) Journal() *agent.Journal { return d.j }
func (*askDriver) Close() error              { return nil }

type askSetup struct {
	m     *manager.Manager
	store *memstore.Store
	p     *askProvider
	root  seam.ParentRef
	child string
}

// newAsking starts a root child of principal p that asks at once, and
// waits for its question's notice.
func newAsking(t *testing.T, timeout time.Duration) (askSetup, seam.Notice) {
	t.Helper()
	ap := &askProvider{timeout: timeout, got: make(chan seam.Question, 4)}
	s := startAsker(t, ap, ap)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		for _, n := range s.m.WaitNotices(ctx, "p", "") {
			if n.Source == agent.SourceQuestion {
				return s, n
			}
		}
	}
	t.Fatal("no question notice reached the principal")
	return s, seam.Notice{}
}

// startAsker starts a root child of principal p on provider p (whose
// asking half is ap).
func startAsker(t *testing.T, p seam.Provider, ap *askProvider) askSetup {
	t.Helper()
	s := askSetup{store: memstore.New(), p: ap, root: seam.ParentRef{Principal: "p", Cwd: t.TempDir()}}
	s.m = manager.New(manager.Options{Store: s.store})
	if err := s.m.Register(p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.m.Close(context.Background()) })
	st, err := s.m.StartContinuable(context.Background(), "asker", seam.StartRequest{Label: "l", Prompt: "work", Parent: s.root}, false)
	if err != nil {
		t.Fatal(err)
	}
	s.child = st.ChildID
	return s
}

func (s askSetup) answered(t *testing.T) seam.Question {
	t.Helper()
	select {
	case q := <-s.p.got:
		return q
	case <-time.After(10 * time.Second):
		t.Fatal("the asking turn got no answer")
	}
	return seam.Question{}
}

// stored is the child's one stored question.
func (s askSetup) stored(t *testing.T) seam.Question {
	t.Helper()
	qs, err := s.store.Questions(context.Background(), s.child)
	if err != nil || len(qs) != 1 {
		t.Fatalf("stored questions: %+v, %v; want one", qs, err)
	}
	return qs[0]
}

// A child's question is stored, reaches its parent (the principal) as a
// notice naming the child, the question id and the question, lists the
// child input_required, is refused to whoever may not send to the child
// and to a word an approval does not take, and is answered by the
// principal with the one question the child waits on.
func TestQuestionReachesTheParentAndIsAnswered(t *testing.T) {
	s, n := newAsking(t, time.Minute)
	q := s.stored(t)
	if !q.Pending() || q.Kind != seam.QuestionApproval || q.Deadline.Sub(q.Created) != time.Minute {
		t.Fatalf("the stored question: %+v", q)
	}
	if n.ChildID != s.child || !strings.Contains(n.Text, s.child) || !strings.Contains(n.Text, q.ID) || !strings.Contains(n.Text, "Write notes.txt") {
		t.Fatalf("the notice does not name the child, the question id and the question: %+v", n)
	}
	rows, err := s.m.ListDescendants(s.root)
	if err != nil || len(rows) != 1 {
		t.Fatalf("listing: %+v, %v", rows, err)
	}
	if r := rows[0]; r.Status != manager.StatusInputRequired || len(r.Questions) != 1 || r.Questions[0].ID != q.ID ||
		r.Questions[0].Text != "permission to run: Write notes.txt" {
		t.Fatalf("the row: %+v", r)
	}
	// The status filter finds it, on a first page and by the resident path.
	for _, deep := range []bool{false, true} {
		page, err := s.m.List(s.root, manager.ListQuery{Status: manager.StatusInputRequired, Descendants: deep})
		if err != nil || len(page.Rows) != 1 || page.Rows[0].ID != s.child {
			t.Fatalf("listing status input_required (descendants %v): %+v, %v; want the asking child", deep, page.Rows, err)
		}
	}

	ctx := context.Background()
	other := seam.ParentRef{Principal: "q", Cwd: s.root.Cwd}
	if _, err := s.m.Answer(ctx, other, s.child, q.ID, "allow"); !errors.Is(err, seam.ErrUnauthorized) {
		t.Fatalf("another principal's answer: %v, want UNAUTHORIZED", err)
	}
	if _, err := s.m.Answer(ctx, s.root, s.child, q.ID, "maybe"); err == nil || !strings.Contains(err.Error(), "allow, deny, Allow once, Reject once") {
		t.Fatalf("an answer an approval does not take: %v", err)
	}
	if _, err := s.m.Answer(ctx, s.root, s.child, "q-none", "allow"); err == nil || !strings.Contains(err.Error(), "no question q-none") {
		t.Fatalf("an unknown question: %v", err)
	}
	got, err := s.m.Answer(ctx, s.root, s.child, "", "reject ONCE")
	if err != nil || got == nil || got.ID != q.ID {
		t.Fatalf("answering the one question: %+v, %v", got, err)
	}
	a := s.answered(t).Answer
	if a.Text != "Reject once" || a.By != seam.ByPerson || a.Outcome != seam.OutcomeDeclined {
		t.Fatalf("the turn got %+v, want the person's decline with the option's words", a)
	}
	if sa := s.stored(t).Answer; sa == nil || sa.By != seam.ByPerson || sa.Outcome != seam.OutcomeDeclined {
		t.Fatalf("the stored answer: %+v", sa)
	}
	if _, err := s.m.Answer(ctx, s.root, s.child, q.ID, "allow"); err == nil || !strings.Contains(err.Error(), "already settled: declined by person") {
		t.Fatalf("a second answer: %v", err)
	}
	// Answered, the child no longer lists input_required.
	if rows, _ := s.m.ListDescendants(s.root); len(rows) != 1 || rows[0].Status == manager.StatusInputRequired || rows[0].Questions != nil {
		t.Fatalf("the row after the answer: %+v", rows)
	}
}

// Nobody answering by the deadline is the policy's answer, recorded as
// timed out by the deadline, never as the person's decline.
func TestQuestionDeadlineGivesThePolicyAnswer(t *testing.T) {
	s, _ := newAsking(t, 50*time.Millisecond)
	a := s.answered(t).Answer
	if a.Text != "deny" || a.By != seam.ByDeadline || a.Outcome != seam.OutcomeTimedOut {
		t.Fatalf("the turn got %+v, want deny by the deadline, timed out", a)
	}
	if sa := s.stored(t).Answer; sa == nil || sa.By != seam.ByDeadline || sa.Outcome != seam.OutcomeTimedOut {
		t.Fatalf("the stored answer: %+v", sa)
	}
}

// An interrupt withdraws the question: the turn gets "cancelled", and no
// one's answer is recorded.
func TestQuestionCancelledByInterrupt(t *testing.T) {
	s, _ := newAsking(t, time.Minute)
	if err := s.m.Interrupt(s.root, s.child); err != nil {
		t.Fatal(err)
	}
	a := s.answered(t).Answer
	if a.By != seam.ByInterrupt || a.Outcome != seam.OutcomeCancelled {
		t.Fatalf("the turn got %+v, want cancelled by the interrupt", a)
	}
	if sa := s.stored(t).Answer; sa == nil || sa.Outcome != seam.OutcomeCancelled {
		t.Fatalf("the stored answer: %+v", sa)
	}
}
