package agent_test

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// goldenBudgetJournal holds budget events as the build that introduced
// them writes them. Like goldenJournal it is never regenerated: later
// builds must read it as goldenBudgetEvents.
const goldenBudgetJournal = "testdata/journal/budget-2026-12-01.jsonl"

func goldenBudgetEvents() []agent.Event {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 123456789, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	events := []agent.Event{
		{Kind: agent.EventBudget, Time: at(0), Grant: &agent.Grant{Tokens: 200000, Steps: 40, Seconds: 600, CostUSD: 1.5}},
		{Kind: agent.EventTurnStart, Time: at(1), Turn: 1},
		{Kind: agent.EventMessage, Time: at(2), Turn: 1, Source: agent.SourceUser, Message: &seam.Message{Role: seam.RoleUser, Content: "go"}},
		{Kind: agent.EventMessage, Time: at(3), Turn: 1, Message: &seam.Message{Role: seam.RoleAssistant, Content: "done"},
			Usage: &seam.Usage{InputTokens: 10, OutputTokens: 5, CostUSD: 0.25}},
		{Kind: agent.EventTurnEnd, Time: at(4), Turn: 1, StopReason: agent.StopCompleted},
		// A grant of no limit at all, then a follow-up's grant.
		{Kind: agent.EventBudget, Time: at(5), Grant: &agent.Grant{}},
		{Kind: agent.EventBudget, Time: at(6), Grant: &agent.Grant{Steps: 3}},
	}
	for i := range events {
		events[i].Seq = int64(i)
	}
	return events
}

// The golden budget journal decodes as the events it was written from,
// is valid, and encodes to the very bytes of its lines; the old golden
// journal has no budget event, so LastGrant finds none in it.
func TestGoldenBudgetJournalDecodes(t *testing.T) {
	lines, want := readLines(t, goldenBudgetJournal), goldenBudgetEvents()
	var err error
	if len(lines) != len(want) {
		t.Fatalf("%s has %d lines, want %d", goldenBudgetJournal, len(lines), len(want))
	}
	got := make([]agent.Event, len(lines))
	for i, line := range lines {
		if got[i], err = agent.DecodeEvent(line); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("line %d decodes as\n%+v\nwant\n%+v", i+1, got[i], want[i])
		}
		if enc, err := agent.EncodeEvent(want[i]); err != nil || !bytes.Equal(enc, line) {
			t.Errorf("line %d's event encodes as\n%s (%v)\nthe golden line is\n%s", i+1, enc, err, line)
		}
	}
	if err := agent.Validate(got); err != nil {
		t.Fatal(err)
	}
	if g, _, ok := agent.LastGrant(got, 0); !ok || *g.Grant != (agent.Grant{Steps: 3}) {
		t.Errorf("LastGrant = %+v, %v; want the follow-up's 3 steps", g.Grant, ok)
	}
	var old []agent.Event
	for _, line := range readGolden(t) {
		e, err := agent.DecodeEvent(line)
		if err != nil {
			t.Fatal(err)
		}
		old = append(old, e)
	}
	if _, _, ok := agent.LastGrant(old, 0); ok {
		t.Error("the 2026-12-01 journal, written before budget events, has a grant")
	}
}

// A budget record a later build wrote in another version folds to the
// sentinel, as any record this build cannot read; and a budget event
// without its grant is not a valid journal.
func TestABudgetRecordOfAnotherVersionFoldsAndAGrantIsRequired(t *testing.T) {
	e, err := agent.DecodeEvent([]byte(`{"v":2,"seq":0,"kind":"budget","time":"2026-12-01T09:00:00Z","grant":{"steps":"many"}}`))
	if err != nil || e.Kind != agent.EventUnknown || e.Grant != nil {
		t.Errorf("a version-2 budget record = %+v, %v; want the sentinel", e, err)
	}
	err = agent.Validate([]agent.Event{{Kind: agent.EventBudget}})
	if err == nil || !strings.Contains(err.Error(), "budget grant without limits") {
		t.Errorf("Validate(budget without grant) = %v; want it refused", err)
	}
}

// Spent charges as a live budget does: a step and the usage of each
// assistant message, the rest of a turn's end usage, and the time of the
// turns; a turn a crash cut short counts up to its last event, not up to
// when CloseOpenTurn closed it; since leaves out what came before.
func TestSpentCountsWhatTheJournalRecords(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	asst := func(ms int, calls ...seam.ToolCall) agent.Event {
		return agent.Event{Kind: agent.EventMessage, Time: at(ms), Message: &seam.Message{Role: seam.RoleAssistant, Content: "x", ToolCalls: calls},
			Usage: &seam.Usage{InputTokens: 10, OutputTokens: 5, CostUSD: 0.5}}
	}
	events := []agent.Event{
		{Kind: agent.EventBudget, Time: at(0), Grant: &agent.Grant{Steps: 10}},
		// An in-process turn of 1 s: two calls.
		{Kind: agent.EventTurnStart, Time: at(0)},
		asst(400),
		asst(900),
		{Kind: agent.EventTurnEnd, Time: at(1000), StopReason: agent.StopCompleted},
		// An external turn of 2 s: one answer, the turn's usage on its
		// end (100 + 50 in all, cost 2: the answer's share is not charged
		// twice).
		{Kind: agent.EventTurnStart, Time: at(5000)},
		asst(6000),
		{Kind: agent.EventTurnEnd, Time: at(7000), StopReason: agent.StopCompleted, Usage: &seam.Usage{InputTokens: 100, OutputTokens: 50, CostUSD: 2}},
		// A turn the server stopped in 0.5 s, with a call in flight.
		{Kind: agent.EventTurnStart, Time: at(10000)},
		asst(10500, seam.ToolCall{ID: "c1", Name: "shell"}),
	}
	for i := range events {
		events[i].Seq = int64(i)
	}
	// Closed an hour later, as a restart would.
	all, closing := agent.CloseOpenTurn(events)
	for i := range closing {
		all[len(events)+i].Time = at(3_600_000)
	}
	if err := agent.Validate(all); err != nil {
		t.Fatal(err)
	}
	want := agent.Spending{Tokens: 15 + 15 + 150 + 15, Steps: 4, CostUSD: 0.5 + 0.5 + 2 + 0.5, Elapsed: 3500 * time.Millisecond}
	if got := agent.Spent(all, time.Time{}); got != want {
		t.Errorf("Spent = %+v; want %+v", got, want)
	}
	g, sp, ok := agent.LastGrant(all, 0)
	if !ok || g.Seq != 0 || sp != want {
		t.Errorf("LastGrant = %+v, %+v, %v; want the grant and the same spending", g, sp, ok)
	}
	// From the external turn on: its answer and end, and the crashed turn.
	if got := agent.Spent(all, at(5000)); got.Steps != 2 || got.Tokens != 150+15 || got.Elapsed != 2500*time.Millisecond {
		t.Errorf("Spent since 5 s = %+v; want 2 steps, 165 tokens, 2.5 s", got)
	}
	// A grant in a fork's seed is its parent's: from skips it.
	if _, _, ok := agent.LastGrant(all, 1); ok {
		t.Error("LastGrant found a grant before from")
	}
}
