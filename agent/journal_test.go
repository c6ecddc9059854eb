package agent_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// ev builds journal events with consecutive sequence numbers.
func ev(events ...agent.Event) []agent.Event {
	for i := range events {
		events[i].Seq = int64(i)
	}
	return events
}

func start(turn int) agent.Event { return agent.Event{Kind: agent.EventTurnStart, Turn: turn} }
func end(turn int) agent.Event {
	return agent.Event{Kind: agent.EventTurnEnd, Turn: turn, StopReason: agent.StopCompleted}
}
func user(text string) agent.Event {
	return agent.Event{Kind: agent.EventMessage, Source: agent.SourceUser, Message: &seam.Message{Role: seam.RoleUser, Content: text}}
}
func assistant(text string, calls ...llm.ToolCall) agent.Event {
	m := &seam.Message{Role: seam.RoleAssistant, Content: text}
	for _, c := range calls {
		m.ToolCalls = append(m.ToolCalls, seam.ToolCall(c))
	}
	return agent.Event{Kind: agent.EventMessage, Message: m}
}
func unknown() agent.Event { return agent.Event{Kind: agent.EventUnknown} }
func toolMsg(id, text string) agent.Event {
	return agent.Event{Kind: agent.EventMessage, Message: &seam.Message{Role: seam.RoleTool, ToolCallID: id, Content: text}}
}

func TestValidate(t *testing.T) {
	gap := ev(start(1), user("hi"), end(1))
	gap[2].Seq = 3
	fromOne := ev(start(1), user("hi"), end(1))
	for i := range fromOne {
		fromOne[i].Seq++
	}
	tests := []struct {
		name    string
		events  []agent.Event
		wantErr string // substring; empty: valid
	}{
		{name: "an empty journal is valid", events: nil},
		{name: "completed turns with answered tool calls are valid",
			events: ev(start(1), user("hi"), assistant("", tc("c1", "echo", "{}"), tc("c2", "echo", "{}")),
				toolMsg("c2", "b"), toolMsg("c1", "a"), assistant("done"), end(1),
				start(2), user("again"), assistant("ok"), end(2))},
		{name: "the last turn may be open with calls in flight",
			events: ev(start(1), user("hi"), end(1), start(2), user("go"), assistant("", tc("c1", "slow", "{}")))},
		{name: "the same call id may be reused in a later turn",
			events: ev(start(1), assistant("", tc("call_0", "a", "")), toolMsg("call_0", "x"), end(1),
				start(2), assistant("", tc("call_0", "a", "")), toolMsg("call_0", "y"), end(2))},
		{name: "a gap in sequence numbers is refused", events: gap, wantErr: "event 2 has sequence 3"},
		{name: "sequence numbers must start at 0", events: fromOne, wantErr: "event 0 has sequence 1"},
		{name: "a turn inside a turn is refused", events: ev(start(1), user("hi"), start(2), end(2), end(1)),
			wantErr: "starts a turn inside a turn"},
		{name: "ending a turn that was not started is refused", events: ev(start(1), end(1), end(1)),
			wantErr: "ends a turn that was not started"},
		{name: "a message before any turn is refused", events: ev(user("hi"), start(1), end(1)),
			wantErr: "event 0 is a message outside a turn"},
		{name: "a message between turns is refused", events: ev(start(1), end(1), assistant("stray"), start(2), end(2)),
			wantErr: "event 2 is a message outside a turn"},
		{name: "a message event without a message is refused", events: ev(start(1), agent.Event{Kind: agent.EventMessage}, end(1)),
			wantErr: "without content"},
		{name: "a turn ending with an unanswered tool call is refused",
			events:  ev(start(1), assistant("", tc("c1", "a", ""), tc("c2", "b", "")), toolMsg("c1", "x"), end(1)),
			wantErr: "event 3 ends a turn with unanswered tool calls"},
		{name: "an answer to an unknown tool call id is refused",
			events:  ev(start(1), assistant("", tc("c1", "a", "")), toolMsg("c9", "x"), end(1)),
			wantErr: `answers unknown tool call "c9"`},
		{name: "a second answer to the same call is refused",
			events:  ev(start(1), assistant("", tc("c1", "a", "")), toolMsg("c1", "x"), toolMsg("c1", "y"), end(1)),
			wantErr: `event 3 answers unknown tool call "c1"`},
		{name: "an answer from an earlier turn's call is refused",
			events:  ev(start(1), assistant("", tc("c1", "a", "")), toolMsg("c1", "x"), end(1), start(2), toolMsg("c1", "again"), end(2)),
			wantErr: `answers unknown tool call "c1"`},
		{name: "an unknown kind is refused", events: ev(start(1), agent.Event{Kind: "turn/pause"}, end(1)),
			wantErr: `unknown kind "turn/pause"`},
		{name: "the sentinel of an unreadable record is valid inside and between turns",
			events: ev(unknown(), start(1), unknown(), assistant("", tc("c1", "a", "")), unknown(), toolMsg("c1", "x"), end(1), unknown())},
		{name: "the sentinel does not open a turn", events: ev(unknown(), user("hi")),
			wantErr: "event 1 is a message outside a turn"},
		{name: "the sentinel does not answer a call", events: ev(start(1), assistant("", tc("c1", "a", "")), unknown(), end(1)),
			wantErr: "unanswered tool calls"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := agent.Validate(tt.events)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				if _, err := agent.NewJournal(tt.events); err != nil {
					t.Errorf("NewJournal refused a valid seed: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.wantErr)
			}
			if _, err := agent.NewJournal(tt.events); err == nil {
				t.Error("NewJournal accepted an invalid seed")
			}
		})
	}
}

