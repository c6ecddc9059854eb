package manager_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/internal/managertest"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/llm/openai"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/manager/budget"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/providers/spawn"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// listForever is a fake model that answers every request with a tool call
// (10 input and 5 output tokens each): a child that never stops on its own.
func listForever(n int, _ fakeopenai.Request) fakeopenai.Reply {
	return fakeopenai.Reply{Text: "still looking", ToolCalls: []fakeopenai.ToolCall{{Name: "list_dir", Arguments: `{"path":"."}`}}}
}

// budgetManager is a manager with a store and spawn over client.
func budgetManager(t *testing.T, client llm.Client, opts manager.Options, tools func(m *manager.Manager) func(seam.ParentRef) []agent.Tool) *manager.Manager {
	t.Helper()
	opts.Store = memstore.New()
	m := manager.New(opts)
	so := spawn.Options{Client: client, Model: "m"}
	if tools != nil {
		so.DelegationTools = tools(m)
	}
	if err := m.Register(spawn.New(so)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	})
	return m
}

func openAI(fake *fakeopenai.Server) llm.Client {
	return openai.New(transport.Config{BaseURL: fake.URL(), APIKey: "k", RetryBaseDelay: time.Millisecond})
}

// A child whose model keeps calling tools stops at each kind of limit:
// stop reason budget, a diagnostic naming the limit and the usage, its
// partial output kept, and not one model request past the limit (counted
// at the fake server).
func TestABudgetStopsAChildThatNeverStops(t *testing.T) {
	cases := []struct {
		name     string
		budget   seam.Budget
		price    *llm.Price
		hold     bool // the model holds its second answer until cancelled
		requests int
		diag     string
		bg       bool // a background child: its settlement notice says so
	}{
		// 15 tokens a call: the third call passes 40.
		{name: "tokens", budget: seam.Budget{Tokens: 40}, requests: 3,
			diag: "budget exhausted: tokens 45 of 40 (steps 3, "},
		{name: "steps", budget: seam.Budget{Steps: 5}, requests: 5,
			diag: "budget exhausted: steps 5 of 5 (tokens 75, ", bg: true},
		// $0.02 a call: the third passes $0.05.
		{name: "cost_usd", budget: seam.Budget{CostUSD: 0.05}, price: &llm.Price{InputPerMTok: 1000, OutputPerMTok: 2000}, requests: 3,
			diag: "budget exhausted: cost_usd 0.0600 of 0.05 (tokens 45, steps 3, "},
		{name: "seconds", budget: seam.Budget{Seconds: 0.3}, hold: true, requests: 2,
			diag: "budget exhausted: seconds 0.3 of 0.3 (tokens 15, steps 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
				r := listForever(n, req)
				if tc.hold && n > 0 {
					r.Delay = time.Minute // cancelled by the budget long before
				}
				return r
			})
			defer fake.Close()
			var client llm.Client = openAI(fake)
			if tc.price != nil {
				client = llm.Priced{Client: client, Price: *tc.price}
			}
			m := budgetManager(t, client, manager.Options{}, nil)
			root := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
			b := tc.budget
			req := seam.StartRequest{Label: "loop", Prompt: "look around", Parent: root, Budget: &b}
			ctx := context.Background()
			var res seam.Result
			if tc.bg {
				st, err := m.StartContinuable(ctx, "spawn", req, false)
				if err != nil {
					t.Fatal(err)
				}
				wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				notes := m.WaitNotices(wctx, "p", "")
				if len(notes) != 1 || notes[0].StopReason != agent.StopBudget || notes[0].ChildID != st.ChildID {
					t.Fatalf("notices = %+v; want one budget notice for %s", notes, st.ChildID)
				}
				for _, w := range []string{"ran out of its budget", tc.diag, "Its closing message:\nstill looking"} {
					if !strings.Contains(notes[0].Text, w) {
						t.Errorf("notice %q lacks %q", notes[0].Text, w)
					}
				}
			} else {
				var err error
				_, res, err = managertest.RunOnce(ctx, m, "spawn", req)
				if err != nil {
					t.Fatal(err)
				}
				if res.StopReason != agent.StopBudget {
					t.Fatalf("stop = %s (%s); want budget", res.StopReason, res.Diagnostic)
				}
				if !strings.HasPrefix(res.Diagnostic, tc.diag) {
					t.Errorf("diagnostic = %q; want it to start %q", res.Diagnostic, tc.diag)
				}
				if res.Output != "still looking" {
					t.Errorf("output = %q; want the partial output", res.Output)
				}
			}
			if got := len(fake.Requests()); got != tc.requests {
				t.Errorf("the model got %d requests; want %d, none past the limit", got, tc.requests)
			}
		})
	}
}

