//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
)

// modelsConfig configures two models over two fake servers: main (the
// default, id main-id, $100 per Mtok both ways) and fast (id fast-id,
// $1000 in and $2000 out per Mtok, default effort low).
func modelsConfig(main, fast *fakeopenai.Server) string {
	return fmt.Sprintf(`{"providers": [], "models": [
		{"name": "main", "api": "openai", "base_url": %q, "api_key_env": "OPENAI_API_KEY", "model": "main-id",
		 "price": {"input_per_mtok": 100, "output_per_mtok": 100}},
		{"name": "fast", "api": "openai", "base_url": %q, "api_key_env": "OPENAI_API_KEY", "model": "fast-id", "effort": "low",
		 "price": {"input_per_mtok": 1000, "output_per_mtok": 2000}}]}`, main.URL(), fast.URL())
}

// modelReply answers on either fake: a prompt with DELEGATE first asks for a
// grandchild (on the default model), then answers with what it got; any
// other message is echoed with the model's name.
func modelReply(name string) fakeopenai.Handler {
	return func(_ int, req fakeopenai.Request) fakeopenai.Reply {
		last := req.Messages[len(req.Messages)-1]
		switch {
		case last.Role == "tool":
			return fakeopenai.Reply{Text: name + " got: " + last.Content}
		case strings.Contains(req.LastUserText(), "DELEGATE"):
			return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "subagent",
				Arguments: `{"description":"grandchild","prompt":"grand task"}`}}}
		}
		return fakeopenai.Reply{Text: name + ": " + req.LastUserText()}
	}
}

func effortOf(t *testing.T, r fakeopenai.Request) any {
	t.Helper()
	var body map[string]any
	if err := json.Unmarshal(r.Raw, &body); err != nil {
		t.Fatal(err)
	}
	return body["reasoning_effort"]
}

type usageSC struct {
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd"`
}

// A subagent call's model reaches the configured server with its model id
// and the call's effort; a follow-up and a cold resume after a daemon
// restart stay on it; priced usage carries cost_usd, summed in
// tree_usage; an unknown model names the field and the choices;
// list_agents shows the model; the schema lists the names.
func TestModelPerCallThroughTheBinary(t *testing.T) {
	main := fakeopenai.New(modelReply("main"))
	defer main.Close()
	fast := fakeopenai.New(modelReply("fast"))
	defer fast.Close()
	cfg := modelsConfig(main, fast)
	s := start(t, nil, serverOpts{config: cfg})
	ctx := testCtx(t)

	if got := modelEnum(t, s); !slices.Equal(got, []string{"main", "fast"}) {
		t.Errorf("the model enum = %v, want [main fast]", got)
	}

	res := s.call(t, ctx, "subagent", map[string]any{"description": "fast child", "prompt": "DELEGATE please",
		"model": "fast", "effort": "high"})
	if res.IsError {
		t.Fatalf("subagent: %s", text(res))
	}
	var fg struct {
		AgentID   string   `json:"agent_id"`
		Output    string   `json:"output"`
		Usage     usageSC  `json:"usage"`
		TreeUsage *usageSC `json:"tree_usage"`
	}
	decodeSC(t, res, &fg)
	if fg.Output != "fast got: main: grand task" {
		t.Errorf("output = %q; want the fast child's answer with its grandchild's (on main)", fg.Output)
	}
	fr := fast.Requests()
	if len(fr) != 2 {
		t.Fatalf("fast got %d requests, want 2 (the tool call and the answer)", len(fr))
	}
	for i, r := range fr {
		if r.Model != "fast-id" || effortOf(t, r) != "high" {
			t.Errorf("fast request %d: model %q, reasoning_effort %v; want fast-id, high", i, r.Model, effortOf(t, r))
		}
	}
	if mr := main.Requests(); len(mr) != 1 || mr[0].Model != "main-id" || effortOf(t, mr[0]) != nil {
		t.Errorf("main requests = %d (the grandchild's, with no effort of its own), first %+v", len(mr), mr)
	}
	// The fake reports 10 in and 5 out per call: fast's two calls cost
	// 2 × (10×1000 + 5×2000)/1e6 = 0.04, main's one (10+5)×100/1e6 = 0.0015.
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(fg.Usage.CostUSD, 0.04) || fg.TreeUsage == nil || !near(fg.TreeUsage.CostUSD, 0.0415) {
		t.Errorf("usage %+v, tree_usage %+v; want cost_usd 0.04 and 0.0415", fg.Usage, fg.TreeUsage)
	}

	bad := s.call(t, ctx, "subagent", map[string]any{"description": "bad", "prompt": "p", "model": "gpt-9"})
	if got := text(bad); !bad.IsError || !strings.Contains(got, `Error: INVALID_REQUEST: field "model"`) || !strings.Contains(got, "main, fast") {
		t.Errorf("unknown model: %s", got)
	}

	listRes := s.call(t, ctx, "list_agents", map[string]any{})
	var list struct {
		Agents []struct {
			ID    string `json:"id"`
			Model string `json:"model"`
		} `json:"agents"`
	}
	decodeSC(t, listRes, &list)
	if len(list.Agents) != 1 || list.Agents[0].ID != fg.AgentID || list.Agents[0].Model != "fast" {
		t.Errorf("list_agents rows = %+v, want the child with model fast", list.Agents)
	}

	followup := func(s *instance, msg, route string) {
		t.Helper()
		res, sent := callSend(t, s, ctx, fg.AgentID, msg, 30)
		if res.IsError || route != "" && sent.Route != route || sent.Outcome == nil || sent.Outcome.Output != "fast: "+msg {
			t.Fatalf("send_message %q: %s %+v; want route %s answered by fast", msg, text(res), sent, route)
		}
		last := fast.Requests()[len(fast.Requests())-1]
		if last.Model != "fast-id" || effortOf(t, last) != "high" {
			t.Errorf("%q went as model %q, reasoning_effort %v; want fast-id, high", msg, last.Model, effortOf(t, last))
		}
	}
	followup(s, "and again", "") // woken or resumed: the child may have settled
	s.stop(t)
	s2 := start(t, nil, serverOpts{config: cfg, dataDir: s.dataDir, workspace: s.workspace})
	followup(s2, "after the restart", "resumed")
	_, rows := callList(t, s2, ctx, nil)
	if r, ok := rowOf(rows, fg.AgentID); !ok || r.Status != "ready" && r.Status != "idle" {
		t.Errorf("after the restart the child is %+v (found %v)", r, ok)
	}
	if n := len(main.Requests()); n != 1 {
		t.Errorf("main got %d requests; a follow-up or a resume moved the child off fast", n)
	}
}

// modelEnum is the model names the subagent tool lists for s's session
// (its published input schema's model enum).
func modelEnum(t *testing.T, s *instance) []string {
	t.Helper()
	tools, err := s.client.ListTools(testCtx(t), mcpListTools())
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools.Tools {
		if tl.Name != "subagent" {
			continue
		}
		var schema struct {
			Properties map[string]struct {
				Enum []string `json:"enum"`
			} `json:"properties"`
		}
		raw, _ := json.Marshal(tl.InputSchema)
		if err := json.Unmarshal(raw, &schema); err != nil {
			t.Fatal(err)
		}
		return schema.Properties["model"].Enum
	}
	t.Fatal("no subagent tool listed")
	return nil
}
