package view

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// A child asking the person shows in the tree as input_required with its
// question; the view's token holder answers it (api/answer), through the
// manager's authority (another principal's token is refused), and the
// answer is stored as the person's, given in the web view.
func TestTheViewAnswersAQuestion(t *testing.T) {
	r := newRig(t, Options{Tick: 20 * time.Millisecond})
	at, bt := r.token(t, alice), r.token(t, bob)
	id := r.start(t, alice, "ASK-USER pick a colour")
	s := r.open(t, "/api/tree?token="+at)
	// The child may be asking already when the stream opens: then the
	// snapshot shows it, and no change follows.
	var row Row
	asking := false
	for _, r := range decode[Snapshot](t, s.next(t), "snapshot").Rows {
		if r.ID == id && r.Status == manager.StatusInputRequired {
			row, asking = r, true
		}
	}
	if !asking {
		row = waitRow(t, s, id, manager.StatusInputRequired)
	}
	if len(row.Questions) != 1 || row.Questions[0].Text != "Which colour?" || row.Questions[0].Kind != "question" {
		t.Fatalf("the row's questions: %+v", row.Questions)
	}
	qid := row.Questions[0].ID
	body := `{"id":"` + id + `","question":"` + qid + `","message":"blue"}`
	if code, out := r.post(t, "/api/answer?token="+bt, body); code != http.StatusForbidden || !strings.HasPrefix(fmt.Sprint(out["error"]), "UNAUTHORIZED") {
		t.Errorf("bob answering alice's child: %d %v, want 403 UNAUTHORIZED", code, out)
	}
	for _, c := range []struct{ body, field string }{
		{`{"id":"` + id + `","message":"blue"}`, `field "question"`},
		{`{"id":"` + id + `","question":"` + qid + `","message":" "}`, `field "message"`},
		{`{"id":"` + id + `","question":"q-00","message":"blue"}`, `no question q-00 waits`},
	} {
		if code, out := r.post(t, "/api/answer?token="+at, c.body); code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(out["error"]), c.field) {
			t.Errorf("answer %s: %d %v, want 400 naming %s", c.body, code, out, c.field)
		}
	}
	if code, out := r.post(t, "/api/answer?token="+at, body, "Origin", "http://evil.example"); code != http.StatusForbidden {
		t.Errorf("an answer from a foreign origin: %d %v, want 403", code, out)
	}
	code, out := r.post(t, "/api/answer?token="+at, body)
	if code != http.StatusOK || out["question"] != qid || out["outcome"] != seam.OutcomeAccepted {
		t.Fatalf("alice's answer: %d %v", code, out)
	}
	if got := waitRow(t, s, id, manager.StatusReady); !strings.Contains(got.LastMessage, "GOT: The person answered: blue") {
		t.Errorf("the child's closing message: %q", got.LastMessage)
	}
	qs, err := r.st.Questions(context.Background(), id)
	if err != nil || len(qs) != 1 || qs[0].Answer == nil || qs[0].Answer.By != seam.ByPerson || qs[0].Answer.Via != seam.ViaWebView || qs[0].Answer.Text != "blue" {
		t.Errorf("stored: %+v, %v; want answered by the person via the web view", qs, err)
	}
}