// Bad budget values are refused before anything starts, naming the field.
func TestABadBudgetIsRefusedNamingTheField(t *testing.T) {
	fake := fakeopenai.New(listForever)
	defer fake.Close()
	m := budgetManager(t, openAI(fake), manager.Options{}, nil)
	root := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
	for field, b := range map[string]seam.Budget{
		"budget.tokens": {Tokens: -1}, "budget.steps": {Steps: -2},
		"budget.seconds": {Seconds: math.Inf(1)}, "budget.cost_usd": {CostUSD: math.NaN()},
	} {
		_, _, err := managertest.RunOnce(context.Background(), m, "spawn", seam.StartRequest{Label: "x", Prompt: "x", Parent: root, Budget: &b})
		var e *seam.Error
		if !errors.As(err, &e) || e.Code != seam.CodeInvalidRequest || !strings.Contains(e.Message, `field "`+field+`"`) {
			t.Errorf("%s: err = %v; want INVALID_REQUEST naming it", field, err)
		}
	}
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("%d model requests; want none", n)
	}
}

// The deployment's default applies to a start that gives no budget, and
// its max caps one that asks for more (or for no limit).
func TestTheDeploymentDefaultAndMaxApply(t *testing.T) {
	fake := fakeopenai.New(listForever)
	defer fake.Close()
	m := budgetManager(t, openAI(fake), manager.Options{Budget: budget.Limits{
		Default: seam.Budget{Steps: 2}, Max: seam.Budget{Steps: 3}}}, nil)
	root := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
	for _, tc := range []struct {
		asked *seam.Budget
		steps int
	}{{nil, 2}, {&seam.Budget{Steps: 10}, 3}, {&seam.Budget{Tokens: 1000}, 3}} {
		before := len(fake.Requests())
		_, res, err := managertest.RunOnce(context.Background(), m, "spawn", seam.StartRequest{Label: "x", Prompt: "x", Parent: root, Budget: tc.asked})
		if err != nil || res.StopReason != agent.StopBudget {
			t.Fatalf("asked %+v: %+v, %v; want budget", tc.asked, res, err)
		}
		if got := len(fake.Requests()) - before; got != tc.steps {
			t.Errorf("asked %+v: %d model calls; want %d", tc.asked, got, tc.steps)
		}
	}
}

// delegate is a child's tool that runs a one-shot spawn child for it with
// the prompt it is given, as the subagent tool would.
type delegate struct {
	m    *manager.Manager
	self seam.ParentRef
}

func (d delegate) Def() llm.ToolDef {
	return llm.ToolDef{Name: "delegate", Description: "run a child", Parameters: json.RawMessage(`{"type":"object","properties":{"prompt":{"type":"string"}}}`)}
}

func (d delegate) Call(ctx context.Context, args json.RawMessage) (string, error) {
	var in struct{ Prompt string }
	_ = json.Unmarshal(args, &in)
	_, res, err := managertest.RunOnce(ctx, d.m, "spawn", seam.StartRequest{Label: in.Prompt, Prompt: in.Prompt, Parent: d.self})
	if err != nil {
		return "", err
	}
	return string(res.StopReason) + ": " + res.Diagnostic, nil
}

