package spawn_test

import (
	"context"
	"encoding/json"
	"errors"
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

// twoModels is a manager whose spawn and fork run on two models, each
// behind its own fake server: "main" (the default, id main-id) and "fast"
// (id fast-id, default effort low).
func twoModels(t *testing.T, store seam.Store) (main, fast *fakeopenai.Server, m *manager.Manager) {
	t.Helper()
	main = fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "from main"}))
	fast = fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "from fast"}))
	t.Cleanup(main.Close)
	t.Cleanup(fast.Close)
	client := func(s *fakeopenai.Server) llm.Client {
		return openai.New(transport.Config{BaseURL: s.URL(), APIKey: "k", RetryBaseDelay: time.Millisecond})
	}
	opts := spawn.Options{Models: []spawn.Model{
		{Name: "main", Client: client(main), ID: "main-id"},
		{Name: "fast", Client: client(fast), ID: "fast-id", MaxTokens: 77, Effort: llm.EffortLow},
	}}
	m = manager.New(manager.Options{Store: store})
	for _, p := range []seam.Provider{spawn.New(opts), spawn.NewFork(opts)} {
		if err := m.Register(p); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return main, fast, m
}

func runChild(t *testing.T, m *manager.Manager, provider string, req seam.StartRequest) seam.Result {
	t.Helper()
	st, err := m.StartContinuable(context.Background(), provider, req, true)
	if err != nil {
		t.Fatal(err)
	}
	return waitTurn(t, st)
}

// waitTurn waits for a started child's first turn to end.
func waitTurn(t *testing.T, st *manager.Started) seam.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, ok := st.Wait(ctx)
	if !ok {
		t.Fatal("the child's turn did not end")
	}
	return res
}

func rawField(t *testing.T, req fakeopenai.Request, name string) any {
	t.Helper()
	var body map[string]any
	if err := json.Unmarshal(req.Raw, &body); err != nil {
		t.Fatal(err)
	}
	return body[name]
}

// A request's model picks the server and the model id; effort is the
// request's, else the model's default; max_tokens is the model's.
func TestAChildRunsOnTheModelItsRequestNames(t *testing.T) {
	main, fast, m := twoModels(t, memstore.New())
	caller := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}

	if res := runChild(t, m, "spawn", seam.StartRequest{Label: "l", Prompt: "p", Parent: caller}); res.Output != "from main" {
		t.Fatalf("default model answered %+v", res)
	}
	if res := runChild(t, m, "spawn", seam.StartRequest{Label: "l", Prompt: "p", Parent: caller, Model: "fast"}); res.Output != "from fast" {
		t.Fatalf("model fast answered %+v", res)
	}
	if res := runChild(t, m, "spawn", seam.StartRequest{Label: "l", Prompt: "p", Parent: caller, Model: "fast", Effort: seam.Effort(llm.EffortHigh)}); res.Output != "from fast" {
		t.Fatalf("model fast answered %+v", res)
	}
	mr, fr := main.Requests(), fast.Requests()
	if len(mr) != 1 || len(fr) != 2 {
		t.Fatalf("requests: main %d, fast %d; want 1 and 2", len(mr), len(fr))
	}
	if mr[0].Model != "main-id" || rawField(t, mr[0], "reasoning_effort") != nil {
		t.Errorf("main request: model %q, reasoning_effort %v", mr[0].Model, rawField(t, mr[0], "reasoning_effort"))
	}
	for i, want := range []string{"low", "high"} {
		if fr[i].Model != "fast-id" || rawField(t, fr[i], "reasoning_effort") != want || rawField(t, fr[i], "max_tokens") != 77.0 {
			t.Errorf("fast request %d: model %q, reasoning_effort %v, max_tokens %v; want fast-id, %s, 77",
				i, fr[i].Model, rawField(t, fr[i], "reasoning_effort"), rawField(t, fr[i], "max_tokens"), want)
		}
	}
}

