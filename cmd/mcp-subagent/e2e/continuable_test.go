//go:build e2e

package e2e

// End-to-end tests of continuable children (DESIGN §4, §5): the real
// binary, a real mcp-go client, and the fake chat model. Every agent's model
// requests are routed by the text of that agent's own prompt.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	bolt "go.etcd.io/bbolt"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/persist"
)

// ---- structuredContent shapes --------------------------------------------

type sentSC struct {
	MessageID string `json:"message_id"`
	Route     string `json:"route"`
	AgentID   string `json:"agent_id"`
	Outcome   *struct {
		StopReason string `json:"stop_reason"`
		Output     string `json:"output"`
		Diagnostic string `json:"diagnostic"`
	} `json:"outcome"`
}

// ---- tool-call helpers ---------------------------------------------------

func callSend(t testing.TB, s *instance, ctx context.Context, id, msg string, wait float64) (*mcp.CallToolResult, sentSC) {
	t.Helper()
	args := map[string]any{"subagent_id": id, "message": msg}
	if wait > 0 {
		args["wait_seconds"] = wait
	}
	res := s.call(t, ctx, "send_message", args)
	var out sentSC
	if !res.IsError || res.StructuredContent != nil || res.RawStructuredContent != nil {
		decodeSC(t, res, &out)
	}
	return res, out
}

func filterNotices(ns []string, source string) []string {
	var out []string
	for _, n := range ns {
		if strings.HasPrefix(n, "["+source+" from ") {
			out = append(out, n)
		}
	}
	return out
}

// ---- fake-model helpers --------------------------------------------------

// turnStart reports whether the request is the first model call of a turn.
func turnStart(r fakeopenai.Request) bool {
	return len(r.Messages) > 0 && r.Messages[len(r.Messages)-1].Role == "user"
}

// turnInput is what a turn-starting request brings: its trailing user
// messages (one, or several when deliveries ride along), joined.
func turnInput(r fakeopenai.Request) string {
	i := len(r.Messages)
	for i > 0 && r.Messages[i-1].Role == "user" {
		i--
	}
	var parts []string
	for _, m := range r.Messages[i:] {
		parts = append(parts, m.Content)
	}
	return strings.Join(parts, "\n\n")
}

// toolResults counts the tool results of the current turn.
func toolResults(r fakeopenai.Request) int {
	n := 0
	for i := len(r.Messages) - 1; i >= 0 && r.Messages[i].Role != "user"; i-- {
		if r.Messages[i].Role == "tool" {
			n++
		}
	}
	return n
}

// lastCall is the name of the latest tool the model called.
func lastCall(r fakeopenai.Request) string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if tc := r.Messages[i].ToolCalls; len(tc) > 0 {
			return tc[len(tc)-1].Name
		}
	}
	return ""
}

func callTool(name string, args map[string]any) fakeopenai.Reply {
	b, _ := json.Marshal(args)
	return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: name, Arguments: string(b)}}}
}

// nonSystem is a request's conversation without the system prompt.
func nonSystem(r fakeopenai.Request) []fakeopenai.Message {
	var out []fakeopenai.Message
	for _, m := range r.Messages {
		if m.Role != "system" {
			out = append(out, m)
		}
	}
	return out
}

type convMsg struct{ role, content string }

// sameConversation compares a request's conversation with want, by role and
// content.
func sameConversation(got []fakeopenai.Message, want []convMsg) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i].Role != want[i].role || got[i].Content != want[i].content {
			return false
		}
	}
	return true
}