// A grandchild cannot outspend its grandparent: the grandparent's 100
// tokens bound the whole tree, each model call's usage is charged up the
// chain, the grandchild stops at what its grandparent has left, and the
// parent and the grandparent stop too, without another request.
func TestAGrandchildCannotOutspendItsGrandparent(t *testing.T) {
	var gCalls atomic.Int32
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		switch first(req) {
		case "grandparent":
			return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "delegate", Arguments: `{"prompt":"parent"}`}}}
		case "parent":
			return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "delegate", Arguments: `{"prompt":"grandchild"}`}}}
		}
		gCalls.Add(1)
		return listForever(n, req)
	})
	defer fake.Close()
	m := budgetManager(t, openAI(fake), manager.Options{}, func(m *manager.Manager) func(seam.ParentRef) []agent.Tool {
		return func(self seam.ParentRef) []agent.Tool { return []agent.Tool{delegate{m, self}} }
	})
	root := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := m.StartContinuable(ctx, "spawn", seam.StartRequest{Label: "gp", Prompt: "grandparent", Parent: root,
		Budget: &seam.Budget{Tokens: 100}}, true)
	if err != nil {
		t.Fatal(err)
	}
	res, ok := st.Wait(ctx)
	if !ok {
		t.Fatal("the grandparent's turn never ended")
	}
	// The grandparent (15) and the parent (15) leave the grandchild 70: it
	// stops after its fifth call (75), the tree at 105.
	if got := gCalls.Load(); got != 5 {
		t.Errorf("the grandchild made %d model calls; want 5 (what its grandparent had left)", got)
	}
	if n := len(fake.Requests()); n != 7 {
		t.Errorf("the tree made %d model calls; want 7", n)
	}
	if res.StopReason != agent.StopBudget || !strings.HasPrefix(res.Diagnostic, "budget exhausted: tokens 105 of 100") {
		t.Errorf("the grandparent ended %s (%s); want budget at tokens 105 of 100", res.StopReason, res.Diagnostic)
	}
}

func first(req fakeopenai.Request) string {
	for _, msg := range req.Messages {
		if msg.Role == "user" {
			return msg.Content
		}
	}
	return ""
}

// A follow-up may grant a new budget; without one the child keeps what it
// has left (here: nothing, so its turn ends at once without a request).
func TestAFollowupGrantsANewBudget(t *testing.T) {
	fake := fakeopenai.New(listForever)
	defer fake.Close()
	m := budgetManager(t, openAI(fake), manager.Options{}, nil)
	root := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := m.StartContinuable(ctx, "spawn", seam.StartRequest{Label: "l", Prompt: "go", Parent: root,
		Budget: &seam.Budget{Steps: 2}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if res, ok := st.Wait(ctx); !ok || res.StopReason != agent.StopBudget {
		t.Fatalf("first turn = %+v, %v; want budget", res, ok)
	}
	turn := func(b *seam.Budget) (seam.Result, int) {
		t.Helper()
		before := len(fake.Requests())
		sent, err := m.FollowupBudget(ctx, root, st.ChildID, "more", true, b)
		if err != nil {
			t.Fatal(err)
		}
		res, ok := sent.Wait(ctx)
		if !ok {
			t.Fatal("the turn never ended")
		}
		return res, len(fake.Requests()) - before
	}
	if res, n := turn(nil); res.StopReason != agent.StopBudget || n != 0 || !strings.HasPrefix(res.Diagnostic, "budget exhausted: steps 2 of 2") {
		t.Errorf("without a grant: %s (%s) after %d requests; want budget at once", res.StopReason, res.Diagnostic, n)
	}
	if res, n := turn(&seam.Budget{Steps: 3}); res.StopReason != agent.StopBudget || n != 3 || !strings.HasPrefix(res.Diagnostic, "budget exhausted: steps 3 of 3") {
		t.Errorf("with a grant of 3 steps: %s (%s) after %d requests; want budget after 3", res.StopReason, res.Diagnostic, n)
	}
}