func TestAppendNumbersEventsFromZeroWithoutGaps(t *testing.T) {
	j, err := agent.NewJournal(ev(start(1), user("hi"), end(1)))
	if err != nil {
		t.Fatal(err)
	}
	var heard []int64
	cancel := j.Subscribe(func(e agent.Event) { heard = append(heard, e.Seq) })
	stamp := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	got := j.Append(agent.Event{Seq: 99, Kind: agent.EventTurnStart, Turn: 2, Time: stamp})
	if got.Seq != 3 || !got.Time.Equal(stamp) {
		t.Errorf("Append returned seq %d time %v, want 3 and the given time", got.Seq, got.Time)
	}
	before := time.Now()
	if e := j.Append(user("more")); e.Seq != 4 || e.Time.Before(before.Add(-time.Second)) {
		t.Errorf("Append returned seq %d time %v, want 4 and now", e.Seq, e.Time)
	}
	cancel()
	j.Append(end(2))
	if len(heard) != 2 || heard[0] != 3 || heard[1] != 4 {
		t.Errorf("listener heard %v, want [3 4] and nothing after cancel", heard)
	}
	if j.Len() != 6 {
		t.Errorf("Len = %d, want 6", j.Len())
	}
	if err := agent.Validate(j.Events()); err != nil {
		t.Errorf("Validate: %v", err)
	}
	// Events returns a copy.
	evs := j.Events()
	evs[0].Kind = "tampered"
	if j.Events()[0].Kind != agent.EventTurnStart {
		t.Error("Events shares its slice with the journal")
	}
}

func TestMessagesRebuildsTheConversation(t *testing.T) {
	evs := ev(start(1), user("q"), assistant("", tc("c1", "a", "{}")), toolMsg("c1", "r"), assistant("answer"), end(1))
	msgs := agent.Messages(evs)
	var roles []string
	for _, m := range msgs {
		roles = append(roles, string(m.Role))
	}
	if got := strings.Join(roles, ","); got != "user,assistant,tool,assistant" {
		t.Errorf("roles = %s", got)
	}
	if msgs[1].ToolCalls[0].ID != "c1" || msgs[2].ToolCallID != "c1" || msgs[3].Content != "answer" {
		t.Errorf("messages = %+v", msgs)
	}
}

