package spawn_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/llm/openai"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/providers/spawn"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// delegate is a stand-in delegation tool, so filters and names can be
// checked without the MCP layer.
type delegate struct{}

func (delegate) Def() llm.ToolDef {
	return llm.ToolDef{Name: "subagent", Description: "delegate", Parameters: json.RawMessage(`{"type":"object"}`)}
}
func (delegate) Call(context.Context, json.RawMessage) (string, error) { return "delegated", nil }

func newProviders(t *testing.T, h fakeopenai.Handler) (*fakeopenai.Server, *manager.Manager) {
	t.Helper()
	fake := fakeopenai.New(h)
	t.Cleanup(fake.Close)
	opts := spawn.Options{Client: openai.New(transport.Config{BaseURL: fake.URL(), APIKey: "k", RetryBaseDelay: time.Millisecond}),
		Model: "m", Persona: "DEPLOYMENT",
		DelegationTools: func(seam.ParentRef) []agent.Tool { return []agent.Tool{delegate{}} }}
	m := manager.New(manager.Options{Store: memstore.New()})
	for _, p := range []seam.Provider{spawn.New(opts), spawn.NewFork(opts)} {
		if err := m.Register(p); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return fake, m
}

func TestToolNamesIncludeWorkspaceAndDelegationTools(t *testing.T) {
	p := spawn.New(spawn.Options{DelegationTools: func(seam.ParentRef) []agent.Tool { return []agent.Tool{delegate{}} }})
	names := p.ToolNames()
	for _, want := range []string{"read_file", "list_dir", "search", "write_file", "subagent"} {
		if !slices.Contains(names, want) {
			t.Errorf("ToolNames() = %v, missing %s", names, want)
		}
	}
	if slices.Contains(names, "run_shell") {
		t.Error("run_shell listed without Shell")
	}
}

func TestForkRefusesARootCaller(t *testing.T) {
	_, m := newProviders(t, fakeopenai.Script(fakeopenai.Reply{Text: "ok"}))
	_, err := m.StartContinuable(context.Background(), "fork",
		seam.StartRequest{Label: "l", Prompt: "p", Parent: seam.ParentRef{Principal: "p", Cwd: t.TempDir()}}, true)
	if !errors.Is(err, seam.ErrInvalidRequest) || !strings.Contains(err.Error(), "use spawn instead") {
		t.Errorf("fork from a root caller: %v", err)
	}
}

// A fork child starts from its parent's completed turns only; its filter
// hides the delegation tool too; its persona replaces the deployment's.
func TestForkSeedFilterAndPersona(t *testing.T) {
	fake, m := newProviders(t, func(n int, req fakeopenai.Request) fakeopenai.Reply {
		return fakeopenai.Reply{Text: "answer to " + req.LastUserText()}
	})
	parent, err := agent.NewJournal(nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{Client: openai.New(transport.Config{BaseURL: fake.URL(), APIKey: "k", Model: "m"}), Journal: parent})
	if err != nil {
		t.Fatal(err)
	}
	if res := a.RunTurn(context.Background(), "remember PAPAYA", ""); res.StopReason != agent.StopCompleted {
		t.Fatal(res)
	}
	// A turn in flight: started, not ended.
	parent.Append(agent.Event{Kind: agent.EventTurnStart, Turn: 2})
	parent.Append(agent.Event{Kind: agent.EventMessage, Turn: 2, Source: agent.SourceUser,
		Message: &seam.Message{Role: seam.RoleUser, Content: "IN-FLIGHT"}})

	caller := seam.ParentRef{Principal: "p", AgentID: "agent-parent", Depth: 1, Cwd: t.TempDir(), CompletedTurns: parent.CompletedPrefix}
	st, err := m.StartContinuable(context.Background(), "fork", seam.StartRequest{Label: "l", Prompt: "forked task", Parent: caller,
		ToolFilter: &seam.ToolFilter{Deny: []string{"subagent"}}, Persona: "CHILD-PERSONA"}, true)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if res, ok := st.Wait(ctx); !ok || res.Output != "answer to forked task" {
		t.Fatalf("fork result = %+v, %v", res, ok)
	}
	reqs := fake.Requests()
	req := reqs[len(reqs)-1]
	var all []string
	for _, msg := range req.Messages {
		all = append(all, msg.Content)
	}
	joined := strings.Join(all, "|")
	if !strings.Contains(joined, "remember PAPAYA") || !strings.Contains(joined, "answer to remember PAPAYA") {
		t.Errorf("the fork's first request lacks the parent's completed turn: %q", joined)
	}
	if strings.Contains(joined, "IN-FLIGHT") {
		t.Errorf("the fork's first request contains the turn in flight: %q", joined)
	}
	if req.HasTool("subagent") || !req.HasTool("read_file") {
		t.Errorf("tools shown = %+v", req.Tools)
	}
	if sys := req.Messages[0].Content; !strings.Contains(sys, "CHILD-PERSONA") || strings.Contains(sys, "DEPLOYMENT") {
		t.Errorf("system prompt = %q", sys)
	}
}