func dumpConversation(ms []fakeopenai.Message) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "  %s: %q", m.Role, m.Content)
		for _, tc := range m.ToolCalls {
			fmt.Fprintf(&b, " call %s(%s)", tc.Name, tc.Arguments)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

var agentIDRe = regexp.MustCompile(`agent-[0-9a-f]{16}`)

// ---- harness extensions --------------------------------------------------

// connectHTTP connects one more client (with its own bearer token) to a
// running HTTP server. stderr is the server's, for failure messages.

// startAlice is an HTTP server that knows principals alice and bob, with a
// client of alice's.
func startAlice(t *testing.T, fake *fakeopenai.Server) *instance {
	t.Helper()
	return start(t, fake, serverOpts{http: true, token: aliceTok,
		config: `{"http":{"tokens":[{"principal":"alice","token_env":"ALICE_TOKEN"},{"principal":"bob","token_env":"BOB_TOKEN"}]}}`,
		env:    []string{"ALICE_TOKEN=" + aliceTok, "BOB_TOKEN=" + bobTok}})
}

// aliceAndBob is startAlice with a client of bob's beside.
func aliceAndBob(t *testing.T, fake *fakeopenai.Server) (alice, bob *instance) {
	t.Helper()
	alice = startAlice(t, fake)
	return alice, connectHTTP(t, alice.url, bobTok, alice.stderr)
}

func connectHTTP(t *testing.T, url, token string, stderr *syncBuffer) *instance {
	t.Helper()
	var opts []transport.StreamableHTTPCOption
	if token != "" {
		opts = append(opts, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	}
	c, err := client.NewStreamableHttpClient(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "e2e", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatalf("initialize: %v; stderr:\n%s", err, stderr)
	}
	return &instance{client: c, stderr: stderr, url: url, notes: make(chan mcp.JSONRPCNotification, 1)}
}

// openStore opens a stopped server's store.
func openStore(t *testing.T, dataDir string) *persist.Store {
	t.Helper()
	st, err := persist.Open(dataDir, persist.Options{})
	if err != nil {
		t.Fatalf("opening the store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// journalCommitted is the longest journal of child id the server logged
// as committed (0: none).
func journalCommitted(stderr string, id string) int64 {
	var n int64
	for _, line := range strings.Split(stderr, "\n") {
		var e struct {
			Msg        string `json:"msg"`
			AgentID    string `json:"agent_id"`
			JournalLen int64  `json:"journal_len"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Msg == "journal committed" && e.AgentID == id {
			n = max(n, e.JournalLen)
		}
	}
	return n
}

// turnEndedAborted reports whether the server logged an aborted turn of id.
// interruptsOf is who carried out each interrupt of child id, in order,
// from the server's log.
func interruptsOf(stderr string, id string) []string {
	var by []string
	for _, line := range strings.Split(stderr, "\n") {
		var e struct {
			Msg     string `json:"msg"`
			AgentID string `json:"agent_id"`
			By      string `json:"by"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Msg == "subagent interrupted" && e.AgentID == id {
			by = append(by, e.By)
		}
	}
	return by
}

func turnEndedAborted(stderr string, id string) bool {
	for _, line := range strings.Split(stderr, "\n") {
		if strings.Contains(line, `"msg":"turn ended"`) && strings.Contains(line, `"stop_reason":"aborted"`) && strings.Contains(line, id) {
			return true
		}
	}
	return false
}

// ---- 1 -------------------------------------------------------------------

func TestBackgroundStartReturnsAtOnceAndSettlesWithOneNotice(t *testing.T) {
	transports(t, func(t *testing.T, http bool) {
		release := newGate()
		var arrived atomic.Int32
		fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
			arrived.Add(1)
			release.wait(20 * time.Second)
			return fakeopenai.Reply{Text: "All done: the report is written."}
		})
		defer fake.Close()
		defer release.open()
		s := start(t, fake, serverOpts{http: http})
		ctx := testCtx(t)

		t0 := time.Now()
		h, early := startBackground(t, s, ctx, "write the report", "Write the report.")
		if len(early) != 0 {
			t.Errorf("notices before the child settled: %q", early)
		}
		if d := time.Since(t0); d > time.Second {
			t.Errorf("the background start took %v; it must return at once", d)
		}
		if !waitFor(5*time.Second, func() bool { return arrived.Load() == 1 }) {
			t.Fatal("the child never called the model")
		}
		res, rows := callList(t, s, ctx, nil)
		if r, ok := rowOf(rows, h.AgentID); !ok || r.Kind != "child" || r.Status != "running" || r.Label != "write the report" ||
			r.Provider != "spawn" || r.Depth != 1 || r.Parent != "principal:local" {
			t.Errorf("row while the turn runs = %+v (found %v); rows %+v", r, ok, rows)
		}
		if ns := notices(res, ""); len(ns) != 0 {
			t.Errorf("notices before the child settled: %q", ns)
		}

		release.open()
		t1 := time.Now()
		res, _ = callList(t, s, ctx, map[string]any{"wait_seconds": 8})
		if d := time.Since(t1); d > 5*time.Second {
			t.Errorf("list_agents with wait_seconds returned after %v; it should return when the notice is pending", d)
		}
		settled := notices(res, "subagent-settled")
		if len(settled) != 1 {
			t.Fatalf("settlement notices in band = %q; result:\n%s", settled, text(res))
		}
		n := settled[0]
		for _, want := range []string{"[subagent-settled from " + h.AgentID + "]",
			"Background subagent " + h.AgentID + " finished and will do no further work",
			"All done: the report is written."} {
			if !strings.Contains(n, want) {
				t.Errorf("notice lacks %q:\n%s", want, n)
			}
		}

		var again []string
		ready := waitFor(3*time.Second, func() bool {
			res, rows := callList(t, s, ctx, nil)
			again = append(again, notices(res, "")...)
			r, _ := rowOf(rows, h.AgentID)
			return r.Status == "ready"
		})
		if !ready {
			_, rows := callList(t, s, ctx, nil)
			t.Errorf("after settlement the child is not listed ready: %+v", rows)
		}
		// A model that missed the notice still learns how the child ended.
		_, rows = callList(t, s, ctx, nil)
		if r, _ := rowOf(rows, h.AgentID); r.LastStopReason != "completed" || r.LastMessage != "All done: the report is written." {
			t.Errorf("ready row = %+v; want last_stop_reason completed and the closing message", r)
		}
		res = s.call(t, ctx, "list_agents", map[string]any{"scope": "descendants"})
		again = append(again, notices(res, "")...)
		if len(again) != 0 {
			t.Errorf("the notice was delivered again: %q", again)
		}
	})
}

// ---- 2 -------------------------------------------------------------------

func TestFollowupsQueuedDuringATurnRunInOrderOneTurnEach(t *testing.T) {
	release := newGate()
	var arrived atomic.Int32
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		arrived.Add(1)
		lu := req.LastUserText()
		if lu == "first task" {
			release.wait(20 * time.Second)
		}
		return fakeopenai.Reply{Text: "answer to " + lu}
	})
	defer fake.Close()
	defer release.open()
	s := start(t, fake, serverOpts{})
	ctx := testCtx(t)

	h, _ := startBackground(t, s, ctx, "queue some work", "first task")
	if !waitFor(5*time.Second, func() bool { return arrived.Load() == 1 }) {
		t.Fatal("the child never called the model")
	}
	inputs := []string{"first task", "follow-up 1", "follow-up 2", "follow-up 3"}
	ids := map[string]bool{h.MessageID: true}
	for _, m := range inputs[1:] {
		res, sent := callSend(t, s, ctx, h.AgentID, m, 0)
		if res.IsError {
			t.Fatalf("send_message %q: %s", m, text(res))
		}
		if sent.Route != "queued" || sent.MessageID == "" || ids[sent.MessageID] {
			t.Errorf("send_message %q = %+v, want route queued and a fresh message id", m, sent)
		}
		ids[sent.MessageID] = true
		if sent.Outcome != nil {
			t.Errorf("send_message without wait_seconds returned an outcome: %+v", sent.Outcome)
		}
	}
	if n := arrived.Load(); n != 1 {
		t.Errorf("%d model requests while the first turn ran; follow-ups must wait behind it", n)
	}
	release.open()
	// The epoch settles after the fourth turn; its notice says so.
	got := awaitNotices(t, s, ctx, 8*time.Second, nil, func(ns []string) bool { return len(filterNotices(ns, "subagent-settled")) > 0 })
	if len(filterNotices(got, "subagent-settled")) != 1 || !strings.Contains(got[0], "answer to follow-up 3") {
		t.Errorf("settlement notices = %q, want one closing with the last answer", got)
	}

	reqs := fake.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d model requests, want exactly 4 (one turn per message)", len(reqs))
	}
	var want []convMsg
	for k, r := range reqs {
		want = append(want, convMsg{"user", inputs[k]})
		if got := nonSystem(r); !sameConversation(got, want) {
			t.Errorf("request %d conversation:\n%swant the previous turns and then %q", k, dumpConversation(got), inputs[k])
		}
		want = append(want, convMsg{"assistant", "answer to " + inputs[k]})
	}

	res, sent := callSend(t, s, ctx, h.AgentID, "follow-up 4", 10)
	if res.IsError || sent.Outcome == nil {
		t.Fatalf("send_message with wait_seconds: %s (%+v)", text(res), sent)
	}
	if sent.Outcome.Output != "answer to follow-up 4" || sent.Outcome.StopReason != "completed" || text(res) != "answer to follow-up 4" {
		t.Errorf("outcome = %+v, text %q", sent.Outcome, text(res))
	}
	reqs = fake.Requests()
	if len(reqs) != 5 || !sameConversation(nonSystem(reqs[4]), append(want, convMsg{"user", "follow-up 4"})) {
		t.Errorf("%d requests; the last conversation:\n%s", len(reqs), dumpConversation(nonSystem(reqs[len(reqs)-1])))
	}
}

// ---- 3 -------------------------------------------------------------------

func TestInterruptAbortsTheTurnAndParksTheQueueUntilTheNextSend(t *testing.T) {
	// B may run only once C is sent: the fake sees which came first.
	var cSent, bEarly atomic.Bool
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		lu := req.LastUserText()
		if lu == "A: take forever" {
			return fakeopenai.Reply{Text: "too late", Delay: 30 * time.Second}
		}
		if lu == "B" && !cSent.Load() {
			bEarly.Store(true)
		}
		return fakeopenai.Reply{Text: "answer to " + lu}
	})
	defer fake.Close()
	s := start(t, fake, serverOpts{})
	ctx := testCtx(t)
	h, _ := startBackground(t, s, ctx, "slow worker", "A: take forever")
	if !waitFor(5*time.Second, func() bool { return len(fake.Requests()) == 1 }) {
		t.Fatal("the child never called the model")
	}
	res, sent := callSend(t, s, ctx, h.AgentID, "B", 0)
	if res.IsError || sent.Route != "queued" {
		t.Fatalf("send B: %s %+v", text(res), sent)
	}
	res = s.call(t, ctx, "interrupt_agent", map[string]any{"agent_id": h.AgentID})
	if res.IsError {
		t.Fatalf("interrupt_agent: %s", text(res))
	}
	var acc struct {
		Accepted bool `json:"accepted"`
	}
	decodeSC(t, res, &acc)
	if !acc.Accepted {
		t.Errorf("interrupt_agent structuredContent = %+v", res.StructuredContent)
	}
	if !waitFor(2*time.Second, func() bool { return turnEndedAborted(s.stderr.String(), h.AgentID) }) {
		t.Errorf("the interrupted turn did not end aborted within 2s")
	}
	idle := waitFor(2*time.Second, func() bool {
		_, rows := callList(t, s, ctx, nil)
		r, _ := rowOf(rows, h.AgentID)
		return r.Status == "idle"
	})
	if !idle {
		_, rows := callList(t, s, ctx, nil)
		t.Errorf("after the interrupt the child is not idle: %+v", rows)
	}
	res, _ = callList(t, s, ctx, nil)
	if ns := notices(res, ""); len(ns) != 0 {
		t.Errorf("an interrupted, resident child produced notices: %q", ns)
	}

	// The parked queue waits: B runs with the next message, not before.
	cSent.Store(true)
	res, sent = callSend(t, s, ctx, h.AgentID, "C", 10)
	if bEarly.Load() {
		t.Fatalf("B ran after the interrupt without a new message")
	}
	if res.IsError || sent.Outcome == nil {
		t.Fatalf("send C with wait: %s %+v", text(res), sent)
	}
	if sent.Route != "woken" {
		t.Errorf("route = %q, want woken (the child is resident and idle)", sent.Route)
	}
	if sent.Outcome.Output != "answer to C" || sent.Outcome.StopReason != "completed" {
		t.Errorf("outcome = %+v, want C's answer", sent.Outcome)
	}
	reqs := fake.Requests()
	var order []string
	for _, r := range reqs {
		order = append(order, r.LastUserText())
	}
	if strings.Join(order, "|") != "A: take forever|B|C" {
		t.Errorf("turn order = %q, want A, then B, then C", order)
	}
	if len(reqs) == 3 {
		want := []convMsg{{"user", "A: take forever"}, {"user", "B"}, {"assistant", "answer to B"}, {"user", "C"}}
		if got := nonSystem(reqs[2]); !sameConversation(got, want) {
			t.Errorf("C's request:\n%s", dumpConversation(got))
		}
	}
}

