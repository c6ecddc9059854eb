//go:build realcli

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A real ACP agent (qwen --acp --approval-mode default, on a fake model
// that asks it to write a file) under permission "ask": its permission
// request reaches the principal as a question; "allow" lets the write
// happen and the child completes; "deny" leaves the file unwritten and
// the transcript records the person's decline.
func TestACPRealQwenAsksBeforeWriting(t *testing.T) {
	for _, answer := range []string{"allow", "deny"} {
		t.Run(answer, func(t *testing.T) {
			qa := newQwenAsker(t)
			s, h := startWriter(t, qa.pc, "qwen-notes.txt", &qa.target)
			askAndAnswer(t, s, h.AgentID, answer, qa.target, 3*acpTurnTimeout, nil)
		})
	}
}

// askAndAnswer waits for child id's question notice (onQuestion, when
// set, checks it first), checks that target is not written yet, answers
// the question with answer (allow or deny) and checks the outcome, each
// wait bounded by within: allowed, the file is written, the child's
// result has the model's WRITE-DONE and the transcript notes the person's
// allow; denied, it is not written and the result and the transcript say
// the person declined.
func askAndAnswer(t *testing.T, s *instance, id, answer, target string, within time.Duration, onQuestion func(notice string)) {
	t.Helper()
	got := waitNoticeWithin(t, s, "subagent-question", within)
	m := questionID.FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("no question id in %s", got)
	}
	t.Logf("question notice: %s", got)
	if onQuestion != nil {
		onQuestion(got)
	}
	if _, err := os.Stat(target); err == nil {
		t.Fatal("the file was written before anyone answered")
	}
	ans := s.call(t, testCtx(t), "send_message", map[string]any{"subagent_id": id, "answer_to": m[1], "message": answer})
	if ans.IsError {
		t.Fatalf("answer: %s", text(ans))
	}
	settled := waitNoticeWithin(t, s, "subagent-settled", within)
	t.Logf("settlement: %s", settled)
	_, err := os.Stat(target)
	tr := transcriptJSON(t, s, id)
	if answer == "allow" {
		if err != nil || !strings.Contains(settled, "WRITE-DONE") {
			t.Errorf("allowed: file %v; settlement %s", err, settled)
		}
		if !strings.Contains(tr, "permission allowed by the person (allow)") {
			t.Errorf("the transcript does not record the person's allow: %s", tr)
		}
		return
	}
	if err == nil {
		t.Errorf("denied, yet %s was written", target)
	}
	if !strings.Contains(settled, "declined by the person") || !strings.Contains(tr, "permission declined by the person (deny)") {
		t.Errorf("the decline is not in the result and the transcript: %s\n%s", settled, tr)
	}
}

// startWriter starts a server with the one provider pc and a background
// child of it told to write a file; target is set first to the file's
// path in the server's workspace, which the model's script asks for.
func startWriter(t *testing.T, pc map[string]any, file string, target *string) (*instance, handleSC) {
	t.Helper()
	cfg, _ := json.Marshal(map[string]any{"providers": []any{pc}})
	s := start(t, nil, serverOpts{config: string(cfg)})
	*target = filepath.Join(s.workspace, file)
	res := s.call(t, testCtx(t), "subagent", map[string]any{"description": "write a file", "provider": pc["name"],
		"prompt": "ASK-WRITE: write the file you are told to.", "run_in_background": true})
	var h handleSC
	decodeSC(t, res, &h)
	return s, h
}
