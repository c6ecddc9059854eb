package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// fakeManager fakes the manager uses a test is about: set the funcs the
// handler under test calls. The embedded Manager is nil, so a call the test
// did not expect panics and fails it.
type fakeManager struct {
	Manager
	followup  func(caller seam.ParentRef, childID, content string, wait bool) (*manager.Sent, error)
	start     func(req seam.StartRequest, wait bool) (*manager.Started, error)
	treeUsage func(agentID string) (seam.Usage, error)
	interrupt func(caller seam.ParentRef, childID string) error
	list      func(caller seam.ParentRef, q manager.ListQuery) (manager.ListPage, error)
	budgets   []*seam.Budget // what each send_message granted
}

func (f *fakeManager) Providers() []manager.ProviderInfo {
	return []manager.ProviderInfo{{Name: "fake", Continuable: true,
		Capabilities: seam.Capabilities{OutputSchema: true, DepthLimit: true, ToolFilter: true, Persona: true}}}
}
func (f *fakeManager) MaxDepth() int    { return 3 }
func (f *fakeManager) Persistent() bool { return true }
func (f *fakeManager) FollowupBudget(_ context.Context, caller seam.ParentRef, childID, content string, wait bool, b *seam.Budget) (*manager.Sent, error) {
	f.budgets = append(f.budgets, b)
	return f.followup(caller, childID, content, wait)
}
func (f *fakeManager) Answer(context.Context, seam.ParentRef, string, string, string) (*seam.Question, error) {
	return nil, nil
}
func (f *fakeManager) StartContinuable(_ context.Context, _ string, req seam.StartRequest, wait bool) (*manager.Started, error) {
	return f.start(req, wait)
}
func (f *fakeManager) TreeUsage(agentID string) (seam.Usage, error) { return f.treeUsage(agentID) }
func (f *fakeManager) Interrupt(caller seam.ParentRef, childID string) error {
	return f.interrupt(caller, childID)
}
func (f *fakeManager) List(caller seam.ParentRef, q manager.ListQuery) (manager.ListPage, error) {
	return f.list(caller, q)
}

// fakeTurn is a turn whose outcome the test decides. With block set, Wait
// waits for ctx and reports no outcome.
type fakeTurn struct {
	res       seam.Result
	ok, block bool
	committed error
}

func (t fakeTurn) Wait(ctx context.Context) (seam.Result, bool) {
	if t.block {
		<-ctx.Done()
		return seam.Result{}, false
	}
	return t.res, t.ok
}
func (t fakeTurn) Committed() error { return t.committed }