// ---- 4 -------------------------------------------------------------------

func TestReportReachesTheParentWithItsSourceKind(t *testing.T) {
	t.Run("root parent in band", func(t *testing.T) {
		transports(t, func(t *testing.T, http bool) {
			finish := newGate()
			fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
				if turnStart(req) {
					return callTool("report", map[string]any{"output": "halfway there"})
				}
				finish.wait(20 * time.Second)
				return fakeopenai.Reply{Text: "done"}
			})
			defer fake.Close()
			defer finish.open()
			s := start(t, fake, serverOpts{http: http})
			ctx := testCtx(t)
			h, early := startBackground(t, s, ctx, "long task", "Work on it and report progress.")

			got := awaitNotices(t, s, ctx, 8*time.Second, early, func(ns []string) bool { return len(ns) > 0 })
			reports := filterNotices(got, "subagent-report")
			if len(reports) != 1 || len(got) != 1 {
				t.Fatalf("in-band notices = %q, want exactly the report; requests:\n%s\nstderr:\n%s", got, dumpAll(fake), s.stderr)
			}
			want := "[subagent-report from " + h.AgentID + "]\nBackground subagent " + h.AgentID + " reported:\nhalfway there"
			if reports[0] != want {
				t.Errorf("report = %q, want %q", reports[0], want)
			}
			waitFor(5*time.Second, func() bool { return len(fake.Requests()) >= 2 })
			if reqs := fake.Requests(); len(reqs) < 2 {
				t.Errorf("the report ended the child's turn: %d model requests", len(reqs))
			} else if tr, _ := reqs[1].LastToolResult(); !strings.Contains(tr, "reported to your parent") {
				t.Errorf("the child's report tool answered %q", tr)
			}

			finish.open()
			got = awaitNotices(t, s, ctx, 8*time.Second, nil, func(ns []string) bool { return len(filterNotices(ns, "subagent-settled")) > 0 })
			res, _ := callList(t, s, ctx, nil)
			got = append(got, notices(res, "")...)
			settled := filterNotices(got, "subagent-settled")
			if len(settled) != 1 || len(got) != 1 {
				t.Fatalf("notices after the report = %q, want exactly one settlement notice", got)
			}
			if !strings.Contains(settled[0], "finished and will do no further work") || !strings.Contains(settled[0], "Its closing message:\ndone") ||
				strings.Contains(settled[0], "halfway there") {
				t.Errorf("settlement notice = %q", settled[0])
			}
		})
	})

	// nested runs a depth-1 foreground child that starts a background
	// grandchild and waits for it with list_agents; the grandchild reports
	// according to gcScript, then answers "gc done".
	type nestedRun struct {
		childID, gcID    string
		childTurns       []string // the input of each of the child's turns
		listWoke         time.Duration
		childJournal     []agent.Event
		childJournalErr  error
		rootSettleNotice []string
	}
	nested := func(t *testing.T, gcScript []map[string]any) nestedRun {
		var srv atomic.Pointer[instance] // set once the server runs
		var mu sync.Mutex
		var firstReportAt, childAfterList time.Time
		fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
			switch firstUser(req) {
			case "child task":
				if turnStart(req) {
					if req.LastUserText() == "child task" {
						return callTool("subagent", map[string]any{"description": "grandchild work", "prompt": "grandchild task", "run_in_background": true})
					}
					return fakeopenai.Reply{Text: "ack"}
				}
				switch lastCall(req) {
				case "subagent":
					return callTool("list_agents", map[string]any{"wait_seconds": 8})
				case "list_agents":
					mu.Lock()
					childAfterList = time.Now()
					mu.Unlock()
					return fakeopenai.Reply{Text: "child turn 1 done"}
				}
			case "grandchild task":
				k := toolResults(req)
				if k == 0 {
					// Report only once the child waits in list_agents: its
					// server logs that the wait holds its wake-up.
					if !waitFor(10*time.Second, func() bool {
						s := srv.Load()
						return s != nil && strings.Contains(s.stderr.String(), `"msg":"waiting for a delivery"`)
					}) {
						t.Errorf("the server never logged the child's list_agents wait")
					}
				}
				if k < len(gcScript) {
					if k == 0 {
						mu.Lock()
						firstReportAt = time.Now()
						mu.Unlock()
					}
					return callTool("report", gcScript[k])
				}
				return fakeopenai.Reply{Text: "gc done"}
			}
			return fakeopenai.Reply{Text: "unexpected request"}
		})
		t.Cleanup(fake.Close)
		s := start(t, fake, serverOpts{})
		srv.Store(s)
		ctx := testCtx(t)
		res := s.call(t, ctx, "subagent", map[string]any{"description": "delegate and wait", "prompt": "child task"})
		if res.IsError {
			t.Fatalf("foreground child: %s", text(res))
		}
		fg := structured(t, res)
		if fg.Kind != "foreground" || fg.Output != "child turn 1 done" {
			t.Fatalf("foreground result = %+v", fg)
		}
		r := nestedRun{childID: fg.AgentID}
		// The child's epoch ends after the grandchild's notice; its own
		// settlement then reaches the root.
		r.rootSettleNotice = filterNotices(awaitNotices(t, s, ctx, 8*time.Second, notices(res, ""), func(ns []string) bool {
			return countWith(ns, "subagent-settled from "+r.childID) > 0
		}), "subagent-settled")
		for _, q := range fake.Requests() {
			if firstUser(q) == "child task" && turnStart(q) {
				r.childTurns = append(r.childTurns, turnInput(q))
			}
			if firstUser(q) == "child task" && lastCall(q) == "subagent" {
				if id := agentIDRe.FindString(q.Messages[len(q.Messages)-1].Content); id != "" {
					r.gcID = id
				}
			}
		}
		mu.Lock()
		r.listWoke = childAfterList.Sub(firstReportAt)
		mu.Unlock()
		// list_agents (wait_seconds 8) must return once a report is pending.
		if r.listWoke < 0 || r.listWoke > 4*time.Second {
			t.Errorf("the child's list_agents returned %v after the grandchild's first report; it should wake when the report is pending", r.listWoke)
		}
		if len(r.rootSettleNotice) != 1 {
			t.Errorf("the child's settlement notices at the root = %q, want one", r.rootSettleNotice)
		}
		if r.gcID == "" {
			t.Fatalf("the child never got a grandchild id; requests:\n%s", dumpAll(fake))
		}
		// Stop the server and read the child's journal.
		s.stop(t)
		st := openStore(t, s.dataDir)
		r.childJournal, r.childJournalErr = st.Events(context.Background(), r.childID)
		return r
	}

	t.Run("nested next-step makes a turn, quiet rides along", func(t *testing.T) {
		t.Parallel()
		r := nested(t, []map[string]any{
			{"output": "gc quiet note", "delivery": "quiet"},
			{"output": "gc progress", "delivery": "next-step"},
		})
		quiet := "Background subagent " + r.gcID + " reported:\ngc quiet note"
		progress := "Background subagent " + r.gcID + " reported:\ngc progress"
		settled := "Background subagent " + r.gcID + " finished and will do no further work"
		if len(r.childTurns) != 3 {
			t.Fatalf("the child ran %d turns, want 3 (prompt, next-step report, grandchild's settlement): %q", len(r.childTurns), r.childTurns)
		}
		if r.childTurns[0] != "child task" {
			t.Errorf("turn 1 = %q", r.childTurns[0])
		}
		if !strings.Contains(r.childTurns[1], progress) {
			t.Errorf("turn 2 = %q, want the next-step report %q", r.childTurns[1], progress)
		}
		if !strings.Contains(r.childTurns[1], quiet) {
			t.Errorf("the quiet report did not ride along with the child's next turn: turn 2 = %q", r.childTurns[1])
		}
		if !strings.Contains(r.childTurns[2], settled) {
			t.Errorf("turn 3 = %q, want the grandchild's settlement notice", r.childTurns[2])
		}
		for _, tt := range r.childTurns {
			if strings.TrimSpace(tt) == quiet {
				t.Errorf("the quiet report got a turn of its own")
			}
		}
		checkJournalSources(t, r.childJournal, r.childJournalErr, map[string]string{
			"gc progress": agent.SourceReport, "gc quiet note": agent.SourceReport,
			"finished and will do no further work": agent.SourceSettled, "child task": agent.SourceUser,
		})
	})

	t.Run("nested quiet report riding with a settlement notice keeps its source kind", func(t *testing.T) {
		t.Parallel()
		r := nested(t, []map[string]any{{"output": "gc quiet note", "delivery": "quiet"}})
		quiet := "Background subagent " + r.gcID + " reported:\ngc quiet note"
		if len(r.childTurns) != 2 {
			t.Fatalf("the child ran %d turns, want 2 (prompt, grandchild's settlement; the quiet report makes none): %q", len(r.childTurns), r.childTurns)
		}
		if !strings.Contains(r.childTurns[1], quiet) {
			t.Errorf("the quiet report did not ride along with the child's next turn: %q", r.childTurns[1])
		}
		// Principle 4: the child's words and the runtime's are stored under
		// different source kinds, never merged into one message.
		checkJournalSources(t, r.childJournal, r.childJournalErr, map[string]string{
			"gc quiet note": agent.SourceReport, "finished and will do no further work": agent.SourceSettled,
		})
	})
}

