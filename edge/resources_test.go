package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// heldProvider runs continuable children whose turn journals its prompt,
// then one assistant message per value sent on say, until the turn is
// cancelled; said receives after each is journaled.
type heldProvider struct{ say, said chan string }

func (*heldProvider) Name() string                    { return "held" }
func (*heldProvider) Capabilities() seam.Capabilities { return seam.Capabilities{} }
func (*heldProvider) InheritsParentContext() bool     { return false }
func (*heldProvider) Continuable()                    {}
func (*heldProvider) Prepare(context.Context, seam.StartRequest) (seam.CreationInputs, error) {
	return seam.CreationInputs{}, nil
}
func (p *heldProvider) NewDriver(_ context.Context, r seam.DriverRequest) (seam.Driver, error) {
	return &heldDriver{p: p, j: r.Journal}, nil
}

type heldDriver struct {
	p *heldProvider
	j *agent.Journal
}

func (d *heldDriver) RunTurn(ctx context.Context, in []agent.Input) agent.TurnResult {
	turn := d.j.NextTurn()
	d.j.Append(agent.Event{Kind: agent.EventTurnStart, Turn: turn})
	for _, i := range in {
		d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: turn, Source: i.Source, Message: &seam.Message{Role: seam.RoleUser, Content: i.Text}})
	}
	for {
		select {
		case s := <-d.p.say:
			d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: turn, Message: &seam.Message{Role: seam.RoleAssistant, Content: s}})
			d.p.said <- s
		case <-ctx.Done():
			d.j.Append(agent.Event{Kind: agent.EventTurnEnd, Turn: turn, StopReason: agent.StopAborted})
			return agent.TurnResult{StopReason: agent.StopAborted}
		}
	}
}
func (d *heldDriver) Journal() *agent.Journal { return d.j }
func (*heldDriver) Close() error              { return nil }

// testSession is a registered MCP session whose notifications the test
// reads.
type testSession struct {
	id    string
	notes chan mcp.JSONRPCNotification
}

func (s *testSession) SessionID() string                                   { return s.id }
func (s *testSession) NotificationChannel() chan<- mcp.JSONRPCNotification { return s.notes }
func (*testSession) Initialize()                                           {}
func (*testSession) Initialized() bool                                     { return true }

// A subscription forwards its child's steps to its session and ends, its
// goroutine gone, on unsubscribe and when the session unregisters; a
// caller outside the child's lineage gets no subscription.
func TestTranscriptSubscriptionsEnd(t *testing.T) {
	p := &heldProvider{say: make(chan string), said: make(chan string)}
	mgr := manager.New(manager.Options{Store: memstore.New()})
	if err := mgr.Register(p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = mgr.Close(ctx)
	})
	root := t.TempDir()
	ts, err := New(mgr, Options{Roots: []string{root}, NoWorkingDirRoot: true})
	if err != nil {
		t.Fatal(err)
	}
	ms := server.NewMCPServer("test", "1", server.WithResourceCapabilities(true, false), server.WithHooks(ts.Hooks()))
	ts.Register(ms)
	ctx := context.Background()
	st, err := mgr.StartContinuable(ctx, "held", seam.StartRequest{Label: "held", Prompt: "hold", Parent: seam.ParentRef{Principal: "local", Cwd: root}}, false)
	if err != nil {
		t.Fatal(err)
	}
	uri := TranscriptURI(st.ChildID)

	sessions := map[string]*testSession{}
	rpc := func(principal, session, method string, params any) {
		t.Helper()
		se := sessions[session]
		if se == nil {
			se = &testSession{id: session, notes: make(chan mcp.JSONRPCNotification, 16)}
			sessions[session] = se
			if err := ms.RegisterSession(ctx, se); err != nil {
				t.Fatal(err)
			}
		}
		sctx := WithPrincipal(ms.WithContext(ctx, se), principal)
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
		if res, ok := ms.HandleMessage(sctx, b).(mcp.JSONRPCError); ok {
			t.Fatalf("%s: %+v", method, res.Error)
		}
	}
	// refused: a subscription the caller may not have is refused, not
	// acknowledged.
	refused := func(principal, session, uri string) {
		t.Helper()
		se := sessions[session]
		sctx := WithPrincipal(ms.WithContext(ctx, se), principal)
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "resources/subscribe", "params": map[string]any{"uri": uri}})
		if _, ok := ms.HandleMessage(sctx, b).(mcp.JSONRPCError); !ok {
			t.Fatalf("%s subscribed to %s; want a refusal", principal, uri)
		}
	}
	initialize := map[string]any{"protocolVersion": mcp.LATEST_LEGACY_PROTOCOL_VERSION, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"}}
	subs := func() int {
		ts.subs.mu.Lock()
		defer ts.subs.mu.Unlock()
		return len(ts.subs.m)
	}
	wantUpdate := func(se *testSession) {
		t.Helper()
		select {
		case n := <-se.notes:
			if n.Method != mcp.MethodNotificationResourceUpdated || n.Params.AdditionalFields["uri"] != uri {
				t.Fatalf("notification %+v, want an update of %s", n, uri)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no update")
		}
	}
	say := func(i int) { p.say <- fmt.Sprint("step ", i); <-p.said }
	say(0) // the turn has journaled its start: only later steps update

	rpc("local", "s1", "initialize", initialize)
	rpc("local", "s1", "resources/subscribe", map[string]any{"uri": uri})
	say(1)
	wantUpdate(sessions["s1"])
	rpc("local", "s1", "resources/unsubscribe", map[string]any{"uri": uri})
	if n := subs(); n != 0 {
		t.Fatalf("%d subscriptions after unsubscribe", n)
	}
	// The forwarder is gone (unsubscribe waited for it): nothing can send.
	say(2)
	if len(sessions["s1"].notes) != 0 {
		t.Fatal("an update after unsubscribe")
	}

	rpc("mallory", "s2", "initialize", initialize)
	refused("mallory", "s2", uri)
	if n := subs(); n != 0 {
		t.Fatalf("another principal holds %d subscriptions to the child", n)
	}

	rpc("local", "s3", "initialize", initialize)
	for _, u := range []string{"subagent://agents/no-such-child/transcript", "file:///etc/passwd", strings.Repeat("x", 5000)} {
		refused("local", "s3", u)
	}
	// Repeats of one URI hold one subscription.
	for range 100 {
		rpc("local", "s3", "resources/subscribe", map[string]any{"uri": uri})
	}
	if n := subs(); n != 1 {
		t.Fatalf("%d subscriptions after 100 of one URI; want 1", n)
	}
	say(3)
	wantUpdate(sessions["s3"])
	ms.UnregisterSession(ctx, "s3")
	if n := subs(); n != 0 {
		t.Fatalf("%d subscriptions after the session went", n)
	}
	say(4)
	for _, id := range []string{"s2", "s3"} {
		if n := len(sessions[id].notes); n != 0 {
			t.Fatalf("%d notifications to %s after the session went, or to a stranger: %+v", n, id, <-sessions[id].notes)
		}
	}
}