func TestCompletedPrefix(t *testing.T) {
	t.Run("a journal without a finished turn has an empty prefix", func(t *testing.T) {
		j, _ := agent.NewJournal(ev(start(1), user("hi")))
		if p := j.CompletedPrefix(); len(p) != 0 {
			t.Errorf("prefix = %s", dump(p))
		}
		if _, err := agent.NewJournal(j.CompletedPrefix()); err != nil {
			t.Errorf("NewJournal(empty prefix): %v", err)
		}
	})
	t.Run("a finished journal is its own prefix", func(t *testing.T) {
		all := ev(start(1), user("hi"), assistant("yo"), end(1))
		j, _ := agent.NewJournal(all)
		if p := j.CompletedPrefix(); len(p) != len(all) {
			t.Errorf("prefix has %d events, want %d", len(p), len(all))
		}
	})

	// The real case: a fork copies its parent's journal while the parent's
	// turn is in flight, with a tool call (the fork itself) unanswered.
	inTool := make(chan struct{})
	release := make(chan struct{})
	forkTool := funcTool{name: "fork", fn: func(context.Context, json.RawMessage) (string, error) {
		close(inTool)
		<-release
		return "child result", nil
	}}
	client := script(say("first done"), call("delegating", tc("c1", "fork", `{}`)), say("second done"))
	parent := newAgent(t, agent.Config{Client: client, Tools: []agent.Tool{forkTool}})
	if res := parent.RunTurn(context.Background(), "first", ""); res.StopReason != agent.StopCompleted {
		t.Fatal(res)
	}
	turnDone := make(chan agent.TurnResult)
	go func() { turnDone <- parent.RunTurn(context.Background(), "second", "") }()
	<-inTool

	all := parent.Journal().Events()
	if err := agent.Validate(all); err != nil {
		t.Fatalf("a journal with a turn in flight is invalid: %v", err)
	}
	prefix := parent.Journal().CompletedPrefix()
	if len(prefix) != 4 || prefix[len(prefix)-1].Kind != agent.EventTurnEnd || len(all) <= len(prefix) {
		t.Fatalf("prefix = %s\nwant the first turn only (4 events) of %d", dump(prefix), len(all))
	}
	for _, e := range prefix {
		if e.Turn != 1 {
			t.Errorf("prefix holds an event of turn %d", e.Turn)
		}
	}
	if err := agent.Validate(prefix); err != nil {
		t.Errorf("Validate(prefix): %v", err)
	}
	seeded, err := agent.NewJournal(prefix)
	if err != nil {
		t.Fatalf("NewJournal(prefix): %v", err)
	}
	// A fork seeded with the prefix replays it to its model and goes on.
	forkClient := script(say("fork answer"))
	fork := newAgent(t, agent.Config{Client: forkClient, Journal: seeded})
	if res := fork.RunTurn(context.Background(), "forked task", ""); res.StopReason != agent.StopCompleted {
		t.Errorf("fork turn = %+v", res)
	}
	checkJournal(t, fork.Journal())
	var contents []string
	for _, m := range forkClient.requests()[0].Messages {
		contents = append(contents, m.Content)
	}
	if got := strings.Join(contents, "|"); got != "first|first done|forked task" {
		t.Errorf("the fork's model saw %s", got)
	}
	// The prefix is a copy: the parent's later events do not reach it.
	close(release)
	<-turnDone
	if len(prefix) != 4 || seeded.Len() != 8 {
		t.Errorf("prefix len %d, seeded journal len %d after the parent went on", len(prefix), seeded.Len())
	}
	checkJournal(t, parent.Journal())
}

func TestToolResultAnswersTheCall(t *testing.T) {
	got := agent.ToolResult("call_7", "not run")
	if want := (&seam.Message{Role: seam.RoleTool, ToolCallID: "call_7", Content: "not run"}); !reflect.DeepEqual(got, want) {
		t.Fatalf("ToolResult = %+v, want %+v", got, want)
	}
	if err := agent.Validate(ev(start(1), assistant("", tc("call_7", "a", "")), agent.Event{Kind: agent.EventMessage, Message: got}, end(1))); err != nil {
		t.Fatalf("a ToolResult does not answer its call: %v", err)
	}
}