func dumpAll(fake *fakeopenai.Server) string {
	var b strings.Builder
	for i, r := range fake.Requests() {
		fmt.Fprintf(&b, "request %d:\n%s", i, dumpConversation(nonSystem(r)))
	}
	return b.String()
}

// checkJournalSources checks that the journal is valid and that every user
// message containing a key is stored with that key's source kind.
func checkJournalSources(t *testing.T, events []agent.Event, err error, want map[string]string) {
	t.Helper()
	if err != nil {
		t.Fatalf("reading the child's journal: %v", err)
	}
	if err := agent.Validate(events); err != nil {
		t.Errorf("the child's journal breaks the invariants: %v", err)
	}
	for key, source := range want {
		found := false
		for _, e := range events {
			if e.Kind != agent.EventMessage || e.Message == nil || e.Message.Role != "user" || !strings.Contains(e.Message.Content, key) {
				continue
			}
			found = true
			if e.Source != source {
				t.Errorf("journal event %d holding %q has source kind %q, want %q; its content:\n%s", e.Seq, key, e.Source, source, e.Message.Content)
			}
		}
		if !found {
			t.Errorf("no user message in the child's journal holds %q", key)
		}
	}
}

// ---- 5 -------------------------------------------------------------------

func TestStrangersCannotInterruptOrMessageAnothersChild(t *testing.T) {
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		if req.LastUserText() == "alice's long task" {
			return fakeopenai.Reply{Text: "slow", Delay: 30 * time.Second}
		}
		return fakeopenai.Reply{Text: "answer to " + req.LastUserText()}
	})
	defer fake.Close()
	alice, bob := aliceAndBob(t, fake)
	ctx := testCtx(t)

	h, _ := startBackground(t, alice, ctx, "alice's work", "alice's long task")
	if !waitFor(5*time.Second, func() bool { return len(fake.Requests()) == 1 }) {
		t.Fatal("the child never called the model")
	}
	_, rows := callList(t, alice, ctx, nil)
	if r, _ := rowOf(rows, h.AgentID); r.Parent != "principal:alice" || r.Status != "running" {
		t.Errorf("alice's row = %+v", r)
	}

	res, _ := callSend(t, bob, ctx, h.AgentID, "bob's hijack", 0)
	if !res.IsError || !strings.Contains(text(res), "UNAUTHORIZED") {
		t.Errorf("bob's send_message: isError %v, %q; want UNAUTHORIZED", res.IsError, text(res))
	}
	res = bob.call(t, ctx, "interrupt_agent", map[string]any{"agent_id": h.AgentID})
	if !res.IsError || !strings.Contains(text(res), "UNAUTHORIZED") {
		t.Errorf("bob's interrupt_agent: isError %v, %q; want UNAUTHORIZED", res.IsError, text(res))
	}
	for _, scope := range []string{"children", "descendants"} {
		_, rows := callList(t, bob, ctx, map[string]any{"scope": scope})
		if _, ok := rowOf(rows, h.AgentID); ok || len(rows) != 0 {
			t.Errorf("bob's list_agents (%s) shows %+v", scope, rows)
		}
	}
	// Bob's interrupt changed nothing (the log, read in order once alice's
	// interrupt is in it, shows whose interrupts were carried out).
	_, rows = callList(t, alice, ctx, nil)
	if r, _ := rowOf(rows, h.AgentID); r.Status != "running" || turnEndedAborted(alice.stderr.String(), h.AgentID) {
		t.Errorf("after bob's interrupt alice's child is %+v", r)
	}

	res, sent := callSend(t, alice, ctx, h.AgentID, "alice's follow-up", 0)
	if res.IsError || sent.Route != "queued" {
		t.Errorf("alice's send_message: %s %+v", text(res), sent)
	}
	res = alice.call(t, ctx, "interrupt_agent", map[string]any{"agent_id": h.AgentID})
	var acc struct {
		Accepted bool `json:"accepted"`
	}
	if !res.IsError {
		decodeSC(t, res, &acc)
	}
	if res.IsError || !acc.Accepted {
		t.Errorf("alice's interrupt_agent: %s", text(res))
	}
	if !waitFor(2*time.Second, func() bool { return turnEndedAborted(alice.stderr.String(), h.AgentID) }) {
		t.Error("alice's interrupt did not abort the turn")
	}
	if by := interruptsOf(alice.stderr.String(), h.AgentID); strings.Join(by, ",") != "principal:alice" {
		t.Errorf("interrupts carried out on alice's child, by caller: %q; want alice's only", by)
	}
	if reqs := requestsWhere(fake, func(r fakeopenai.Request) bool { return strings.Contains(r.LastUserText(), "bob") }); len(reqs) != 0 {
		t.Errorf("bob's message reached the child")
	}
}

