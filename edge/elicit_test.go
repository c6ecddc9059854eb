package edge

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/seal"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// askingProvider runs continuable children whose turn asks leave to write
// a file (once gate is closed, when set) and says whether it wrote it.
type askingProvider struct{ gate chan struct{} }

func (*askingProvider) Name() string                    { return "asking" }
func (*askingProvider) Capabilities() seam.Capabilities { return seam.Capabilities{} }
func (*askingProvider) InheritsParentContext() bool     { return false }
func (*askingProvider) Continuable()                    {}
func (*askingProvider) Prepare(context.Context, seam.StartRequest) (seam.CreationInputs, error) {
	return seam.CreationInputs{}, nil
}
func (p *askingProvider) NewDriver(_ context.Context, r seam.DriverRequest) (seam.Driver, error) {
	return &askingDriver{gate: p.gate, j: r.Journal, ask: r.Ask}, nil
}

type askingDriver struct {
	gate chan struct{}
	j    *agent.Journal
	ask  seam.AskFunc
}

func (d *askingDriver) RunTurn(ctx context.Context, _ []agent.Input) agent.TurnResult {
	if d.gate != nil {
		<-d.gate
	}
	q := d.ask(ctx, seam.AskRequest{Kind: seam.QuestionApproval, Message: "permission to run: Write notes.txt",
		Choices: []string{"Allow once", "Reject once"}, Declines: []string{"Reject once"}, Timeout: time.Minute, Fallback: "deny"})
	if q.Answer.Outcome == seam.OutcomeAccepted {
		return agent.TurnResult{Output: "WROTE notes.txt (" + q.Answer.Text + ")", StopReason: agent.StopCompleted}
	}
	return agent.TurnResult{Output: "NOT WRITTEN: " + q.Answer.Outcome + " by the " + q.Answer.By + " (" + q.Answer.Text + ")", StopReason: agent.StopCompleted}
}
func (d *askingDriver) Journal() *agent.Journal { return d.j }
func (*askingDriver) Close() error              { return nil }

// offerGate is the manager, opening gate once a call offers to take a
// child's questions: the child asks only then, so the question is the
// call's to put, never a notice first.
type offerGate struct {
	*manager.Manager
	once sync.Once
	gate chan struct{}
}

func (o *offerGate) OfferQuestions(childID string) (<-chan seam.Question, func()) {
	ch, stop := o.Manager.OfferQuestions(childID)
	o.once.Do(func() { close(o.gate) })
	return ch, stop
}

// elicitor is a client's person: it answers every elicitation with
// action and, accepting, the answer; it records what it was asked.
type elicitor struct {
	action mcp.ElicitationResponseAction
	answer string
	mu     sync.Mutex
	asked  []mcp.ElicitationParams
}

func (e *elicitor) Elicit(_ context.Context, r mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	e.mu.Lock()
	e.asked = append(e.asked, r.Params)
	e.mu.Unlock()
	res := &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: e.action}}
	if e.action == mcp.ElicitationResponseActionAccept {
		res.Content = map[string]any{"answer": e.answer}
	}
	return res, nil
}

type askingSetup struct {
	c     *client.Client
	mgr   *manager.Manager
	store *memstore.Store
	logs  *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}