func fakeServer(t *testing.T, f *fakeManager) *Server {
	t.Helper()
	s, err := New(f, Options{Roots: []string{t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func structured(t *testing.T, r *mcp.CallToolResult) map[string]any {
	t.Helper()
	b, err := json.Marshal(r.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSendMessageWordsTheTurnItWaitedFor(t *testing.T) {
	for _, tc := range []struct {
		name     string
		wait     float64
		turn     fakeTurn
		isError  bool
		text     string // a substring the model must read
		outcome  bool
		stopWant string
	}{
		{name: "no wait", turn: fakeTurn{}, text: "message msg-1 queued as the next turn for subagent agent-1 (woken)."},
		{name: "completed", wait: 5, turn: fakeTurn{ok: true, res: seam.Result{Output: "all done", StopReason: agent.StopCompleted,
			Usage: seam.Usage{InputTokens: 3, OutputTokens: 2}}}, text: "all done", outcome: true, stopWant: "completed"},
		{name: "refused", wait: 5, turn: fakeTurn{ok: true, res: seam.Result{Output: "no", StopReason: agent.StopRefusal, Diagnostic: "policy"}},
			isError: true, text: "declined the task", outcome: true, stopWant: "refusal"},
		{name: "still running", wait: 0.05, turn: fakeTurn{block: true}, text: "still running after 0.05s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var gotWait bool
			s := fakeServer(t, &fakeManager{followup: func(caller seam.ParentRef, childID, content string, wait bool) (*manager.Sent, error) {
				if childID != "agent-1" || content != "more" || caller.Principal != "local" {
					t.Errorf("Followup(%+v, %q, %q)", caller, childID, content)
				}
				gotWait = wait
				return &manager.Sent{MessageID: "msg-1", Route: manager.RouteWoken, ChildID: childID, Turn: tc.turn}, nil
			}})
			args := map[string]any{"subagent_id": "agent-1", "message": "more"}
			if tc.wait > 0 {
				args["wait_seconds"] = tc.wait
			}
			r := s.tool("send_message").handle(context.Background(), rootCall(s, args))
			if r.IsError != tc.isError || !strings.Contains(ResultText(r), tc.text) {
				t.Fatalf("result (error %v) %q, want error %v containing %q", r.IsError, ResultText(r), tc.isError, tc.text)
			}
			if gotWait != (tc.wait > 0) {
				t.Errorf("Followup asked to wait = %v, want %v", gotWait, tc.wait > 0)
			}
			m := structured(t, r)
			if m["message_id"] != "msg-1" || m["route"] != "woken" || m["agent_id"] != "agent-1" {
				t.Errorf("structuredContent = %v", m)
			}
			o, has := m["outcome"].(map[string]any)
			if has != tc.outcome || (has && o["stop_reason"] != tc.stopWant) {
				t.Errorf("outcome = %v, want present %v with stop %q", m["outcome"], tc.outcome, tc.stopWant)
			}
		})
	}
}

func TestAForegroundChildReportsItsTreeUsage(t *testing.T) {
	s := fakeServer(t, &fakeManager{
		start: func(req seam.StartRequest, wait bool) (*manager.Started, error) {
			if !wait || req.Prompt != "go" {
				t.Errorf("StartContinuable(prompt %q, wait %v)", req.Prompt, wait)
			}
			return &manager.Started{ChildID: "agent-7", MessageID: "msg-1", Turn: fakeTurn{ok: true,
				res: seam.Result{Output: "ok", StopReason: agent.StopCompleted, Usage: seam.Usage{InputTokens: 10, OutputTokens: 5}}}}, nil
		},
		treeUsage: func(id string) (seam.Usage, error) {
			if id != "agent-7" {
				t.Errorf("TreeUsage(%q)", id)
			}
			return seam.Usage{InputTokens: 100, OutputTokens: 50, CostUSD: 0.25}, nil
		},
	})
	r := s.tool("subagent").handle(context.Background(), rootCall(s, map[string]any{"prompt": "go", "description": "d"}))
	if r.IsError || ResultText(r) != "ok" {
		t.Fatalf("result %q (error %v)", ResultText(r), r.IsError)
	}
	fg := r.StructuredContent.(Foreground)
	if fg.TreeUsage == nil || *fg.TreeUsage != (seam.Usage{InputTokens: 110, OutputTokens: 55, CostUSD: 0.25}) {
		t.Errorf("tree_usage = %+v, want the child's own plus its descendants'", fg.TreeUsage)
	}
	if fg.Usage != (seam.Usage{InputTokens: 10, OutputTokens: 5}) {
		t.Errorf("usage = %+v, want the child's own", fg.Usage)
	}
}

func TestAForegroundChildWhoseWritesFailedIsAnError(t *testing.T) {
	lost := &seam.Error{Code: seam.CodePersistenceUnavailable, Message: "the session store failed"}
	for _, turn := range []fakeTurn{
		{ok: true, res: seam.Result{Output: "ok", StopReason: agent.StopCompleted}, committed: lost},
		{block: true, committed: lost}, // the wait ended with no outcome
	} {
		s := fakeServer(t, &fakeManager{start: func(seam.StartRequest, bool) (*manager.Started, error) {
			return &manager.Started{ChildID: "agent-7", MessageID: "msg-1", Turn: turn}, nil
		}, treeUsage: func(string) (seam.Usage, error) { return seam.Usage{}, nil }})
		r := s.tool("subagent").handle(context.Background(), rootCall(s, map[string]any{"prompt": "go", "description": "d", "wait_seconds": 0.05}))
		if !r.IsError || !strings.Contains(ResultText(r), "PERSISTENCE_UNAVAILABLE") {
			t.Errorf("result %q (error %v), want PERSISTENCE_UNAVAILABLE, not a result or handle the store does not hold", ResultText(r), r.IsError)
		}
	}
}

func TestACancelledForegroundCallInterruptsItsChild(t *testing.T) {
	interrupted := make(chan string, 1)
	s := fakeServer(t, &fakeManager{
		start: func(seam.StartRequest, bool) (*manager.Started, error) {
			return &manager.Started{ChildID: "agent-9", MessageID: "msg-1", Turn: fakeTurn{block: true}}, nil
		},
		interrupt: func(caller seam.ParentRef, id string) error {
			interrupted <- id
			return nil
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := s.tool("subagent").handle(ctx, rootCall(s, map[string]any{"prompt": "go", "description": "d"}))
	if got := <-interrupted; got != "agent-9" {
		t.Errorf("interrupted %q, want agent-9", got)
	}
	if !r.IsError || r.StructuredContent.(Foreground).StopReason != agent.StopAborted {
		t.Errorf("result %q, want an aborted error result", ResultText(r))
	}
}

func TestListAgentsWordsEveryRow(t *testing.T) {
	usage := &seam.Usage{InputTokens: 12, OutputTokens: 4}
	s := fakeServer(t, &fakeManager{list: func(caller seam.ParentRef, q manager.ListQuery) (manager.ListPage, error) {
		return manager.ListPage{Rows: []manager.Row{
			{Kind: "child", ID: "agent-1", Status: "idle", Label: "tests", Provider: "spawn", Depth: 1, Usage: usage,
				LastStopReason: agent.StopCompleted, LastMessage: "all green"},
			{Kind: "diagnostic", ID: "agent-2", Reason: "corrupt"},
		}}, nil
	}})
	r := s.tool("list_agents").handle(context.Background(), rootCall(s, map[string]any{"all_projects": true}))
	want := "agent-1 [idle] — tests (provider spawn, depth 1, 12 in / 4 out tokens, last turn completed)\n  closing message: all green\nagent-2 [corrupt] — cannot be read"
	if r.IsError || ResultText(r) != want {
		t.Errorf("list_agents text:\n%s\nwant:\n%s", ResultText(r), want)
	}
	if rows := structured(t, r)["agents"].([]any); len(rows) != 2 {
		t.Errorf("structured agents = %v, want both rows", rows)
	}
}

func TestSeamErrorsKeepTheirCode(t *testing.T) {
	s := fakeServer(t, &fakeManager{interrupt: func(seam.ParentRef, string) error {
		return &seam.Error{Code: seam.CodeUnauthorized, Message: "only the direct parent may stop agent-3"}
	}})
	r := s.tool("interrupt_agent").handle(context.Background(), rootCall(s, map[string]any{"agent_id": "agent-3"}))
	if want := "Error: UNAUTHORIZED: only the direct parent may stop agent-3"; !r.IsError || ResultText(r) != want {
		t.Errorf("interrupt_agent = %q, want %q", ResultText(r), want)
	}
}

// list_agents hands the page query to the manager as given, returns the
// next cursor in structuredContent and says it in the text.
func TestListAgentsPages(t *testing.T) {
	var got manager.ListQuery
	s := fakeServer(t, &fakeManager{list: func(caller seam.ParentRef, q manager.ListQuery) (manager.ListPage, error) {
		got = q
		return manager.ListPage{Rows: []manager.Row{{Kind: "child", ID: "agent-1", Status: "ready"}}, Next: "CURSOR2"}, nil
	}})
	r := s.tool("list_agents").handle(context.Background(), rootCall(s, map[string]any{
		"scope": "descendants", "status": "ready", "limit": 7, "cursor": "CURSOR1", "all_projects": true}))
	if want := (manager.ListQuery{Descendants: true, Status: "ready", Limit: 7, Cursor: "CURSOR1"}); got != want {
		t.Errorf("List query = %+v, want %+v", got, want)
	}
	if m := structured(t, r); m["next_cursor"] != "CURSOR2" {
		t.Errorf("structuredContent = %v, want next_cursor", m)
	}
	if !strings.Contains(ResultText(r), `pass cursor "CURSOR2"`) {
		t.Errorf("text %q does not give the next cursor", ResultText(r))
	}
	for _, bad := range []map[string]any{{"limit": 0}, {"limit": 501}, {"status": "asleep"}, {"cursor": strings.Repeat("x", 2000)}} {
		if r := s.tool("list_agents").handle(context.Background(), rootCall(s, bad)); !r.IsError {
			t.Errorf("list_agents(%v) was accepted", bad)
		}
	}
}

// A page's response is bounded by its limit, however long the stored
// labels, closing messages and paths are.
func TestAListingPageIsBounded(t *testing.T) {
	huge := strings.Repeat("é", 50_000)
	s := fakeServer(t, &fakeManager{list: func(caller seam.ParentRef, q manager.ListQuery) (manager.ListPage, error) {
		rows := make([]manager.Row, q.Limit)
		for i := range rows {
			u := seam.Usage{InputTokens: 1 << 40, OutputTokens: 1 << 40, CostUSD: 1e9}
			rows[i] = manager.Row{Kind: "child", ID: fmt.Sprintf("agent-%016d", i), Label: huge, Status: "ready", Provider: "spawn",
				Parent: "principal:local", Depth: 3, Usage: &u, TreeUsage: &u, LastStopReason: agent.StopMaxTokens, LastMessage: huge, Cwd: "/" + huge}
		}
		return manager.ListPage{Rows: rows, Next: strings.Repeat("c", 200)}, nil
	}})
	const perRow = 4096
	for _, limit := range []int{1, 50, 500} {
		r := s.tool("list_agents").handle(context.Background(), rootCall(s, map[string]any{"limit": limit, "all_projects": true}))
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > limit*perRow+1024 {
			t.Errorf("a page of %d rows is %d bytes, over %d per row", limit, len(b), perRow)
		}
		if !utf8Valid(string(b)) {
			t.Error("a clipped row is not valid UTF-8")
		}
	}
}