// ---- 6 -------------------------------------------------------------------

func TestNestedChildrenThreeDeepAreListedAsDescendants(t *testing.T) {
	next := map[string]string{"level 1": "level 2", "level 2": "level 3"}
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		p := firstUser(req)
		// Delegate on the prompt's own turn only; later turns (the
		// grandchild's settlement notice) are just acknowledged.
		if deeper, ok := next[p]; ok && turnStart(req) && req.LastUserText() == p {
			return callTool("subagent", map[string]any{"description": "work at " + deeper, "prompt": deeper, "run_in_background": true})
		}
		return fakeopenai.Reply{Text: p + " done"}
	})
	defer fake.Close()
	s := start(t, fake, serverOpts{})
	ctx := testCtx(t)
	a, _ := startBackground(t, s, ctx, "work at level 1", "level 1")

	// The ids each parent was handed, read from the tool results.
	idFrom := func(prompt string) string {
		for _, r := range fake.Requests() {
			if firstUser(r) == prompt && lastCall(r) == "subagent" {
				if tr, ok := r.LastToolResult(); ok {
					return agentIDRe.FindString(tr)
				}
			}
		}
		return ""
	}
	var b, c string
	if !waitFor(8*time.Second, func() bool { b, c = idFrom("level 1"), idFrom("level 2"); return b != "" && c != "" }) {
		t.Fatalf("the nested starts did not happen; requests:\n%s", dumpAll(fake))
	}
	var rows []rowSC
	waitFor(3*time.Second, func() bool {
		_, rows = callList(t, s, ctx, map[string]any{"scope": "descendants"})
		return len(rows) == 3
	})
	want := []rowSC{
		{Kind: "child", ID: a.AgentID, Label: "work at level 1", Parent: "principal:local", Depth: 1, Provider: "spawn", LastStopReason: "completed", LastMessage: "level 1 done"},
		{Kind: "child", ID: b, Label: "work at level 2", Parent: a.AgentID, Depth: 2, Provider: "spawn", LastStopReason: "completed", LastMessage: "level 2 done"},
		{Kind: "child", ID: c, Label: "work at level 3", Parent: b, Depth: 3, Provider: "spawn", LastStopReason: "completed", LastMessage: "level 3 done"},
	}
	if len(rows) != 3 {
		t.Fatalf("descendants = %+v, want 3 rows", rows)
	}
	for i, w := range want {
		g := rows[i]
		g.Status = ""
		if g.LastStopReason == "" && rows[i].Status == "running" {
			w.LastStopReason, w.LastMessage = "", "" // its first turn has not ended yet
		}
		if g != w {
			t.Errorf("descendant %d = %+v, want %+v", i, rows[i], w)
		}
		if s := rows[i].Status; s != "running" && s != "idle" && s != "ready" {
			t.Errorf("descendant %d status %q", i, s)
		}
	}
	_, rows = callList(t, s, ctx, map[string]any{"scope": "children"})
	if len(rows) != 1 || rows[0].ID != a.AgentID {
		t.Errorf("children = %+v, want only %s", rows, a.AgentID)
	}
	_, rows = callList(t, s, ctx, nil)
	if len(rows) != 1 || rows[0].ID != a.AgentID {
		t.Errorf("default scope = %+v, want only %s", rows, a.AgentID)
	}
}

