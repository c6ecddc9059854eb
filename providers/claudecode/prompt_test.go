package claudecode

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// askDriver builds a driver as the manager would, with an AskFunc and a
// callback that serves prompts; it returns the driver and the PromptFunc
// it registered (nil: none).
func askDriver(t *testing.T, opts Options, ask seam.AskFunc) (*driver, seam.PromptFunc) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	opts.Command = exe
	j, _ := agent.NewJournal(nil)
	var served seam.PromptFunc
	cb := seam.Callback{URL: "http://127.0.0.1:9/mcp", Token: "tok", ServePrompts: func(f seam.PromptFunc) { served = f }}
	drv, err := New(opts).NewDriver(context.Background(), seam.DriverRequest{Header: seam.Header{ID: "agent-1", Cwd: t.TempDir()},
		Journal: j, Callback: cb, Ask: ask})
	if err != nil {
		t.Fatal(err)
	}
	return drv.(*driver), served
}

// Without Ask nothing changes: no prompt tool, the dontAsk mode, no
// prompt served. With it the CLI is told to ask through the callback's
// permission_prompt, in the default mode.
func TestAskNamesThePermissionPromptTool(t *testing.T) {
	never := func(context.Context, seam.AskRequest) seam.Question { t.Error("asked"); return seam.Question{} }
	d, served := askDriver(t, Options{}, never)
	a := d.args("s", false, "/tmp/cfg.json")
	if slices.Contains(a, "--permission-prompt-tool") || !slices.Contains(a, "--permission-mode=dontAsk") || served != nil {
		t.Errorf("without Ask: args %q, served %v", a, served != nil)
	}
	d, served = askDriver(t, Options{Ask: true}, never)
	a = d.args("s", false, "/tmp/cfg.json")
	i := slices.Index(a, "--permission-prompt-tool")
	if i < 0 || a[i+1] != "mcp__subagent__permission_prompt" || !slices.Contains(a, "--permission-mode=default") || served == nil {
		t.Errorf("with Ask: args %q, served %v", a, served != nil)
	}
	if a[len(a)-4] != "mcp__subagent__permission_prompt" { // the last --disallowedTools name, before --strict-mcp-config --mcp-config F
		t.Errorf("with Ask: the model is not kept from the prompt tool: %q", a)
	}
	if d.p.opts.QuestionTimeout != seam.DefaultQuestionTimeout {
		t.Errorf("default question timeout %v", d.p.opts.QuestionTimeout)
	}
	// No AskFunc (no store): the mode decides, nothing names the tool.
	d, served = askDriver(t, Options{Ask: true}, nil)
	if a := d.args("s", false, "/tmp/cfg.json"); slices.Contains(a, "--permission-prompt-tool") || served != nil {
		t.Errorf("Ask without an AskFunc: args %q", a)
	}
}

// The prompt answers in Claude Code's form: allow with the input as it
// came, or deny with why; each outcome is kept for the turn's journal.
func TestPromptMapsTheAnswer(t *testing.T) {
	args := json.RawMessage(`{"tool_name":"Write","input":{"file_path":"/w/x.txt","content":"hi"},"tool_use_id":"toolu_1"}`)
	for _, tc := range []struct {
		answer       seam.Answer
		want, note   string
		diagnosed    bool
		wantBehavior string
	}{
		{seam.Answer{Text: "allow", By: seam.ByPerson, Outcome: seam.OutcomeAccepted}, `"updatedInput":{"file_path":"/w/x.txt","content":"hi"}`, "permission allowed by the person (allow): Write", false, "allow"},
		{seam.Answer{Text: "deny", By: seam.ByPerson, Outcome: seam.OutcomeDeclined}, "The person declined", "permission declined by the person (deny): Write", true, "deny"},
		{seam.Answer{Text: "deny", By: seam.ByDeadline, Outcome: seam.OutcomeTimedOut}, "Nobody answered within 2m0s", "timed out, nobody answered question q-1 within 2m0s", true, "deny"},
		{seam.Answer{By: seam.ByInterrupt, Outcome: seam.OutcomeCancelled}, "stopped before anyone answered", "permission request cancelled (question q-1 withdrawn)", false, "deny"},
	} {
		var got seam.AskRequest
		ask := func(_ context.Context, r seam.AskRequest) seam.Question {
			got = r
			a := tc.answer
			return seam.Question{ID: "q-1", Answer: &a}
		}
		d, served := askDriver(t, Options{Ask: true, QuestionTimeout: 2 * time.Minute}, ask)
		end := d.prompts.begin(context.Background())
		out := served(context.Background(), args)
		asked := end()
		var dec struct{ Behavior string }
		if err := json.Unmarshal([]byte(out), &dec); err != nil || dec.Behavior != tc.wantBehavior || !strings.Contains(out, tc.want) {
			t.Errorf("%s by %s: answered %s", tc.answer.Outcome, tc.answer.By, out)
		}
		if got.Kind != seam.QuestionApproval || got.Fallback != "deny" || got.Timeout != 2*time.Minute || !strings.Contains(got.Message, `Claude Code asks to use Write {"file_path":"/w/x.txt"`) {
			t.Errorf("asked %+v", got)
		}
		if len(asked) != 1 || !strings.Contains(asked[0].note, tc.note) || (asked[0].diagnostic != "") != tc.diagnosed {
			t.Errorf("%s by %s: recorded %+v", tc.answer.Outcome, tc.answer.By, asked)
		}
	}
}

// A prompt outside a turn, or one the turn's end interrupts, is denied:
// the question ends with the turn.
func TestPromptEndsWithTheTurn(t *testing.T) {
	ask := func(ctx context.Context, r seam.AskRequest) seam.Question {
		<-ctx.Done()
		return seam.Question{ID: "q-1", Answer: &seam.Answer{By: seam.ByInterrupt, Outcome: seam.OutcomeCancelled}}
	}
	d, served := askDriver(t, Options{Ask: true}, ask)
	if out := served(context.Background(), json.RawMessage(`{"tool_name":"Bash","input":{}}`)); !strings.Contains(out, `"deny"`) {
		t.Errorf("outside a turn: %s", out)
	}
	turn, cancel := context.WithCancel(context.Background())
	end := d.prompts.begin(turn)
	done := make(chan string)
	go func() {
		done <- served(context.Background(), json.RawMessage(`{"tool_name":"Bash","input":{"command":"ls"}}`))
	}()
	cancel()
	if out := <-done; !strings.Contains(out, `"deny"`) {
		t.Errorf("interrupted: %s", out)
	}
	end()
}
