package agent_test

import (
	"bufio"
	"bytes"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// goldenJournal is testdata/journal/2026-12-01.jsonl, one event per line as
// the build of that date wrote journal events to its store (encoding/json
// on agent.Event, whose message and usage were seam.Message's and
// seam.Usage's tags). It is never regenerated: every later build must read
// it as these events, so stores written then still open.
const goldenJournal = "testdata/journal/2026-12-01.jsonl"

// goldenEvents is what goldenJournal holds: every kind, every role and
// source, tool calls and their results, a refusal, usage with and without
// cost, a turn/end of every stop reason (with diagnostics, and with usage
// as external turns write it), and a session handle. It is a valid journal.
func goldenEvents() []agent.Event {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s)*time.Second + 123456789) }
	msg := func(role seam.Role, content string) *seam.Message { return &seam.Message{Role: role, Content: content} }
	events := []agent.Event{
		// Turn 1: an external child's turn, with its session handle and
		// usage on the turn's end.
		{Kind: agent.EventTurnStart, Time: at(0), Turn: 1},
		{Kind: agent.EventMessage, Time: at(1), Turn: 1, Source: agent.SourceUser, Message: msg(seam.RoleUser, "review a.go\nand say <why> & how: é ✓")},
		{Kind: agent.EventSession, Time: at(2), Turn: 1, Session: "019a1b2c-thread"},
		{Kind: agent.EventMessage, Time: at(3), Turn: 1, Message: msg(seam.RoleAssistant, "a.go is fine")},
		{Kind: agent.EventTurnEnd, Time: at(4), Turn: 1, StopReason: agent.StopCompleted,
			Usage: &seam.Usage{InputTokens: 1200, OutputTokens: 80, CostUSD: 0.0125}},
		// Turn 2: an in-process turn with two tool calls answered out of
		// order, a system message, and usage on each assistant message.
		{Kind: agent.EventTurnStart, Time: at(5), Turn: 2},
		{Kind: agent.EventMessage, Time: at(6), Turn: 2, Source: agent.SourceReport, Message: msg(seam.RoleUser, "child c7 reports: done")},
		{Kind: agent.EventMessage, Time: at(7), Turn: 2, Message: msg(seam.RoleSystem, "be brief")},
		{Kind: agent.EventMessage, Time: at(8), Turn: 2,
			Message: &seam.Message{Role: seam.RoleAssistant, Content: "reading both", ToolCalls: []seam.ToolCall{
				{ID: "call_1", Name: "read_file", Arguments: `{"path":"a.go"}`},
				{ID: "call_2", Name: "list_dir", Arguments: ""},
			}},
			Usage: &seam.Usage{InputTokens: 1500, OutputTokens: 40}},
		{Kind: agent.EventMessage, Time: at(9), Turn: 2, Message: &seam.Message{Role: seam.RoleTool, ToolCallID: "call_2", Content: "a.go\nb.go"}},
		{Kind: agent.EventMessage, Time: at(10), Turn: 2, Message: &seam.Message{Role: seam.RoleTool, ToolCallID: "call_1", Content: ""}},
		{Kind: agent.EventMessage, Time: at(11), Turn: 2, Message: msg(seam.RoleAssistant, "both read"),
			Usage: &seam.Usage{InputTokens: 1700, OutputTokens: 12}},
		{Kind: agent.EventTurnEnd, Time: at(12), Turn: 2, StopReason: agent.StopCompleted},
		// Turn 3: a settlement notice answered with a refusal.
		{Kind: agent.EventTurnStart, Time: at(13), Turn: 3},
		{Kind: agent.EventMessage, Time: at(14), Turn: 3, Source: agent.SourceSettled, Message: msg(seam.RoleUser, "Background subagent c7 finished.")},
		{Kind: agent.EventMessage, Time: at(15), Turn: 3, Message: &seam.Message{Role: seam.RoleAssistant, Refusal: "I can't help with that."},
			Usage: &seam.Usage{InputTokens: 30, OutputTokens: 9, CostUSD: 0.0001}},
		{Kind: agent.EventTurnEnd, Time: at(16), Turn: 3, StopReason: agent.StopRefusal, Diagnostic: "the model refused: I can't help with that."},
		// Turn 4: cut off.
		{Kind: agent.EventTurnStart, Time: at(17), Turn: 4},
		{Kind: agent.EventMessage, Time: at(18), Turn: 4, Source: agent.SourceUser, Message: msg(seam.RoleUser, "write it all")},
		{Kind: agent.EventMessage, Time: at(19), Turn: 4, Message: msg(seam.RoleAssistant, "part one"),
			Usage: &seam.Usage{InputTokens: 0, OutputTokens: 0}},
		{Kind: agent.EventTurnEnd, Time: at(20), Turn: 4, StopReason: agent.StopMaxTokens, Diagnostic: "the answer was cut off at the model's token limit"},
		// Turn 5: interrupted with a call in flight, answered by the runtime.
		{Kind: agent.EventTurnStart, Time: at(21), Turn: 5},
		{Kind: agent.EventMessage, Time: at(22), Turn: 5, Source: agent.SourceUser, Message: msg(seam.RoleUser, "run the tests")},
		{Kind: agent.EventMessage, Time: at(23), Turn: 5,
			Message: &seam.Message{Role: seam.RoleAssistant, ToolCalls: []seam.ToolCall{{ID: "call_3", Name: "shell", Arguments: `{"cmd":"go test ./..."}`}}}},
		{Kind: agent.EventMessage, Time: at(24), Turn: 5, Message: &seam.Message{Role: seam.RoleTool, ToolCallID: "call_3", Content: "not run: the server stopped while this turn ran"}},
		{Kind: agent.EventTurnEnd, Time: at(25), Turn: 5, StopReason: agent.StopAborted, Diagnostic: "the server stopped while this turn ran"},
		// Turn 6: an external turn that failed, with the usage it had.
		{Kind: agent.EventTurnStart, Time: at(26), Turn: 6},
		{Kind: agent.EventMessage, Time: at(27), Turn: 6, Source: agent.SourceUser, Message: msg(seam.RoleUser, "again")},
		{Kind: agent.EventTurnEnd, Time: at(28), Turn: 6, StopReason: agent.StopError, Diagnostic: "codex exited with status 1",
			Usage: &seam.Usage{InputTokens: 10, OutputTokens: 0, CostUSD: 0.5}},
	}
	for i := range events {
		events[i].Seq = int64(i)
	}
	return events
}