// ---- 7 -------------------------------------------------------------------

func TestForkChildSeesCompletedTurnsNotTheTurnInFlight(t *testing.T) {
	const (
		remember = "remember the word PAPAYA"
		noted    = "Noted: PAPAYA."
		inFlight = "now ask a fork which word it was"
		forkTask = "fork: which word did I ask you to remember?"
	)
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		switch req.LastUserText() {
		case remember:
			return fakeopenai.Reply{Text: noted}
		case inFlight:
			if turnStart(req) {
				return callTool("subagent", map[string]any{"provider": "fork", "description": "ask a fork", "prompt": forkTask})
			}
			out, _ := req.LastToolResult()
			return fakeopenai.Reply{Text: "the fork said: " + out}
		case forkTask:
			return fakeopenai.Reply{Text: "The word is PAPAYA."}
		}
		return fakeopenai.Reply{Text: "unexpected"}
	})
	defer fake.Close()
	s := start(t, fake, serverOpts{})
	ctx := testCtx(t)

	t.Run("from an agent", func(t *testing.T) {
		p, early := startBackground(t, s, ctx, "remember a word", remember)
		got := awaitNotices(t, s, ctx, 8*time.Second, early, func(ns []string) bool { return countWith(ns, p.AgentID) > 0 })
		if countWith(got, noted) != 1 {
			t.Fatalf("P's first epoch notices = %q", got)
		}
		res, sent := callSend(t, s, ctx, p.AgentID, inFlight, 15)
		if res.IsError || sent.Outcome == nil {
			t.Fatalf("send_message: %s %+v\nrequests:\n%s", text(res), sent, dumpAll(fake))
		}
		if sent.Outcome.Output != "the fork said: The word is PAPAYA." {
			t.Errorf("P's answer = %q", sent.Outcome.Output)
		}
		forks := requestsWhere(fake, func(r fakeopenai.Request) bool { return r.LastUserText() == forkTask })
		if len(forks) != 1 {
			t.Fatalf("%d fork requests", len(forks))
		}
		conv := nonSystem(forks[0])
		if !sameConversation(conv, []convMsg{{"user", remember}, {"assistant", noted}, {"user", forkTask}}) {
			t.Errorf("the fork's first request:\n%swant P's completed turn and then the fork's prompt", dumpConversation(conv))
		}
		for _, m := range conv {
			if strings.Contains(m.Content, inFlight) || len(m.ToolCalls) > 0 {
				t.Errorf("the fork saw P's turn in flight: %s %q %v", m.Role, m.Content, m.ToolCalls)
			}
		}
	})

	t.Run("from the root client", func(t *testing.T) {
		before := len(fake.Requests())
		for _, bg := range []bool{false, true} {
			res := s.call(t, ctx, "subagent", map[string]any{"provider": "fork", "description": "fork from root", "prompt": "anything", "run_in_background": bg})
			if !res.IsError {
				t.Errorf("fork from the root (background %v) was accepted: %s", bg, text(res))
				continue
			}
			if got := text(res); !strings.Contains(got, "fork") || !strings.Contains(got, "conversation") {
				t.Errorf("fork from the root (background %v): %q does not explain that fork needs an agent with a conversation", bg, got)
			}
		}
		if n := len(fake.Requests()); n != before {
			t.Errorf("a refused fork reached the model")
		}
		_, rows := callList(t, s, ctx, nil)
		for _, r := range rows {
			if r.Label == "fork from root" {
				t.Errorf("a refused fork left a child behind: %+v", r)
			}
		}
	})
}

// ---- 8 -------------------------------------------------------------------

