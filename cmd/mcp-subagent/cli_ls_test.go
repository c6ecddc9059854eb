package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/manager"
)

// ls shows a child waiting on the person as input_required, and under the
// table each question it asks with the command that answers it; a row
// without questions prints nothing more.
func TestLsShowsTheQuestions(t *testing.T) {
	now := time.Now()
	rows := []manager.Row{
		{Kind: "child", ID: "agent-a", Status: manager.StatusInputRequired, Provider: "claude-code", Depth: 1, Label: "write", CreatedAt: now,
			Questions: []manager.PendingQuestion{{ID: "q-1", Kind: "approval", Text: "Claude Code asks to use Write\n{\"file_path\":\"x\"}", Choices: []string{"Allow once"}}}},
		{Kind: "child", ID: "agent-b", Status: manager.StatusInputRequired, Provider: "spawn", Depth: 1, Label: "pick", CreatedAt: now,
			Questions: []manager.PendingQuestion{{ID: "q-2", Kind: "question", Text: "Which colour?"}}},
		{Kind: "child", ID: "agent-c", Status: manager.StatusReady, Provider: "spawn", Depth: 1, Label: "done", CreatedAt: now},
	}
	var b bytes.Buffer
	if err := printRows(&b, rows, false, false, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"agent-a  input_required",
		`agent-a asks (question q-1): Claude Code asks to use Write {"file_path":"x"}`,
		`answer: mcp-subagent send agent-a --answer-to q-1 allow|deny|"Allow once"`,
		"agent-b asks (question q-2): Which colour?",
		`answer: mcp-subagent send agent-b --answer-to q-2 "<your answer>"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("ls does not show %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "agent-c asks") || strings.Count(out, " asks (question ") != 2 {
		t.Errorf("questions of rows that have none:\n%s", out)
	}
}
