package manager_test

import (
	"context"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// AwaitTurn, for a start made without waiting (a durable MCP task's): the
// turn's outcome comes in band, and the epoch's settlement is then not
// announced a second time; a start nobody awaits is announced. Once the
// child has settled, AwaitTurn reports the stored outcome.
func TestAwaitTurnAfterAStartWithoutWait(t *testing.T) {
	p := newGateProvider()
	m := manager.New(manager.Options{Store: memstore.New()})
	if err := m.Register(p); err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	rec, stop := record(m)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	root := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
	start := func() *manager.Started {
		t.Helper()
		st, err := m.StartContinuable(ctx, "gate", seam.StartRequest{Label: "l", Prompt: "work", Parent: root}, false)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	awaited := start()
	turn := m.AwaitTurn(awaited.ChildID, awaited.MessageID, nil)
	close(p.turn(t, awaited.ChildID).release)
	res, ok := turn.Wait(ctx)
	if !ok || res.StopReason != agent.StopCompleted || res.Output != "turn of "+awaited.ChildID {
		t.Fatalf("the awaited turn = %+v, %v; want its completed outcome in band", res, ok)
	}
	if err := turn.Committed(); err != nil {
		t.Fatal(err)
	}
	rec.waitEnd(t)

	plain := start()
	close(p.turn(t, plain.ChildID).release)
	rec.waitEnd(t)
	var from []string
	for _, n := range m.TakeNotices("p", "") {
		from = append(from, n.ChildID)
	}
	if len(from) != 1 || from[0] != plain.ChildID {
		t.Fatalf("settlement notices from %v, want only the unawaited child %s (the awaited one was answered in band)", from, plain.ChildID)
	}

	// Settled, no longer resident: the stored journal's last outcome.
	jp := journalingProvider{}
	if err := m.Register(jp); err != nil {
		t.Fatal(err)
	}
	st, err := m.StartContinuable(ctx, jp.Name(), seam.StartRequest{Label: "l", Prompt: "work", Parent: root}, false)
	if err != nil {
		t.Fatal(err)
	}
	rec.waitEnd(t)
	again, ok := m.AwaitTurn(st.ChildID, st.MessageID, nil).Wait(ctx)
	if !ok || again.StopReason != agent.StopCompleted || again.Output != "journaled answer" {
		t.Fatalf("AwaitTurn of a settled child = %+v, %v; want its stored completed outcome", again, ok)
	}
}

// journalingProvider's turns end at once, journaled as the agent loop
// journals them.
type journalingProvider struct{}

func (journalingProvider) Name() string                    { return "journaling" }
func (journalingProvider) Capabilities() seam.Capabilities { return seam.Capabilities{} }
func (journalingProvider) InheritsParentContext() bool     { return false }
func (journalingProvider) Continuable()                    {}
func (journalingProvider) Prepare(context.Context, seam.StartRequest) (seam.CreationInputs, error) {
	return seam.CreationInputs{}, nil
}
func (journalingProvider) NewDriver(_ context.Context, r seam.DriverRequest) (seam.Driver, error) {
	return journalingDriver{j: r.Journal}, nil
}

type journalingDriver struct{ j *agent.Journal }

func (d journalingDriver) RunTurn(context.Context, []agent.Input) agent.TurnResult {
	n := d.j.NextTurn()
	d.j.Append(agent.Event{Kind: agent.EventTurnStart, Turn: n})
	d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: n, Message: &seam.Message{Role: seam.RoleAssistant, Content: "journaled answer"}})
	d.j.Append(agent.Event{Kind: agent.EventTurnEnd, Turn: n, StopReason: agent.StopCompleted})
	return agent.TurnResult{Output: "journaled answer", StopReason: agent.StopCompleted}
}
func (d journalingDriver) Journal() *agent.Journal { return d.j }
func (journalingDriver) Close() error              { return nil }