func TestCrashMidTurnLeavesAResumableChild(t *testing.T) {
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		switch req.LastUserText() {
		case "first task":
			return fakeopenai.Reply{Text: "first answer"}
		case "second task":
			return fakeopenai.Reply{Text: "never", Delay: 60 * time.Second}
		}
		return fakeopenai.Reply{Text: "answer to " + req.LastUserText()}
	})
	defer fake.Close()
	s := start(t, fake, serverOpts{http: true})
	proc := s.proc
	ctx := testCtx(t)
	h, early := startBackground(t, s, ctx, "survive a crash", "first task")
	if got := awaitNotices(t, s, ctx, 8*time.Second, early, func(ns []string) bool { return len(ns) > 0 }); countWith(got, "first answer") != 1 {
		t.Fatalf("first epoch notices = %q", got)
	}
	res, sent := callSend(t, s, ctx, h.AgentID, "second task", 0)
	if res.IsError || sent.Route != "resumed" {
		t.Fatalf("second task: %s %+v", text(res), sent)
	}
	if !waitFor(5*time.Second, func() bool {
		return len(requestsWhere(fake, func(r fakeopenai.Request) bool { return r.LastUserText() == "second task" })) == 1
	}) {
		t.Fatal("the second turn never reached the model")
	}
	// Journal events are written off the turn's path; the package documents
	// that a crash may lose the last few milliseconds. Kill the server only
	// once it logged the commit of the second task's message.
	tr, err := readTranscriptOn(ctx, s, h.AgentID)
	if err != nil {
		t.Fatalf("reading the transcript: %v", err)
	}
	var second int64 = -1
	for _, e := range tr.Entries {
		if e.Kind == "message" && e.Text == "second task" {
			second = e.Seq
		}
	}
	if second < 0 {
		t.Fatalf("the resident transcript holds no \"second task\" message: %+v", tr.Entries)
	}
	if !waitFor(10*time.Second, func() bool { return journalCommitted(s.stderr.String(), h.AgentID) > second }) {
		t.Fatalf("the server never logged the commit of journal event %d of %s; stderr:\n%s", second, h.AgentID, s.stderr)
	}
	proc.kill()

	s2 := start(t, fake, serverOpts{dataDir: s.dataDir, workspace: s.workspace})
	res, rows := callList(t, s2, ctx, nil)
	if r, ok := rowOf(rows, h.AgentID); !ok || r.Kind != "child" || r.Status != "ready" {
		t.Errorf("after the crash the child is %+v (found %v), want ready", r, ok)
	}
	settled := notices(res, "subagent-settled")
	if len(settled) != 1 || !strings.Contains(settled[0], "Background subagent "+h.AgentID+" was stopped before it finished") {
		t.Errorf("in-band notices on the first call after the restart = %q (all content %q)", settled, text(res))
	}
	res, sent = callSend(t, s2, ctx, h.AgentID, "resume please", 10)
	if res.IsError || sent.Outcome == nil {
		t.Fatalf("resume: %s %+v", text(res), sent)
	}
	if sent.Route != "resumed" || sent.Outcome.Output != "answer to resume please" {
		t.Errorf("resume = %+v, outcome %+v", sent, sent.Outcome)
	}
	if ns := notices(res, "subagent-settled"); countWith(ns, "was stopped before it finished") != 0 {
		t.Errorf("the crash notice was delivered again: %q", ns)
	}
	resumed := requestsWhere(fake, func(r fakeopenai.Request) bool { return r.LastUserText() == "resume please" })
	if len(resumed) != 1 {
		t.Fatalf("%d requests for the resumed turn", len(resumed))
	}
	want := []convMsg{{"user", "first task"}, {"assistant", "first answer"}, {"user", "second task"}, {"user", "resume please"}}
	if got := nonSystem(resumed[0]); !sameConversation(got, want) {
		t.Errorf("the resumed turn's request:\n%swant the whole history", dumpConversation(got))
	}

	s2.stop(t)
	st := openStore(t, s.dataDir)
	events, err := st.Events(context.Background(), h.AgentID)
	if err != nil {
		t.Fatalf("reading the journal: %v", err)
	}
	if err := agent.Validate(events); err != nil {
		t.Errorf("the journal after crash and resume breaks the invariants: %v", err)
	}
	var stops []agent.StopReason
	for _, e := range events {
		if e.Kind == agent.EventTurnEnd {
			stops = append(stops, e.StopReason)
		}
	}
	if fmt.Sprint(stops) != "[completed aborted completed]" {
		t.Errorf("turn outcomes in the journal = %v, want [completed aborted completed]", stops)
	}
	if hdr, err := st.Header(context.Background(), h.AgentID); err != nil || hdr.Depth != 1 || hdr.Parent != "principal:local" {
		t.Errorf("header = %+v, %v", hdr, err)
	}
	if active, err := st.Residents(context.Background()); err != nil || len(active) != 0 {
		t.Errorf("active marks after a clean stop = %v, %v", active, err)
	}
}

// ---- 9 -------------------------------------------------------------------

func TestCorruptDescriptorIsListedAsDiagnosticAndNotResumable(t *testing.T) {
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		return fakeopenai.Reply{Text: "answer to " + req.LastUserText()}
	})
	defer fake.Close()
	s := start(t, fake, serverOpts{})
	ctx := testCtx(t)
	bad, early1 := startBackground(t, s, ctx, "will be corrupted", "task one")
	good, early2 := startBackground(t, s, ctx, "stays healthy", "task two")
	got := awaitNotices(t, s, ctx, 8*time.Second, append(early1, early2...), func(ns []string) bool { return len(filterNotices(ns, "subagent-settled")) >= 2 })
	if countWith(got, bad.AgentID) != 1 || countWith(got, good.AgentID) != 1 {
		t.Fatalf("settlement notices = %q", got)
	}
	s.stop(t)

	db, err := bolt.Open(filepath.Join(s.dataDir, persist.FileName), 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("descriptors"))
		if b == nil || b.Get([]byte(bad.AgentID)) == nil {
			return fmt.Errorf("no descriptor stored for %s", bad.AgentID)
		}
		return b.Put([]byte(bad.AgentID), []byte(`{"version":1,"mode":"contin`))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	s2 := start(t, fake, serverOpts{dataDir: s.dataDir, workspace: s.workspace})
	for _, scope := range []string{"children", "descendants"} {
		res, rows := callList(t, s2, ctx, map[string]any{"scope": scope})
		if len(rows) != 2 {
			t.Fatalf("%s: rows = %+v, want 2", scope, rows)
		}
		if r, _ := rowOf(rows, bad.AgentID); r.Kind != "diagnostic" || r.Reason != "corrupt" {
			t.Errorf("%s: corrupt child's row = %+v, want a diagnostic row with reason corrupt", scope, r)
		}
		if r, _ := rowOf(rows, good.AgentID); r.Kind != "child" || r.Status != "ready" || r.Label != "stays healthy" {
			t.Errorf("%s: healthy sibling's row = %+v", scope, r)
		}
		if !strings.Contains(text(res), bad.AgentID+" [corrupt]") {
			t.Errorf("%s: list text = %q", scope, text(res))
		}
	}
	res, _ := callSend(t, s2, ctx, bad.AgentID, "are you there?", 5)
	if !res.IsError || !strings.Contains(text(res), "NOT_RESUMABLE") {
		t.Errorf("send_message to the corrupt child: isError %v, %q; want NOT_RESUMABLE", res.IsError, text(res))
	}
	if n := len(requestsWhere(fake, func(r fakeopenai.Request) bool { return r.LastUserText() == "are you there?" })); n != 0 {
		t.Errorf("the corrupt child ran a turn")
	}
	res, sent := callSend(t, s2, ctx, good.AgentID, "still fine?", 10)
	if res.IsError || sent.Outcome == nil || sent.Outcome.Output != "answer to still fine?" {
		t.Errorf("the healthy sibling did not resume: %s %+v", text(res), sent)
	}
}