// readGolden returns goldenJournal's lines.
func readGolden(t testing.TB) [][]byte {
	t.Helper()
	return readLines(t, goldenJournal)
}

// readLines returns the lines of the file at path.
func readLines(t testing.TB, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines [][]byte
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, bytes.Clone(sc.Bytes()))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// TestGoldenJournalDecodes: every line of the golden journal decodes as
// the event it was written from, the journal is valid, and this build
// encodes each event to the very bytes of its line, so builds of that date
// read what this one writes.
func TestGoldenJournalDecodes(t *testing.T) {
	lines, want := readGolden(t), goldenEvents()
	if len(lines) != len(want) {
		t.Fatalf("%s has %d lines, want %d", goldenJournal, len(lines), len(want))
	}
	got := make([]agent.Event, len(lines))
	for i, line := range lines {
		e, err := agent.DecodeEvent(line)
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		got[i] = e
		if !reflect.DeepEqual(e, want[i]) {
			t.Errorf("line %d decodes as\n%+v\nwant\n%+v", i+1, e, want[i])
		}
		enc, err := agent.EncodeEvent(want[i])
		if err != nil {
			t.Fatalf("encode line %d's event: %v", i+1, err)
		}
		if !bytes.Equal(enc, line) {
			t.Errorf("line %d's event encodes as\n%s\nthe golden line is\n%s", i+1, enc, line)
		}
	}
	if err := agent.Validate(got); err != nil {
		t.Fatal(err)
	}
	kinds := map[agent.EventKind]bool{}
	for _, e := range got {
		kinds[e.Kind] = true
	}
	for _, k := range []agent.EventKind{agent.EventTurnStart, agent.EventMessage, agent.EventTurnEnd, agent.EventSession} {
		if !kinds[k] {
			t.Errorf("the golden journal has no %s event", k)
		}
	}
}
