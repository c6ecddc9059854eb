package agent_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
)

// FuzzJournalValidate decodes arbitrary JSON as journal events (as a store
// or a fork seed would): Validate, Messages and CompletedPrefix must not
// panic, and the completed prefix of a valid journal is itself a valid,
// closed journal.
func FuzzJournalValidate(f *testing.F) {
	for _, s := range []string{
		`[]`,
		`[{"seq":0,"kind":"turn/start","turn":1},{"seq":1,"kind":"message","turn":1,"source":"user","message":{"role":"user","content":"hi"}},{"seq":2,"kind":"turn/end","turn":1,"stop_reason":"completed"}]`,
		`[{"seq":0,"kind":"turn/start"},{"seq":1,"kind":"message","message":{"role":"assistant","tool_calls":[{"id":"c1","name":"a","arguments":"{}"}]}},{"seq":2,"kind":"message","message":{"role":"tool","tool_call_id":"c1","content":"x"}},{"seq":3,"kind":"turn/end"},{"seq":4,"kind":"turn/start"},{"seq":5,"kind":"message","message":{"role":"assistant","tool_calls":[{"id":"c2","name":"a"}]}}]`,
		`[{"seq":0,"kind":"message"}]`,
		`[{"seq":0,"kind":"turn/start"},{"seq":1,"kind":"message","message":null},{"seq":2,"kind":"turn/end"}]`,
		`[{"seq":1,"kind":"turn/end"}]`,
		`[null,{"seq":-1}]`,
		`{"seq":0}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var events []agent.Event
		if json.Unmarshal(data, &events) != nil {
			return
		}
		err := agent.Validate(events)
		msgs := agent.Messages(events)

		// A journal built by appending the same events (renumbered) must
		// answer CompletedPrefix without panicking whatever they hold.
		var j agent.Journal
		for _, e := range events {
			j.Append(e)
		}
		_ = agent.Validate(j.CompletedPrefix())

		if err != nil {
			if _, nerr := agent.NewJournal(events); nerr == nil {
				t.Fatalf("NewJournal accepted events Validate refused: %v", err)
			}
			return
		}
		seeded, err := agent.NewJournal(events)
		if err != nil {
			t.Fatalf("NewJournal refused events Validate accepted: %v", err)
		}
		if len(msgs) > len(events) {
			t.Fatalf("Messages returned %d messages for %d events", len(msgs), len(events))
		}
		prefix := seeded.CompletedPrefix()
		if err := agent.Validate(prefix); err != nil {
			t.Fatalf("the completed prefix of a valid journal is invalid: %v", err)
		}
		if len(prefix) > 0 && prefix[len(prefix)-1].Kind != agent.EventTurnEnd {
			t.Fatalf("the completed prefix ends with %q", prefix[len(prefix)-1].Kind)
		}
		for i := len(prefix); i < len(events); i++ {
			if events[i].Kind == agent.EventTurnEnd {
				t.Fatalf("the completed prefix stops at %d before the turn/end at %d", len(prefix), i)
			}
		}
		if _, err := agent.NewJournal(prefix); err != nil {
			t.Fatalf("NewJournal(prefix): %v", err)
		}
	})
}

// FuzzDecodeEvent feeds DecodeEvent arbitrary bytes, seeded with the golden
// journals' records: it never panics, what it accepts is a kind this build
// reads or the sentinel, and re-encoding is lossless from then on:
// decode(encode(decode(b))) == decode(b), and that encoding is a fixed
// point.
func FuzzDecodeEvent(f *testing.F) {
	for _, line := range readGolden(f) {
		f.Add(line)
	}
	for _, line := range readLines(f, goldenBudgetJournal) {
		f.Add(line)
	}
	for _, s := range []string{
		``, `null`, `{}`, `[]`, `{"seq":0}`, `{"seq":-1,"kind":"message"}`, `{"kind":"x"}`, `{"kind":"unknown","turn":"x"}`,
		`{"v":1,"seq":1,"kind":"turn/start","time":"2025-01-02T03:04:05.000000006-07:00","turn":1}`,
		`{"v":2,"seq":3,"kind":"message","time":17,"message":["x"]}`, `{"v":"2","kind":"x"}`,
		`{"seq":0,"kind":"message","time":"2026-12-01T09:00:00-00:00","message":{"role":"tool","tool_calls":[null,{}]},"usage":{}}`,
		`{"seq":0,"kind":"message","message":"hi"}`, "{\"seq\":0,\"kind\":\"session\",\"session\":\"\xff\"}",
		`{"seq":0,"kind":"turn/end"} x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := agent.DecodeEvent(b)
		if err != nil {
			return
		}
		switch e.Kind {
		case agent.EventTurnStart, agent.EventMessage, agent.EventTurnEnd, agent.EventSession, agent.EventBudget:
		case agent.EventUnknown:
			if !reflect.DeepEqual(e, agent.Event{Seq: e.Seq, Kind: e.Kind, Time: e.Time}) {
				t.Fatalf("the sentinel carries more than its place: %+v", e)
			}
		default:
			t.Fatalf("%q decodes to kind %q, neither known nor the sentinel", b, e.Kind)
		}
		enc, err := agent.EncodeEvent(e)
		if err != nil {
			t.Fatalf("accepted %q but cannot encode %+v: %v", b, e, err)
		}
		e2, err := agent.DecodeEvent(enc)
		if err != nil {
			t.Fatalf("accepted %q but refuses its encoding %s: %v", b, enc, err)
		}
		if !sameEvent(e, e2) {
			t.Fatalf("%q decodes as\n%+v\nits encoding %s as\n%+v", b, e, enc, e2)
		}
		enc2, err := agent.EncodeEvent(e2)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not a fixed point: %s then %s (%v)", enc, enc2, err)
		}
	})
}

// sameEvent compares events, their times as instants with the same offset
// (a parsed zone is a new *time.Location each time).
func sameEvent(a, b agent.Event) bool {
	_, ao := a.Time.Zone()
	_, bo := b.Time.Zone()
	if !a.Time.Equal(b.Time) || ao != bo {
		return false
	}
	a.Time, b.Time = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}
