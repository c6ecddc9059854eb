package agent_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

var wireT0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func TestDecodeEventTolerates(t *testing.T) {
	sentinel := func(seq int64, at time.Time) agent.Event {
		return agent.Event{Seq: seq, Kind: agent.EventUnknown, Time: at}
	}
	tests := []struct {
		name string
		in   string
		want agent.Event
	}{
		{"an unknown field is ignored",
			`{"seq":4,"kind":"turn/end","time":"2026-12-01T09:00:00Z","turn":2,"stop_reason":"completed","future":{"a":[1]}}`,
			agent.Event{Seq: 4, Kind: agent.EventTurnEnd, Time: wireT0, Turn: 2, StopReason: agent.StopCompleted}},
		{"an unknown field inside a message is ignored",
			`{"seq":1,"kind":"message","time":"2026-12-01T09:00:00Z","message":{"role":"user","content":"hi","name":"x"}}`,
			agent.Event{Seq: 1, Kind: agent.EventMessage, Time: wireT0, Message: &seam.Message{Role: seam.RoleUser, Content: "hi"}}},
		{"an explicit version 1 reads as version 1",
			`{"v":1,"seq":2,"kind":"session","time":"2026-12-01T09:00:00Z","session":"th"}`,
			agent.Event{Seq: 2, Kind: agent.EventSession, Time: wireT0, Session: "th"}},
		{"an unstated stop reason reads as written, for the consumers to judge",
			`{"seq":3,"kind":"turn/end","time":"2026-12-01T09:00:00Z","stop_reason":"budget"}`,
			agent.Event{Seq: 3, Kind: agent.EventTurnEnd, Time: wireT0, StopReason: "budget"}},
		{"an unknown kind folds to the sentinel, keeping sequence and time",
			`{"seq":7,"kind":"turn/pause","time":"2026-12-01T09:00:00Z","turn":3,"message":{"role":"user","content":"x"},"usage":{"input_tokens":9,"output_tokens":1}}`,
			sentinel(7, wireT0)},
		{"an unknown kind whose fields are not version 1's still folds",
			`{"seq":7,"kind":"compaction","time":"2026-12-01T09:00:00Z","turn":"two","message":"summary"}`,
			sentinel(7, wireT0)},
		{"a later version folds even when its fields would read",
			`{"v":2,"seq":5,"kind":"message","time":"2026-12-01T09:00:00Z","message":{"role":"user","content":"x"}}`,
			sentinel(5, wireT0)},
		{"a later version with its own time format folds without a time",
			`{"v":3,"seq":5,"kind":"message","time":1796115600,"message":["parts"]}`,
			sentinel(5, time.Time{})},
		{"a version this build never wrote folds",
			`{"v":0,"seq":5,"kind":"turn/start","time":"2026-12-01T09:00:00Z"}`,
			sentinel(5, wireT0)},
		{"the sentinel reads as itself, without a body",
			`{"seq":6,"kind":"unknown","time":"2026-12-01T09:00:00Z","session":"s","turn":"x"}`,
			sentinel(6, wireT0)},
		{"an unknown kind without a time folds without one",
			`{"seq":6,"kind":"x"}`, sentinel(6, time.Time{})},
		{"empty tool calls read as none",
			`{"seq":1,"kind":"message","time":"2026-12-01T09:00:00Z","message":{"role":"assistant","tool_calls":[]}}`,
			agent.Event{Seq: 1, Kind: agent.EventMessage, Time: wireT0, Message: &seam.Message{Role: seam.RoleAssistant}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := agent.DecodeEvent([]byte(tt.in))
			if err != nil {
				t.Fatalf("DecodeEvent(%s): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("DecodeEvent(%s) =\n%+v\nwant\n%+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestDecodeEventRefuses(t *testing.T) {
	for _, tt := range []struct{ name, in string }{
		{"nothing", ``},
		{"null", `null`},
		{"an array", `[{"seq":0,"kind":"turn/start"}]`},
		{"a string", `"turn/start"`},
		{"binary", "\x00\xff{not json"},
		{"a truncated record", `{"seq":0,"kind":"mess`},
		{"trailing data", `{"seq":0,"kind":"message"} {}`},
		{"a record without a kind", `{"seq":0,"time":"2026-12-01T09:00:00Z"}`},
		{"a negative sequence", `{"seq":-1,"kind":"message"}`},
		{"a negative sequence of an unknown kind", `{"seq":-1,"kind":"future"}`},
		{"a sequence that is not an integer", `{"seq":"0","kind":"future"}`},
		{"a version that is not an integer", `{"v":"2","seq":0,"kind":"message"}`},
		{"a known kind with a bad time", `{"seq":0,"kind":"message","time":"yesterday"}`},
		{"a known kind with a field of the wrong type", `{"seq":0,"kind":"turn/end","time":"2026-12-01T09:00:00Z","turn":"two"}`},
		{"a message that is not an object", `{"seq":0,"kind":"message","time":"2026-12-01T09:00:00Z","message":"hi"}`},
	} {
		if e, err := agent.DecodeEvent([]byte(tt.in)); err == nil {
			t.Errorf("DecodeEvent accepted %s (%q) as %+v", tt.name, tt.in, e)
		}
	}
}

func TestEncodeEventWritesTheSentinelBare(t *testing.T) {
	b, err := agent.EncodeEvent(agent.Event{Seq: 3, Kind: agent.EventUnknown, Time: wireT0, Turn: 2,
		Message: &seam.Message{Role: seam.RoleUser, Content: "x"}, Session: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"seq":3,"kind":"unknown","time":"2026-12-01T09:00:00Z"}`; string(b) != want {
		t.Fatalf("EncodeEvent(sentinel) = %s, want %s", b, want)
	}
}

// TestWireCoversTheMessage trips when seam.Message or seam.Usage gains a
// field: the journal's wire types must then say whether the field is
// stored (an added optional field keeps version 1). seam.ToolCall is held
// to the same by a type conversion that stops compiling.
func TestWireCoversTheMessage(t *testing.T) {
	for _, tt := range []struct {
		typ  reflect.Type
		want []string
	}{
		{reflect.TypeOf(seam.Message{}), []string{"Role", "Content", "ToolCalls", "ToolCallID", "Refusal"}},
		{reflect.TypeOf(seam.Usage{}), []string{"InputTokens", "OutputTokens", "CostUSD"}},
	} {
		var got []string
		for i := 0; i < tt.typ.NumField(); i++ {
			got = append(got, tt.typ.Field(i).Name)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s has fields %v; agent/wire.go stores %v: decide how the new ones are stored", tt.typ, got, tt.want)
		}
	}
}

// decodeLines decodes journal records, one per line.
func decodeLines(t *testing.T, lines ...string) []agent.Event {
	t.Helper()
	out := make([]agent.Event, len(lines))
	for i, l := range lines {
		e, err := agent.DecodeEvent([]byte(l))
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		out[i] = e
	}
	return out
}

// TestUnknownEventsOnResume pins what a record this build cannot read
// means for a resumed journal: it keeps its place and sequence number, the
// journal stays valid, and it is left out of everything read from the
// journal — the transcript the model sees, the last outcome, the session
// handle, the turn count — while a fork seed keeps it in place.
func TestUnknownEventsOnResume(t *testing.T) {
	stored := decodeLines(t,
		`{"seq":0,"kind":"turn/start","time":"2026-12-01T09:00:00Z","turn":1}`,
		`{"seq":1,"kind":"message","time":"2026-12-01T09:00:01Z","turn":1,"message":{"role":"user","content":"hi"},"source":"user"}`,
		`{"seq":2,"kind":"session","time":"2026-12-01T09:00:02Z","turn":1,"session":"old"}`,
		`{"seq":3,"kind":"reasoning","time":"2026-12-01T09:00:03Z","turn":1,"text":"thinking"}`,
		`{"v":2,"seq":4,"kind":"session","time":"2026-12-01T09:00:04Z","session":"new"}`,
		`{"seq":5,"kind":"message","time":"2026-12-01T09:00:05Z","turn":1,"message":{"role":"assistant","content":"hello"}}`,
		`{"seq":6,"kind":"turn/end","time":"2026-12-01T09:00:06Z","turn":1,"stop_reason":"completed"}`,
		`{"v":2,"seq":7,"kind":"turn/start","time":"2026-12-01T09:00:07Z","turn":2}`,
		`{"v":2,"seq":8,"kind":"message","time":"2026-12-01T09:00:08Z","turn":2,"message":{"role":"assistant","content":"later"}}`,
	)
	for _, i := range []int{3, 4, 7, 8} {
		if stored[i].Kind != agent.EventUnknown || stored[i].Seq != int64(i) {
			t.Fatalf("record %d decodes as %+v, want the sentinel at its sequence", i, stored[i])
		}
	}
	if err := agent.Validate(stored); err != nil {
		t.Fatalf("a journal with unknown records is invalid: %v", err)
	}
	all, closing := agent.CloseOpenTurn(stored)
	if closing != nil || len(all) != len(stored) {
		t.Fatalf("CloseOpenTurn closed a turn only unknown records opened: %+v", closing)
	}
	if got := agent.LastOutcome(stored); got.Output != "hello" || got.StopReason != agent.StopCompleted {
		t.Errorf("LastOutcome = %+v, want turn 1's outcome", got)
	}
	if got := agent.LastSession(stored); got != "old" {
		t.Errorf("LastSession = %q, want the one this build can read", got)
	}

	j, err := agent.NewJournal(stored)
	if err != nil {
		t.Fatal(err)
	}
	if got := j.NextTurn(); got != 2 {
		t.Errorf("NextTurn = %d, want 2", got)
	}
	if got := j.CompletedPrefix(); len(got) != 7 || got[3].Kind != agent.EventUnknown {
		t.Errorf("CompletedPrefix = %d events, want the 7 up to turn 1's end, the unknown record in place", len(got))
	}
	if got := agent.Messages(stored); !reflect.DeepEqual(got, []llm.Message{
		{Role: llm.RoleUser, Content: "hi"}, {Role: llm.RoleAssistant, Content: "hello"},
	}) {
		t.Errorf("Messages = %+v, want only the messages this build can read", got)
	}

	client := script(say("again"))
	a := newAgent(t, agent.Config{Client: client, Journal: j})
	if res := a.RunTurn(context.Background(), "more", agent.SourceUser); res.StopReason != agent.StopCompleted {
		t.Fatalf("resumed turn = %+v", res)
	}
	reqs := client.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model calls, want 1", len(reqs))
	}
	var seen []string
	for _, m := range reqs[0].Messages {
		seen = append(seen, string(m.Role)+":"+m.Content)
	}
	if want := "user:hi assistant:hello user:more"; strings.Join(seen, " ") != want {
		t.Errorf("the resumed model saw %q, want %q", strings.Join(seen, " "), want)
	}
	evs := j.Events()
	if len(evs) != len(stored)+4 || evs[len(stored)].Seq != int64(len(stored)) || evs[len(stored)].Turn != 2 {
		t.Errorf("the resumed turn was not appended after the unknown records: %s", dump(evs[len(stored):]))
	}
	for i, e := range evs[:len(stored)] {
		if !reflect.DeepEqual(e, stored[i]) {
			t.Errorf("event %d changed on resume: %+v, was %+v", i, e, stored[i])
		}
	}
	if err := agent.Validate(evs); err != nil {
		t.Errorf("the resumed journal is invalid: %v", err)
	}
}

// TestUnknownRecordCannotStandInForAnAnswer: a sentinel answers no tool
// call, so a journal whose tool answer a later build wrote in its own
// format is refused, not replayed with the call unanswered.
func TestUnknownRecordCannotStandInForAnAnswer(t *testing.T) {
	events := decodeLines(t,
		`{"seq":0,"kind":"turn/start","time":"2026-12-01T09:00:00Z","turn":1}`,
		`{"seq":1,"kind":"message","time":"2026-12-01T09:00:00Z","turn":1,"message":{"role":"assistant","tool_calls":[{"id":"c1","name":"read_file","arguments":"{}"}]}}`,
		`{"v":2,"seq":2,"kind":"message","time":"2026-12-01T09:00:00Z","turn":1,"message":{"role":"tool","tool_call_id":"c1"}}`,
		`{"seq":3,"kind":"turn/end","time":"2026-12-01T09:00:00Z","turn":1,"stop_reason":"completed"}`,
	)
	if err := agent.Validate(events); err == nil || !strings.Contains(err.Error(), "unanswered tool calls") {
		t.Fatalf("Validate = %v, want the unanswered call refused", err)
	}
}