func TestCloseOpenTurn(t *testing.T) {
	const why = "the server stopped while this turn ran"
	aborted := func(turn int) agent.Event {
		return agent.Event{Kind: agent.EventTurnEnd, Turn: turn, StopReason: agent.StopAborted, Diagnostic: why}
	}
	notRun := func(turn int, id string) agent.Event {
		e := toolMsg(id, "not run: "+why)
		e.Turn = turn
		return e
	}
	tests := []struct {
		name    string
		events  []agent.Event
		closing []agent.Event // without Seq and Time; nil: nothing to close
	}{
		{name: "an empty journal has nothing to close"},
		{name: "a journal of ended turns has nothing to close",
			events: ev(start(1), user("hi"), assistant("", tc("c1", "a", "")), toolMsg("c1", "x"), end(1))},
		{name: "an open turn without calls ends aborted",
			events:  ev(start(1), user("hi"), end(1), start(2), user("more"), assistant("half")),
			closing: []agent.Event{aborted(2)}},
		{name: "an open turn's unanswered calls are answered in call order before it ends",
			events: ev(start(3), user("go"), assistant("", tc("c1", "a", ""), tc("c2", "b", ""), tc("c3", "c", "")), toolMsg("c2", "done"),
				unknown()),
			closing: []agent.Event{notRun(3, "c1"), notRun(3, "c3"), aborted(3)}},
		{name: "calls of an earlier, ended turn are not answered again",
			events: ev(start(1), assistant("", tc("c1", "a", "")), toolMsg("c1", "x"), end(1),
				start(2), assistant("", tc("c2", "a", ""))),
			closing: []agent.Event{notRun(2, "c2"), aborted(2)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := time.Now().UTC().Add(-time.Second)
			all, closing := agent.CloseOpenTurn(append([]agent.Event(nil), tt.events...))
			if len(all) != len(tt.events)+len(closing) || !reflect.DeepEqual(all[:len(tt.events)], tt.events) {
				t.Fatalf("all does not begin with the events: %s", dump(all))
			}
			if len(closing) > 0 && !reflect.DeepEqual(all[len(tt.events):], closing) {
				t.Fatalf("all does not end with closing: %s", dump(all))
			}
			if tt.closing == nil {
				if closing != nil {
					t.Fatalf("closed a journal with no open turn: %s", dump(closing))
				}
				return
			}
			if len(closing) != len(tt.closing) {
				t.Fatalf("closing = %s, want %d events", dump(closing), len(tt.closing))
			}
			for i, e := range closing {
				if e.Seq != int64(len(tt.events)+i) {
					t.Errorf("closing event %d has seq %d, want %d", i, e.Seq, len(tt.events)+i)
				}
				if e.Time.Before(before) || e.Time.Location() != time.UTC {
					t.Errorf("closing event %d has time %v, want now in UTC", i, e.Time)
				}
				e.Seq, e.Time = 0, time.Time{}
				if !reflect.DeepEqual(e, tt.closing[i]) {
					t.Errorf("closing event %d = %+v, want %+v", i, e, tt.closing[i])
				}
			}
			if err := agent.Validate(all); err != nil {
				t.Errorf("the closed journal is invalid: %v", err)
			}
			if all[len(all)-1].Kind != agent.EventTurnEnd {
				t.Errorf("the closed journal ends with %s", all[len(all)-1].Kind)
			}
		})
	}
}

func TestLastOutcome(t *testing.T) {
	ended := func(turn int, stop agent.StopReason, diag string) agent.Event {
		return agent.Event{Kind: agent.EventTurnEnd, Turn: turn, StopReason: stop, Diagnostic: diag}
	}
	refusal := agent.Event{Kind: agent.EventMessage, Message: &seam.Message{Role: seam.RoleAssistant, Refusal: "no"}}
	tests := []struct {
		name   string
		events []agent.Event
		want   agent.TurnResult
	}{
		{name: "an empty journal has no outcome"},
		{name: "no turn ended: no stop reason, and the open turn's output",
			events: ev(start(1), user("hi"), assistant("working")), want: agent.TurnResult{Output: "working"}},
		{name: "the last non-empty assistant message of the last turn is the output",
			events: ev(start(1), user("q"), assistant("first"), assistant("", tc("c1", "a", "")), toolMsg("c1", "r"),
				assistant("second"), assistant(""), unknown(), end(1)),
			want: agent.TurnResult{Output: "second", StopReason: agent.StopCompleted}},
		{name: "an earlier turn's output does not carry over",
			events: ev(start(1), assistant("old"), end(1), start(2), user("q"), refusal, ended(2, agent.StopRefusal, "declined")),
			want:   agent.TurnResult{StopReason: agent.StopRefusal, Diagnostic: "declined"}},
		{name: "a turn that started after the last end resets the output but not the stop",
			events: ev(start(1), assistant("old"), ended(1, agent.StopError, "boom"), start(2), user("q")),
			want:   agent.TurnResult{StopReason: agent.StopError, Diagnostic: "boom"}},
		{name: "user and tool messages are not output",
			events: ev(start(1), user("q"), assistant("", tc("c1", "a", "")), toolMsg("c1", "r"), ended(1, agent.StopMaxTokens, "cut")),
			want:   agent.TurnResult{StopReason: agent.StopMaxTokens, Diagnostic: "cut"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := agent.LastOutcome(tt.events); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("LastOutcome = %+v, want %+v", got, tt.want)
			}
		})
	}
}