// An unknown name is refused before anything starts, naming the field
// and the choices; a model id is not a name.
func TestAnUnknownModelIsRefusedWithTheChoices(t *testing.T) {
	main, fast, m := twoModels(t, memstore.New())
	caller := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
	for _, name := range []string{"gpt-9", "fast-id"} {
		_, err := m.StartContinuable(context.Background(), "spawn", seam.StartRequest{Label: "l", Prompt: "p", Parent: caller, Model: name}, true)
		var me *seam.Error
		if !errors.As(err, &me) || me.Code != seam.CodeInvalidRequest ||
			!strings.Contains(me.Message, `field "model"`) || !strings.Contains(me.Message, "main, fast") {
			t.Errorf("model %q: %v; want INVALID_REQUEST naming the field and the choices", name, err)
		}
	}
	if n := len(main.Requests()) + len(fast.Requests()); n != 0 {
		t.Errorf("%d model requests for refused starts", n)
	}
}

// A fork child runs on its parent's model unless its request names one.
func TestAForkRunsOnItsParentsModel(t *testing.T) {
	main, fast, m := twoModels(t, memstore.New())
	parent, err := agent.NewJournal(nil)
	if err != nil {
		t.Fatal(err)
	}
	caller := seam.ParentRef{Principal: "p", AgentID: "agent-parent", Depth: 1, Cwd: t.TempDir(), Model: "fast",
		CompletedTurns: parent.CompletedPrefix}
	if res := runChild(t, m, "fork", seam.StartRequest{Label: "l", Prompt: "p", Parent: caller}); res.Output != "from fast" {
		t.Errorf("a fork of a fast parent answered %+v", res)
	}
	if res := runChild(t, m, "fork", seam.StartRequest{Label: "l", Prompt: "p", Parent: caller, Model: "main"}); res.Output != "from main" {
		t.Errorf("a fork asked for main answered %+v", res)
	}
	if len(main.Requests()) != 1 || len(fast.Requests()) != 1 {
		t.Errorf("requests: main %d, fast %d; want 1 each", len(main.Requests()), len(fast.Requests()))
	}
}

// storeChild writes a stored, settled spawn child whose descriptor names
// model, as an earlier run (or an earlier build) left it.
func storeChild(t *testing.T, store seam.Store, model string) seam.Header {
	t.Helper()
	hdr := seam.Header{ID: manager.NewID(), Parent: seam.PrincipalAddress("local"), Principal: "local",
		Depth: 1, DepthCap: 3, Mode: seam.ModeContinuable, Provider: "spawn", Label: "old", Cwd: t.TempDir(),
		CreatedAt: time.Now()}
	desc := seam.Descriptor{Version: seam.DescriptorVersion, Mode: seam.ModeContinuable, Provider: "spawn",
		Label: "old", Model: model}
	if err := store.WriteChild(context.Background(), hdr.ID, seam.ChildWrite{Create: &seam.NewChild{Header: hdr, Descriptor: desc}}); err != nil {
		t.Fatal(err)
	}
	return hdr
}

func followup(t *testing.T, m *manager.Manager, hdr seam.Header) (seam.Result, error) {
	t.Helper()
	sent, err := m.Followup(context.Background(), seam.ParentRef{Principal: "local", Cwd: hdr.Cwd}, hdr.ID, "go on", true)
	if err != nil {
		return seam.Result{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, ok := sent.Wait(ctx)
	if !ok {
		t.Fatal("the follow-up's turn did not end")
	}
	return res, nil
}

// A cold resume runs on the stored model; one no longer configured is
// NOT_RESUMABLE naming it, and no model is called; a descriptor from
// before models had names (it recorded the id) finds its model by id.
func TestAColdResumeKeepsItsModelOrRefuses(t *testing.T) {
	store := memstore.New()
	main, fast, m := twoModels(t, store)
	if res, err := followup(t, m, storeChild(t, store, "fast")); err != nil || res.Output != "from fast" {
		t.Errorf("resuming a fast child: %+v, %v", res, err)
	}
	if res, err := followup(t, m, storeChild(t, store, "fast-id")); err != nil || res.Output != "from fast" {
		t.Errorf("resuming a child that recorded the id fast-id: %+v, %v", res, err)
	}
	_, err := followup(t, m, storeChild(t, store, "retired"))
	var me *seam.Error
	if !errors.As(err, &me) || me.Code != seam.CodeNotResumable || !strings.Contains(me.Message, `"retired" is no longer configured`) {
		t.Errorf("resuming a child of a retired model: %v; want NOT_RESUMABLE naming it", err)
	}
	if len(main.Requests()) != 0 || len(fast.Requests()) != 2 {
		t.Errorf("requests: main %d, fast %d; want 0 and 2", len(main.Requests()), len(fast.Requests()))
	}
}