func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// serveAsking serves the tools over the stdio session (daemon.ServeStream
// over pipes) to an mcp-go client speaking protocol, with e as its person
// (nil: a client that declares no elicitation). gated: the child asks only
// once the call offers to take its questions.
func serveAsking(t *testing.T, protocol string, e *elicitor, gated bool) askingSetup {
	t.Helper()
	s := askingSetup{store: memstore.New(), logs: &syncBuffer{}}
	p := &askingProvider{}
	var mgr Manager
	s.mgr = manager.New(manager.Options{Store: s.store})
	mgr = s.mgr
	if gated {
		p.gate = make(chan struct{})
		mgr = &offerGate{Manager: s.mgr, gate: p.gate}
	}
	if err := s.mgr.Register(p); err != nil {
		t.Fatal(err)
	}
	ts, err := New(mgr, Options{Roots: []string{t.TempDir()}, Logger: slog.New(slog.NewTextHandler(s.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ms := server.NewMCPServer("test", "1", server.WithToolCapabilities(false), server.WithToolFilter(ts.Filter), server.WithHooks(ts.Hooks()))
	ts.Register(ms)
	ctx, cancel := context.WithCancel(context.Background())
	tr, served := serveStdioPipes(ctx, ts)
	var opts []client.ClientOption
	if e != nil {
		opts = append(opts, client.WithElicitationHandler(e))
	}
	s.c = client.NewClient(tr, opts...)
	t.Cleanup(func() {
		s.c.Close()
		cancel()
		_ = served()
		_ = s.mgr.Close(context.Background())
	})
	ictx, icancel := context.WithTimeout(ctx, 10*time.Second)
	defer icancel()
	if err := s.c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = protocol
	init.Params.ClientInfo = mcp.Implementation{Name: "test-client", Version: "1"}
	if _, err := s.c.Initialize(ictx, init); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s askingSetup) call(t *testing.T, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := s.c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v\nlogs:\n%s", name, err, s.logs)
	}
	return res
}

// onlyQuestion is the one question of the child of the foreground result r.
func (s askingSetup) onlyQuestion(t *testing.T, r *mcp.CallToolResult) seam.Question {
	t.Helper()
	fg, ok := structuredField(t, r, "agent_id")
	if !ok {
		t.Fatalf("no agent_id in %s", ResultText(r))
	}
	qs, err := s.store.Questions(context.Background(), fg)
	if err != nil || len(qs) != 1 || qs[0].Answer == nil {
		t.Fatalf("questions of %s: %+v, %v; want one, answered", fg, qs, err)
	}
	return qs[0]
}

func structuredField(t *testing.T, r *mcp.CallToolResult, key string) (string, bool) {
	t.Helper()
	m := structured(t, r)
	v, ok := m[key].(string)
	return v, ok
}

// A child's question reaches the person through the client of the call
// waiting for it: as input_required to a 2026-07-28 client, which retries
// with the answer; as elicitation/create to an older one. The answer
// reaches the child, the call completes with its result, the question is
// stored as the person's answer, and no notice of it rides along.
func TestAWaitingCallPutsItsChildsQuestionToThePerson(t *testing.T) {
	for _, tc := range []struct {
		name, protocol string
		action         mcp.ElicitationResponseAction
		answer         string
		want           string
		outcome        string
		roundTrip      bool
	}{
		{"2026-07-28 accepts", mcp.ProtocolVersion20260728, mcp.ElicitationResponseActionAccept, "Allow once", "WROTE notes.txt (Allow once)", seam.OutcomeAccepted, true},
		{"2026-07-28 declines", mcp.ProtocolVersion20260728, mcp.ElicitationResponseActionDecline, "", "NOT WRITTEN: declined by the person (deny)", seam.OutcomeDeclined, true},
		{"2025-11-25 accepts", mcp.LATEST_LEGACY_PROTOCOL_VERSION, mcp.ElicitationResponseActionAccept, "Allow once", "WROTE notes.txt (Allow once)", seam.OutcomeAccepted, false},
		{"2025-11-25 cancels", mcp.LATEST_LEGACY_PROTOCOL_VERSION, mcp.ElicitationResponseActionCancel, "", "NOT WRITTEN: declined by the person (deny)", seam.OutcomeDeclined, false},
		{"2025-11-25 rejects by the option", mcp.LATEST_LEGACY_PROTOCOL_VERSION, mcp.ElicitationResponseActionAccept, "Reject once", "NOT WRITTEN: declined by the person (Reject once)", seam.OutcomeDeclined, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &elicitor{action: tc.action, answer: tc.answer}
			s := serveAsking(t, tc.protocol, e, true)
			r := s.call(t, "subagent", map[string]any{"description": "write", "prompt": "write notes.txt"})
			if r.IsError || ResultText(r) != tc.want {
				t.Fatalf("result (error %v) %q, want %q\nlogs:\n%s", r.IsError, ResultText(r), tc.want, s.logs)
			}
			if len(e.asked) != 1 {
				t.Fatalf("the person was asked %d times, want once", len(e.asked))
			}
			asked := e.asked[0]
			schema := asked.RequestedSchema.(map[string]any)
			field := schema["properties"].(map[string]any)["answer"].(map[string]any)
			if !strings.Contains(asked.Message, "permission to run: Write notes.txt") || !strings.Contains(asked.Message, "Subagent agent-") {
				t.Errorf("the person was asked %q", asked.Message)
			}
			if enum, _ := field["enum"].([]any); len(enum) != 2 || enum[0] != "Allow once" || enum[1] != "Reject once" {
				t.Errorf("the answer's choices are %v, want the child's options", field["enum"])
			}
			q := s.onlyQuestion(t, r)
			if q.Answer.By != seam.ByPerson || q.Answer.Outcome != tc.outcome {
				t.Errorf("stored answer %+v, want %s by the person", q.Answer, tc.outcome)
			}
			if m := structured(t, r); m["notices"] != nil {
				t.Errorf("a notice rode along: %v", m["notices"])
			}
			if got := strings.Contains(s.logs.String(), "as input_required"); got != tc.roundTrip {
				t.Errorf("input_required used: %v, want %v\nlogs:\n%s", got, tc.roundTrip, s.logs)
			}
		})
	}
}

// A waiting send_message puts the question of the turn it waits for to
// the person the same way, and the retry finishes as send_message does.
func TestAWaitingSendMessagePutsTheQuestionToThePerson(t *testing.T) {
	e := &elicitor{action: mcp.ElicitationResponseActionAccept, answer: "Allow once"}
	s := serveAsking(t, mcp.ProtocolVersion20260728, e, false)
	r := s.call(t, "subagent", map[string]any{"description": "write", "prompt": "first", "run_in_background": true})
	id, _ := structuredField(t, r, "agent_id")
	// The background turn's question goes as a notice: answer it.
	deadline := time.Now().Add(20 * time.Second)
	for {
		l := s.call(t, "list_agents", map[string]any{"status": "input_required", "all_projects": true})
		if strings.Contains(ResultText(l), id) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the background child never asked: %s", ResultText(l))
		}
		s.call(t, "list_agents", map[string]any{"wait_seconds": 1})
	}
	if a := s.call(t, "send_message", map[string]any{"subagent_id": id, "message": "allow"}); a.IsError {
		t.Fatalf("answer: %s", ResultText(a))
	}
	r = s.call(t, "send_message", map[string]any{"subagent_id": id, "message": "write again", "wait_seconds": 20})
	if r.IsError || !strings.Contains(ResultText(r), "WROTE notes.txt (Allow once)") {
		t.Fatalf("send_message: %q\nlogs:\n%s", ResultText(r), s.logs)
	}
	if out, _ := structured(t, r)["outcome"].(map[string]any); out["stop_reason"] != "completed" {
		t.Errorf("structured outcome %v", structured(t, r))
	}
	if len(e.asked) != 1 || !strings.Contains(s.logs.String(), "as input_required") {
		t.Errorf("asked %d times; logs:\n%s", len(e.asked), s.logs)
	}
}

// A client that declared no elicitation gets the question as before: a
// notice naming it, answerable with send_message, while the wait goes on.
func TestWithoutElicitationTheQuestionIsANotice(t *testing.T) {
	s := serveAsking(t, mcp.LATEST_LEGACY_PROTOCOL_VERSION, nil, false)
	r := s.call(t, "subagent", map[string]any{"description": "write", "prompt": "p", "wait_seconds": 0.5})
	id, _ := structuredField(t, r, "agent_id")
	// The notice rides with the first result that follows it.
	seen := ResultText(r)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(seen, "[subagent-question from "+id+"]") && time.Now().Before(deadline) {
		seen += "\n" + ResultText(s.call(t, "list_agents", map[string]any{"wait_seconds": 5}))
	}
	if !strings.Contains(seen, "[subagent-question from "+id+"]") || !strings.Contains(seen, "asks (question q-") {
		t.Fatalf("no question notice; saw:\n%s", seen)
	}
	if strings.Contains(s.logs.String(), "input_required") {
		t.Errorf("a client without elicitation was sent input_required")
	}
}

// noNotices is fakeManager with nothing pending for anyone.
type noNotices struct{ *fakeManager }

func (noNotices) TakeNotices(string, string) []seam.Notice { return nil }
func (noNotices) SessionOpened(string, string)             {}

// fakeAsker is the manager's asking side for the refusal tests.
type fakeAsker struct{ Asker }

func (fakeAsker) AwaitTurn(string, string, func(string)) manager.Turn {
	return fakeTurn{ok: true, res: seam.Result{Output: "resumed", StopReason: agent.StopCompleted}}
}
func (fakeAsker) NoticeQuestion(string) {}

// A requestState opens only as sealed here, unaltered, unexpired, once,
// by the principal and for the tool it was issued to; each refusal says
// why. The valid one resumes the wait for the child's turn.
func TestARequestStateIsRefusedUnlessItIsGenuine(t *testing.T) {
	s, err := New(noNotices{&fakeManager{treeUsage: func(string) (seam.Usage, error) { return seam.Usage{}, nil }}}, Options{Roots: []string{t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	sl, err := seal.New("mcp-subagent requestState")
	if err != nil {
		t.Fatal(err)
	}
	s.asking = &asking{asker: fakeAsker{}, sealer: sl}
	s.mcp = server.NewMCPServer("t", "1")
	state := func(principal, tool string, exp time.Time) string {
		b := []byte(`{"principal":"` + principal + `","tool":"` + tool + `","child":"agent-1","question":"q-1","kind":"approval","message":"msg-1"}`)
		tok, err := sl.Seal(b, exp)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	answer := mcp.InputResponses{"q-1": mcp.NewElicitationInputResponse(mcp.ElicitationResult{
		ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept, Content: map[string]any{"answer": "allow"}}})}
	retry := func(tool, st string, responses mcp.InputResponses) *mcp.CallToolResult {
		req := mcp.CallToolRequest{}
		req.Params.Name = tool
		req.Params.Arguments = map[string]any{"description": "d", "prompt": "p"}
		if tool == "send_message" {
			req.Params.Arguments = map[string]any{"subagent_id": "agent-2", "message": "m", "wait_seconds": 1}
		}
		req.Params.RequestState, req.Params.InputResponses = st, responses
		ctx := WithPrincipal(context.Background(), "local")
		res, err := s.mcpHandler(s.tool(tool))(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	good := state("local", "subagent", time.Now().Add(time.Minute))
	other, err := seal.New("mcp-subagent requestState") // another server process's key
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.Seal([]byte(`{"principal":"local","tool":"subagent","child":"agent-1","question":"q-1","kind":"approval","message":"msg-1"}`), time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	tampered := []byte(good)
	if i := len(good) / 2; good[i] == 'A' {
		tampered[i] = 'B'
	} else {
		tampered[i] = 'A'
	}
	for _, tc := range []struct {
		name, tool, state string
		responses         mcp.InputResponses
		want              string
	}{
		{"tampered", "subagent", string(tampered), answer, "not issued by this server process, or it was altered"},
		{"garbage", "subagent", "not-a-state", answer, "not issued by this server process"},
		{"another process's", "subagent", foreign, answer, "not issued by this server process"},
		{"expired", "subagent", state("local", "subagent", time.Now().Add(-time.Second)), answer, "expired"},
		{"another principal's", "subagent", state("mallory", "subagent", time.Now().Add(time.Minute)), answer, "issued to another principal"},
		{"another tool's", "send_message", state("local", "subagent", time.Now().Add(time.Minute)), answer, "issued for tool subagent"},
		{"another subagent's", "send_message", state("local", "send_message", time.Now().Add(time.Minute)), answer, "issued for subagent agent-1, not agent-2"},
		{"missing", "subagent", "", answer, "missing"},
		{"no answer", "subagent", state("local", "subagent", time.Now().Add(time.Minute)), mcp.InputResponses{}, `no elicitation answer under "q-1"`},
	} {
		r := retry(tc.tool, tc.state, tc.responses)
		if !r.IsError || !strings.Contains(ResultText(r), tc.want) || !strings.Contains(ResultText(r), `field "requestState"`) {
			t.Errorf("%s: %q (error %v), want a refusal saying %q", tc.name, ResultText(r), r.IsError, tc.want)
		}
	}
	if r := retry("subagent", good, answer); r.IsError || ResultText(r) != "resumed" {
		t.Fatalf("the genuine state: %q (error %v)", ResultText(r), r.IsError)
	}
	if r := retry("subagent", good, answer); !r.IsError || !strings.Contains(ResultText(r), "used already") {
		t.Errorf("the replayed state: %q (error %v), want refused as used", ResultText(r), r.IsError)
	}
}
