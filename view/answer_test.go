package view

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/edge"
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
	row := rowAfterSnapshot(t, s, id, manager.StatusInputRequired)
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

// api/answer from the outside, as an attacker would send it: without the
// view's token, with a wrong one, with a body that is not JSON, from a
// foreign Origin, or (on the loopback listener, behind edge.GuardHost as
// mcp-subagent ui serves it) under a foreign Host; each is refused and
// the question still waits, unanswered.
func TestAnAnswerFromOutsideTheViewIsRefused(t *testing.T) {
	r := newRig(t, Options{Tick: 20 * time.Millisecond, SameOrigin: edge.ViewSameOrigin})
	at := r.token(t, alice)
	id := r.start(t, alice, "ASK-USER pick a colour")
	s := r.open(t, "/api/tree?token="+at)
	row := rowAfterSnapshot(t, s, id, manager.StatusInputRequired)
	qid := row.Questions[0].ID
	body := `{"id":"` + id + `","question":"` + qid + `","message":"blue"}`
	for _, c := range []struct {
		name, path, body string
		hdr              []string
		want             int
	}{
		{"no token", "/api/answer", body, nil, http.StatusUnauthorized},
		{"a wrong token", "/api/answer?token=" + at + "x", body, nil, http.StatusForbidden},
		{"a text/plain body", "/api/answer?token=" + at, body, []string{"Content-Type", "text/plain"}, http.StatusUnsupportedMediaType},
		{"a form body", "/api/answer?token=" + at, "id=" + id + "&question=" + qid + "&message=blue", []string{"Content-Type", "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType},
		{"a body that is not JSON", "/api/answer?token=" + at, "not json", nil, http.StatusBadRequest},
		{"a foreign origin", "/api/answer?token=" + at, body, []string{"Origin", "http://evil.example"}, http.StatusForbidden},
		{"a rebound name's origin", "/api/answer?token=" + at, body, []string{"Origin", "http://rebound.example:" + fmt.Sprint(r.srv.Listener.Addr().(*net.TCPAddr).Port)}, http.StatusForbidden},
	} {
		if code, out := r.post(t, c.path, c.body, c.hdr...); code != c.want {
			t.Errorf("%s: %d %v, want %d", c.name, code, out, c.want)
		}
	}
	// A page on a name rebound to 127.0.0.1 sends its own name as Host.
	guarded := edge.GuardHost(r.v.Handler(), r.srv.Listener.Addr())
	req := httptest.NewRequest(http.MethodPost, "/api/answer?token="+at, strings.NewReader(body))
	req.Host = "rebound.example:" + fmt.Sprint(r.srv.Listener.Addr().(*net.TCPAddr).Port)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	guarded.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Errorf("a foreign Host: %d %s, want 403", rec.Code, rec.Body)
	}
	qs, err := r.st.Questions(context.Background(), id)
	if err != nil || len(qs) != 1 || qs[0].Answer != nil {
		t.Fatalf("after the refused answers: %+v, %v; want the question unanswered", qs, err)
	}
	if code, out := r.post(t, "/api/answer?token="+at, body); code != http.StatusOK || out["question"] != qid {
		t.Fatalf("alice's own answer: %d %v", code, out)
	}
}

// rowAfterSnapshot is id's row once in status want: in the stream's
// snapshot when the child got there before the stream opened (no change
// will bring it then), else in a later change.
func rowAfterSnapshot(t *testing.T, s *stream, id, want string) Row {
	t.Helper()
	for _, r := range decode[Snapshot](t, s.next(t), "snapshot").Rows {
		if r.ID == id && r.Status == want {
			return r
		}
	}
	return waitRow(t, s, id, want)
}