// Two sessions of one principal (two clients on one HTTP server without
// tokens, both "local"): a child's notice is its originating session's
// while that session is connected, and the other session's once it ends.
func TestNoticesGoToTheSessionThatStartedTheChild(t *testing.T) {
	first, second := newGate(), newGate()
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		if strings.Contains(req.LastUserText(), "second") {
			second.wait(20 * time.Second)
			return fakeopenai.Reply{Text: "second child done"}
		}
		first.wait(20 * time.Second)
		return fakeopenai.Reply{Text: "first child done"}
	})
	defer fake.Close()
	defer first.open()
	defer second.open()
	a := start(t, fake, serverOpts{http: true})
	b := connectHTTP(t, a.url, a.token, a.stderr)
	ctx := testCtx(t)

	h1, _ := startBackground(t, a, ctx, "first job", "Do the first job.")
	first.open()
	var stolen []string
	if !waitFor(10*time.Second, func() bool {
		res, rows := callList(t, b, ctx, nil)
		stolen = append(stolen, notices(res, "")...)
		r, _ := rowOf(rows, h1.AgentID)
		return r.Status == "ready"
	}) {
		t.Fatal("the first child never settled")
	}
	res, _ := callList(t, b, ctx, map[string]any{"wait_seconds": 0.3})
	stolen = append(stolen, notices(res, "")...)
	if len(stolen) != 0 {
		t.Errorf("the other session of the principal got the notice: %q", stolen)
	}
	res, _ = callList(t, a, ctx, nil)
	if ns := notices(res, "subagent-settled"); len(ns) != 1 || !strings.Contains(ns[0], "first child done") {
		t.Errorf("the originating session's notices = %q; want the first child's settlement", ns)
	}

	// The originating session ends before its child settles: the notice
	// goes to the principal's next session that calls.
	h2, _ := startBackground(t, a, ctx, "second job", "Do the second job.")
	a.client.Close()
	second.open()
	res, _ = callList(t, b, ctx, map[string]any{"wait_seconds": 10})
	ns := notices(res, "subagent-settled")
	if len(ns) != 1 || !strings.Contains(ns[0], h2.AgentID) || !strings.Contains(ns[0], "second child done") {
		t.Errorf("after the originating session ended, the other session got %q; want the second child's settlement", ns)
	}
}

// A client that cancels tool calls on a fixed timer (Codex: 60 s) gets
// every wait bounded below it, chosen by its clientInfo.name: a foreground
// call hands back a running handle and the child goes on; a long
// list_agents wait returns in time.
func TestWaitsAreBoundedPerClient(t *testing.T) {
	release := newGate()
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		release.wait(30 * time.Second)
		return fakeopenai.Reply{Text: "slow answer"}
	})
	defer fake.Close()
	defer release.open()
	// The harness's client is named "e2e".
	s := start(t, fake, serverOpts{config: `{"client_wait_seconds": {"e2e": 0.5}}`})
	ctx := testCtx(t)
	res := s.call(t, ctx, "subagent", map[string]any{"description": "slow job", "prompt": "take your time"})
	var h handleSC
	decodeSC(t, res, &h)
	if res.IsError || h.Kind != "continuable" || h.Status != "running" {
		t.Fatalf("foreground call under the client's bound = %s %+v; want a running handle", text(res), h)
	}
	t0 := time.Now()
	res, _ = callList(t, s, ctx, map[string]any{"wait_seconds": 600})
	if d := time.Since(t0); d > 20*time.Second {
		t.Errorf("list_agents wait_seconds 600 took %v; the client's bound is 0.5 s", d)
	}
	if ns := notices(res, ""); len(ns) != 0 {
		t.Errorf("notices before the child settled: %q", ns)
	}
	release.open()
	got := awaitNotices(t, s, ctx, 10*time.Second, nil, func(ns []string) bool { return len(filterNotices(ns, "subagent-settled")) > 0 })
	if countWith(got, "slow answer") != 1 {
		t.Errorf("notices = %q; want the child's settlement with its answer", got)
	}
}

// An HTTP session is bound to the principal that created it: another
// principal presenting its id gets 404, as for an unknown session.
func TestAnHTTPSessionIsBoundToItsPrincipal(t *testing.T) {
	alice := startAlice(t, nil)
	post := func(token, session, body string) (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodPost, alice.url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := post(aliceTok, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("alice's initialize: %d, session %q, %s", resp.StatusCode, id, body)
	}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_agents","arguments":{}}}`
	if resp, body := post(bobTok, id, list); resp.StatusCode != http.StatusNotFound {
		t.Errorf("bob with alice's session id: %d %s; want 404", resp.StatusCode, body)
	}
	if resp, body := post(aliceTok, id, list); resp.StatusCode != http.StatusOK || strings.Contains(body, "UNAUTHORIZED") {
		t.Errorf("alice on her own session: %d %s", resp.StatusCode, body)
	}
}
