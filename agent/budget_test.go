package agent_test

import (
	"context"
	"errors"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/llm"
)

// The budget hook is asked before every model call and every tool round:
// once it refuses, the turn ends with StopBudget and its diagnostic, no
// further request is made and no tool runs, and the journal stays
// balanced.
func TestTheBudgetHookStopsTheTurnBeforeAnyFurtherWork(t *testing.T) {
	loop := call("working", llm.ToolCall{ID: "c", Name: "echo", Arguments: `{}`})
	for _, tc := range []struct {
		name     string
		refuse   func(calls, rounds int, call bool) bool
		requests int
		ran      int
	}{
		{"before the third model call", func(calls, _ int, call bool) bool { return call && calls == 2 }, 2, 2},
		{"before the second tool round", func(_, rounds int, call bool) bool { return !call && rounds == 1 }, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := script(loop, loop, loop, loop)
			ran := 0
			calls, rounds := 0, 0
			a, err := agent.New(agent.Config{Client: client,
				Tools: []agent.Tool{constTool("echo", "ok")},
				Budget: func(call bool) error {
					if tc.refuse(calls, rounds, call) {
						return errors.New("budget exhausted: steps 2 of 2")
					}
					if call {
						calls++
					} else {
						rounds++
						ran++
					}
					return nil
				}})
			if err != nil {
				t.Fatal(err)
			}
			res := a.RunTurn(context.Background(), "go", "")
			if res.StopReason != agent.StopBudget || res.Diagnostic != "budget exhausted: steps 2 of 2" || res.Output != "working" {
				t.Errorf("result = %+v; want budget with the hook's diagnostic and the partial output", res)
			}
			if n := len(client.requests()); n != tc.requests {
				t.Errorf("%d model requests; want %d", n, tc.requests)
			}
			if ran != tc.ran {
				t.Errorf("%d tool rounds ran; want %d", ran, tc.ran)
			}
			if err := agent.Validate(a.Journal().Events()); err != nil {
				t.Errorf("the journal is unbalanced: %v", err)
			}
		})
	}
}
