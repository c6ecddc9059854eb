//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// askConfig is fakeACPConfig with permission "ask" and the given question
// timeout.
func askConfig(t *testing.T, timeoutSeconds string) string {
	t.Helper()
	cfg, _ := fakeACPConfig(t, "")
	out := strings.Replace(cfg, `"type":"acp",`, `"type":"acp","permission":"ask","question_timeout_seconds":`+timeoutSeconds+`,`, 1)
	if out == cfg {
		t.Fatal("fakeACPConfig's shape changed: permission not set")
	}
	return out
}

// startAsking starts a background child that asks before writing
// notes.txt, and returns its id.
func startAsking(t *testing.T, s *instance) string {
	t.Helper()
	res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "write notes", "prompt": "write file notes.txt",
		"provider": "fake", "run_in_background": true})
	if res.IsError {
		t.Fatalf("start: %s\n%s", text(res), s.stderr)
	}
	b, _ := json.Marshal(res.StructuredContent)
	var h struct {
		AgentID string `json:"agent_id"`
	}
	if err := json.Unmarshal(b, &h); err != nil || h.AgentID == "" {
		t.Fatalf("no agent id in %s", b)
	}
	return h.AgentID
}

// waitNotice calls list_agents with a wait until a notice of source
// arrives; it returns that result's text.
func waitNotice(t *testing.T, s *instance, source string) string {
	t.Helper()
	return waitNoticeWithin(t, s, source, 60*time.Second)
}

// A background ACP child under permission "ask" asks before writing a
// file: its question reaches the principal as a notice on its next call,
// list_agents shows it input_required with the question, send_message
// answers it, and the answer decides; nobody answering in time is the
// deny policy's answer, recorded as timed out.
func TestAskPermissionByNotice(t *testing.T) {
	t.Run("allowed: the file is written and the child completes", func(t *testing.T) {
		s := start(t, nil, serverOpts{config: askConfig(t, "120")})
		id := startAsking(t, s)
		got := waitNotice(t, s, "subagent-question")
		if !strings.Contains(got, "subagent "+id+" asks") || !strings.Contains(got, "Write notes.txt") {
			t.Fatalf("the question notice does not name the child and the question: %s", got)
		}
		m := questionID.FindStringSubmatch(got)
		if m == nil {
			t.Fatalf("no question id in %s", got)
		}
		q := m[1]
		// The listing shows it (this call, or the next, lists after the notice).
		rows := text(s.call(t, testCtx(t), "list_agents", map[string]any{}))
		if !strings.Contains(rows, id+" [input_required]") || !strings.Contains(rows, "asks (question "+q+"): permission to run: Write notes.txt") {
			t.Fatalf("list_agents does not show the child input_required with its question:\n%s", rows)
		}
		if _, err := os.Stat(filepath.Join(s.workspace, "notes.txt")); err == nil {
			t.Fatal("the file was written before anyone answered")
		}
		ans := s.call(t, testCtx(t), "send_message", map[string]any{"subagent_id": id, "answer_to": q, "message": "allow"})
		if ans.IsError || !strings.Contains(text(ans), "answered question "+q) {
			t.Fatalf("answer: %v %s", ans.IsError, text(ans))
		}
		settled := waitNotice(t, s, "subagent-settled")
		if !strings.Contains(settled, "finished") || !strings.Contains(settled, "I wrote notes.txt.") {
			t.Errorf("settlement: %s", settled)
		}
		if b, err := os.ReadFile(filepath.Join(s.workspace, "notes.txt")); err != nil || !strings.Contains(string(b), "fake agent") {
			t.Errorf("notes.txt after allow: %q, %v", b, err)
		}
		if tr := transcriptJSON(t, s, id); !strings.Contains(tr, "permission allowed by the person (allow): Write notes.txt") {
			t.Errorf("the transcript does not record the person's allow: %s", tr)
		}
		// Answered is answered: a second answer is refused and says how it went.
		again := s.call(t, testCtx(t), "send_message", map[string]any{"subagent_id": id, "answer_to": q, "message": "deny"})
		if !again.IsError || !strings.Contains(text(again), "already settled: accepted by person") {
			t.Errorf("a second answer: %v %s", again.IsError, text(again))
		}
	})

	t.Run("declined: not written, the result and the transcript say the person declined", func(t *testing.T) {
		s := start(t, nil, serverOpts{config: askConfig(t, "120")})
		id := startAsking(t, s)
		waitNotice(t, s, "subagent-question")
		// No answer_to: the child waits on exactly one question, so the
		// message answers it.
		ans := s.call(t, testCtx(t), "send_message", map[string]any{"subagent_id": id, "message": "deny"})
		if ans.IsError || !strings.Contains(text(ans), "(declined)") {
			t.Fatalf("answer: %v %s", ans.IsError, text(ans))
		}
		settled := waitNotice(t, s, "subagent-settled")
		if !strings.Contains(settled, "declined by the person: Write notes.txt") || !strings.Contains(settled, "I did not write notes.txt") {
			t.Errorf("the child's result does not say the request was declined: %s", settled)
		}
		if _, err := os.Stat(filepath.Join(s.workspace, "notes.txt")); !os.IsNotExist(err) {
			t.Errorf("notes.txt was written after a deny: %v", err)
		}
		if tr := transcriptJSON(t, s, id); !strings.Contains(tr, "permission declined by the person (deny): Write notes.txt") {
			t.Errorf("the transcript does not record the person's decline: %s", tr)
		}
	})

	t.Run("nobody answers: denied by the policy, recorded as timed out", func(t *testing.T) {
		s := start(t, nil, serverOpts{config: askConfig(t, "1")})
		id := startAsking(t, s)
		settled := waitNotice(t, s, "subagent-settled")
		if !strings.Contains(settled, "timed out") || strings.Contains(settled, "declined by the person") {
			t.Errorf("the result does not say the request timed out: %s", settled)
		}
		if _, err := os.Stat(filepath.Join(s.workspace, "notes.txt")); !os.IsNotExist(err) {
			t.Errorf("notes.txt was written without an answer: %v", err)
		}
		tr := transcriptJSON(t, s, id)
		if !strings.Contains(tr, "permission denied by the policy: timed out") || strings.Contains(tr, "by the person") {
			t.Errorf("the transcript does not record a timeout (and only that): %s", tr)
		}
	})
}
