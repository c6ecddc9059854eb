package storetest

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// testQuestions pins the question record: every field reads back as
// written (times exactly), an answer replaces the question in place,
// order is creation order whatever the store order, a child's questions
// are its own, an unknown child or an invalid question is refused, and
// Delete takes the questions with the child.
func testQuestions(t *testing.T, s seam.Store) {
	a, b := header("child-a", "principal:local", 0), header("child-b", "principal:local", time.Second)
	mustCreate(t, s, a)
	mustCreate(t, s, b)
	if qs, err := s.Questions(ctx, a.ID); err != nil || len(qs) != 0 {
		t.Fatalf("a child with no question: %v, %v; want none", qs, err)
	}
	late := seam.Question{ID: "q-1", ChildID: a.ID, Kind: seam.QuestionApproval, Message: "Write notes.txt?",
		Choices: []string{"Allow once", "Reject once"}, Created: base.Add(2 * time.Second), Deadline: base.Add(10 * time.Minute)}
	early := seam.Question{ID: "q-2", ChildID: a.ID, Kind: seam.QuestionFree, Message: "Which branch?", Created: base.Add(time.Second)}
	other := seam.Question{ID: "q-3", ChildID: b.ID, Kind: seam.QuestionFree, Message: "b's own", Created: base}
	for _, q := range []seam.Question{late, early, other} {
		if err := s.PutQuestion(ctx, q); err != nil {
			t.Fatalf("PutQuestion %s: %v", q.ID, err)
		}
	}
	same := func(got, want []seam.Question) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("questions: got %d %+v, want %d", len(got), got, len(want))
		}
		for i := range want {
			g, w := got[i], want[i]
			if !g.Created.Equal(w.Created) || !g.Deadline.Equal(w.Deadline) {
				t.Fatalf("question %s times: got %v/%v, want %v/%v", w.ID, g.Created, g.Deadline, w.Created, w.Deadline)
			}
			if (g.Answer == nil) != (w.Answer == nil) || (g.Answer != nil && !g.Answer.At.Equal(w.Answer.At)) {
				t.Fatalf("question %s answer: got %+v, want %+v", w.ID, g.Answer, w.Answer)
			}
			g.Created, g.Deadline, w.Created, w.Deadline = time.Time{}, time.Time{}, time.Time{}, time.Time{}
			if g.Answer != nil {
				ga, wa := *g.Answer, *w.Answer
				ga.At, wa.At = time.Time{}, time.Time{}
				g.Answer, w.Answer = &ga, &wa
			}
			if !reflect.DeepEqual(g, w) {
				t.Fatalf("question %d: got %+v, want %+v", i, g, w)
			}
		}
	}
	qs, err := s.Questions(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	same(qs, []seam.Question{early, late})
	if !qs[1].Pending() {
		t.Fatal("a question stored without an answer reads back answered")
	}

	answered := late
	answered.Answer = &seam.Answer{Text: "deny", By: seam.ByDeadline, Outcome: seam.OutcomeTimedOut, At: base.Add(10 * time.Minute)}
	if err := s.PutQuestion(ctx, answered); err != nil {
		t.Fatalf("recording the answer: %v", err)
	}
	qs, err = s.Questions(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	same(qs, []seam.Question{early, answered})
	if qs[1].Answer.By != seam.ByDeadline || qs[1].Answer.Outcome != seam.OutcomeTimedOut {
		t.Fatalf("the answer read back as %+v", qs[1].Answer)
	}
	if qs, err := s.Questions(ctx, b.ID); err != nil {
		t.Fatal(err)
	} else {
		same(qs, []seam.Question{other})
	}

	if err := s.PutQuestion(ctx, seam.Question{ID: "q-9", ChildID: "child-none", Kind: seam.QuestionFree}); !errors.Is(err, seam.ErrNotFound) {
		t.Fatalf("a question of an unknown child: %v, want ErrNotFound", err)
	}
	if _, err := s.Questions(ctx, "child-none"); !errors.Is(err, seam.ErrNotFound) {
		t.Fatalf("the questions of an unknown child: %v, want ErrNotFound", err)
	}
	for _, bad := range []seam.Question{
		{ChildID: a.ID, Kind: seam.QuestionFree},
		{ID: "q-x", Kind: seam.QuestionFree},
		{ID: "q-x", ChildID: a.ID, Kind: "poll"},
	} {
		if err := s.PutQuestion(ctx, bad); err == nil {
			t.Fatalf("an invalid question %+v was stored", bad)
		}
	}

	if _, err := s.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, a) // the same id again: it starts with no question
	if qs, err := s.Questions(ctx, a.ID); err != nil || len(qs) != 0 {
		t.Fatalf("a deleted child's questions outlived it: %+v, %v", qs, err)
	}
	if qs, err := s.Questions(ctx, b.ID); err != nil || len(qs) != 1 {
		t.Fatalf("deleting a sibling took b's questions: %+v, %v", qs, err)
	}
}
