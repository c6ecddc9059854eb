package agent_test

import (
	"encoding/json"
	"testing"

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
