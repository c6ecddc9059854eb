package manager_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/managertest"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

func TestRegistry(t *testing.T) {
	t.Run("a second provider with the same name is refused as DUPLICATE_PROVIDER", func(t *testing.T) {
		m := newManager(t, manager.Options{}, &fakeProvider{name: "spawn"})
		err := m.Register(&fakeProvider{name: "spawn"})
		wantCode(t, err, seam.ErrDuplicateProvider)
		if !strings.Contains(err.Error(), `"spawn"`) {
			t.Errorf("error %q does not name the provider", err)
		}
		if got := len(m.Providers()); got != 1 {
			t.Errorf("Providers() has %d entries after a refused duplicate, want 1", got)
		}
	})
	t.Run("a provider without a name is refused", func(t *testing.T) {
		m := newManager(t, manager.Options{})
		wantCode(t, m.Register(&fakeProvider{name: ""}), seam.ErrInvalidRequest)
	})
	t.Run("providers are listed in registration order with their capabilities", func(t *testing.T) {
		m := newManager(t, manager.Options{},
			&fakeProvider{name: "spawn", caps: allCaps},
			&fakeProvider{name: "fork"},
			&fakeProvider{name: "codex", caps: seam.Capabilities{Persona: true}})
		var names []string
		for _, p := range m.Providers() {
			names = append(names, p.Name)
		}
		if got := strings.Join(names, ","); got != "spawn,fork,codex" {
			t.Errorf("Providers() = %s, want spawn,fork,codex", got)
		}
		if got := m.Providers()[2].Capabilities; got != (seam.Capabilities{Persona: true}) {
			t.Errorf("codex capabilities = %+v", got)
		}
	})
	t.Run("a start naming an unknown provider is NO_PROVIDER and lists the available ones", func(t *testing.T) {
		m := newManager(t, manager.Options{}, &fakeProvider{name: "spawn"}, &fakeProvider{name: "fork"})
		_, err := m.Start(context.Background(), "codex", prompt("hi"))
		wantCode(t, err, seam.ErrNoProvider)
		for _, want := range []string{`"codex"`, `"spawn"`, `"fork"`} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %s", err, want)
			}
		}
	})
	t.Run("a start with no providers registered says none are available", func(t *testing.T) {
		m := newManager(t, manager.Options{})
		_, err := m.Start(context.Background(), "spawn", prompt("hi"))
		wantCode(t, err, seam.ErrNoProvider)
		if !strings.Contains(err.Error(), "available: none") {
			t.Errorf("error %q does not say no provider is available", err)
		}
	})
}

func TestUnsupportedCapabilityIsRefusedBeforeStart(t *testing.T) {
	one := 2
	tests := []struct {
		name    string
		missing func(*seam.Capabilities)
		field   string
		set     func(*seam.StartRequest)
	}{
		{"an output schema needs OutputSchema", func(c *seam.Capabilities) { c.OutputSchema = false }, "output_schema",
			func(r *seam.StartRequest) { r.OutputSchema = json.RawMessage(`{"type":"object"}`) }},
		{"a max depth needs DepthLimit", func(c *seam.Capabilities) { c.DepthLimit = false }, "max_depth",
			func(r *seam.StartRequest) { r.MaxDepth = &one }},
		{"a tool filter needs ToolFilter", func(c *seam.Capabilities) { c.ToolFilter = false }, "tool_filter",
			func(r *seam.StartRequest) { r.ToolFilter = &seam.ToolFilter{Allow: []string{"read_file"}} }},
		{"a persona needs Persona", func(c *seam.Capabilities) { c.Persona = false }, "persona",
			func(r *seam.StartRequest) { r.Persona = "You are terse." }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			caps := allCaps
			tt.missing(&caps)
			p := &fakeProvider{name: "remote", caps: caps}
			m := newManager(t, manager.Options{}, p)
			req := prompt("do it")
			tt.set(&req)
			_, err := m.Start(context.Background(), "remote", req)
			wantCode(t, err, seam.ErrUnsupportedCapability)
			if !strings.Contains(err.Error(), tt.field) || !strings.Contains(err.Error(), `"remote"`) {
				t.Errorf("error %q does not name the field %s and the provider", err, tt.field)
			}
			var e *seam.Error
			if errors.As(err, &e) && e.Provider != "remote" {
				t.Errorf("Error.Provider = %q, want remote", e.Provider)
			}
			if n := len(p.calls()); n != 0 {
				t.Errorf("the provider was asked to prepare %d children", n)
			}

			// The same request is accepted by a provider that has every
			// capability: the refusal is the capability's, not the request's.
			full := &fakeProvider{name: "full", caps: allCaps}
			if err := m.Register(full); err != nil {
				t.Fatal(err)
			}
			run, err := m.Start(context.Background(), "full", req)
			if err != nil {
				t.Fatalf("a provider with every capability refused the request: %v", err)
			}
			run.Dispose()
		})
	}
}

func TestInvalidRequestsAreRefusedBeforeStart(t *testing.T) {
	tests := []struct {
		name     string
		set      func(*seam.StartRequest)
		contains []string
	}{
		{"an array-rooted output schema", func(r *seam.StartRequest) { r.OutputSchema = json.RawMessage(`{"type":"array"}`) },
			[]string{"output_schema", `"type": "object"`}},
		{"an output schema that is not JSON", func(r *seam.StartRequest) { r.OutputSchema = json.RawMessage(`{type: object`) },
			[]string{"output_schema"}},
		{"an output schema with a misspelt type", func(r *seam.StartRequest) { r.OutputSchema = json.RawMessage(`{"type":"objekt"}`) },
			[]string{"output_schema"}},
		{"an output schema without a root type", func(r *seam.StartRequest) { r.OutputSchema = json.RawMessage(`{"properties":{}}`) },
			[]string{"output_schema"}},
		{"a JSON array as output schema", func(r *seam.StartRequest) { r.OutputSchema = json.RawMessage(`[]`) },
			[]string{"output_schema"}},
		{"a tool filter naming unknown tools", func(r *seam.StartRequest) {
			r.ToolFilter = &seam.ToolFilter{Allow: []string{"read_file", "launch_missiles", "rm_rf"}}
		}, []string{`"launch_missiles"`, `"rm_rf"`, "read_file"}},
		{"a deny filter naming an unknown tool", func(r *seam.StartRequest) {
			r.ToolFilter = &seam.ToolFilter{Deny: []string{"nope"}}
		}, []string{`"nope"`}},
		{"a tool filter with both allow and deny", func(r *seam.StartRequest) {
			r.ToolFilter = &seam.ToolFilter{Allow: []string{"read_file"}, Deny: []string{"write_file"}}
		}, []string{"exactly one of allow or deny"}},
		{"a tool filter with neither allow nor deny", func(r *seam.StartRequest) {
			r.ToolFilter = &seam.ToolFilter{}
		}, []string{"exactly one of allow or deny"}},
		{"an empty prompt", func(r *seam.StartRequest) { r.Prompt = "" }, []string{"prompt"}},
		{"a negative max depth", func(r *seam.StartRequest) { d := -1; r.MaxDepth = &d }, []string{"max_depth"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := namedProvider{&fakeProvider{name: "spawn", caps: allCaps}, []string{"read_file", "write_file"}}
			m := newManager(t, manager.Options{}, p)
			req := prompt("do it")
			tt.set(&req)
			_, err := m.Start(context.Background(), "spawn", req)
			wantCode(t, err, seam.ErrInvalidRequest)
			for _, want := range tt.contains {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %s", err, want)
				}
			}
			if n := len(p.calls()); n != 0 {
				t.Errorf("the provider was asked to prepare %d children", n)
			}
		})
	}
}

func TestValidRequestsReachTheProvider(t *testing.T) {
	tests := []struct {
		name string
		set  func(*seam.StartRequest)
	}{
		{"an object-rooted output schema", func(r *seam.StartRequest) {
			r.OutputSchema = json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
		}},
		{"an allow filter of known tools", func(r *seam.StartRequest) {
			r.ToolFilter = &seam.ToolFilter{Allow: []string{"read_file"}}
		}},
		{"an empty allow filter (no tools at all)", func(r *seam.StartRequest) {
			r.ToolFilter = &seam.ToolFilter{Allow: []string{}}
		}},
		{"a deny filter of known tools", func(r *seam.StartRequest) {
			r.ToolFilter = &seam.ToolFilter{Deny: []string{"write_file"}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := namedProvider{&fakeProvider{name: "spawn", caps: allCaps}, []string{"read_file", "write_file"}}
			m := newManager(t, manager.Options{}, p)
			req := prompt("do it")
			tt.set(&req)
			run, err := m.Start(context.Background(), "spawn", req)
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			defer run.Dispose()
			calls := p.calls()
			if len(calls) != 1 {
				t.Fatalf("the provider was asked to prepare %d children, want 1", len(calls))
			}
			got := calls[0]
			if got.ID == "" || got.ID != run.ID() {
				t.Errorf("req.ID = %q, run.ID() = %q: the manager must assign the id the run carries", got.ID, run.ID())
			}
			if got.Cwd != "/work" {
				t.Errorf("req.Cwd = %q, want the parent's /work", got.Cwd)
			}
		})
	}
}

func TestDepth(t *testing.T) {
	ptr := func(n int) *int { return &n }
	tests := []struct {
		name       string
		deployment int // Options.MaxDepth
		parent     seam.ParentRef
		maxDepth   *int
		wantDepth  int
		wantCap    int
		wantCode   *seam.Error
		wantMsg    string // exact Error() when set
	}{
		{name: "a root caller's child is at depth 1 under the deployment cap",
			parent: seam.ParentRef{Depth: 0}, wantDepth: 1, wantCap: manager.DefaultMaxDepth},
		{name: "a configured deployment cap is the child's cap",
			deployment: 5, parent: seam.ParentRef{Depth: 0}, wantDepth: 1, wantCap: 5},
		{name: "a child at the cap is allowed",
			parent: seam.ParentRef{Depth: 2}, wantDepth: 3, wantCap: 3},
		{name: "a child one past the default cap is DEPTH_EXCEEDED with the exact message",
			parent: seam.ParentRef{Depth: 3}, wantCode: seam.ErrDepthExceeded,
			wantMsg: "DEPTH_EXCEEDED: subagent depth 4 exceeds maxDepth 3"},
		{name: "a parent's lower cap applies to its children",
			parent: seam.ParentRef{Depth: 1, DepthCap: 2}, wantDepth: 2, wantCap: 2},
		{name: "a parent's lower cap refuses a child past it",
			parent: seam.ParentRef{Depth: 2, DepthCap: 2}, wantCode: seam.ErrDepthExceeded,
			wantMsg: "DEPTH_EXCEEDED: subagent depth 3 exceeds maxDepth 2"},
		{name: "a parent's cap above the deployment's does not raise it",
			parent: seam.ParentRef{Depth: 0, DepthCap: 10}, wantDepth: 1, wantCap: 3},
		{name: "max_depth lowers the cap the child sees",
			parent: seam.ParentRef{Depth: 0}, maxDepth: ptr(2), wantDepth: 1, wantCap: 2},
		{name: "max_depth equal to the child's depth forbids grandchildren",
			parent: seam.ParentRef{Depth: 0}, maxDepth: ptr(1), wantDepth: 1, wantCap: 1},
		{name: "max_depth 0 from a root caller is refused",
			parent: seam.ParentRef{Depth: 0}, maxDepth: ptr(0), wantCode: seam.ErrDepthExceeded,
			wantMsg: "DEPTH_EXCEEDED: subagent depth 1 exceeds maxDepth 0"},
		{name: "max_depth below the child's depth is refused",
			parent: seam.ParentRef{Depth: 1, DepthCap: 3}, maxDepth: ptr(1), wantCode: seam.ErrDepthExceeded,
			wantMsg: "DEPTH_EXCEEDED: subagent depth 2 exceeds maxDepth 1"},
		{name: "max_depth cannot raise the cap above an ancestor's",
			parent: seam.ParentRef{Depth: 1, DepthCap: 2}, maxDepth: ptr(10), wantDepth: 2, wantCap: 2},
		{name: "max_depth cannot raise the cap above the deployment's",
			parent: seam.ParentRef{Depth: 0}, maxDepth: ptr(100), wantDepth: 1, wantCap: 3},
		{name: "a huge parent depth is refused, not wrapped around",
			deployment: math.MaxInt, parent: seam.ParentRef{Depth: math.MaxInt32}, wantCode: seam.ErrDepthExceeded},
		{name: "the largest int as parent depth is refused",
			deployment: math.MaxInt, parent: seam.ParentRef{Depth: math.MaxInt}, wantCode: seam.ErrDepthExceeded},
		{name: "a negative parent depth is refused",
			parent: seam.ParentRef{Depth: -1}, wantCode: seam.ErrDepthExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &fakeProvider{name: "spawn", caps: allCaps}
			m := newManager(t, manager.Options{MaxDepth: tt.deployment}, p)
			req := prompt("go deeper")
			tt.parent.Cwd = "/work"
			req.Parent, req.MaxDepth = tt.parent, tt.maxDepth
			run, err := m.Start(context.Background(), "spawn", req)
			if tt.wantCode != nil {
				wantCode(t, err, tt.wantCode)
				if tt.wantMsg != "" && err.Error() != tt.wantMsg {
					t.Errorf("error = %q, want %q", err, tt.wantMsg)
				}
				if n := len(p.calls()); n != 0 {
					t.Errorf("the provider was asked to prepare %d children", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			defer run.Dispose()
			got := p.calls()[0]
			if got.Depth != tt.wantDepth || got.DepthCap != tt.wantCap {
				t.Errorf("provider saw Depth %d DepthCap %d, want %d and %d", got.Depth, got.DepthCap, tt.wantDepth, tt.wantCap)
			}
			self := p.selves()[0]
			if self.Depth != tt.wantDepth || self.DepthCap != tt.wantCap || self.AgentID != run.ID() {
				t.Errorf("Self() = %+v: a grandchild would not inherit depth %d, cap %d and parent %s",
					self, tt.wantDepth, tt.wantCap, run.ID())
			}
		})
	}
}

// A child's own delegations go through its driver's Self: a chain of starts stops at the
// cap however deep it is asked to go.
func TestDepthChainStopsAtTheCap(t *testing.T) {
	p := &fakeProvider{name: "spawn", caps: allCaps}
	m := newManager(t, manager.Options{MaxDepth: 4}, p)
	parent := seam.ParentRef{Principal: "local", Cwd: "/work"}
	two := 2
	for depth := 1; ; depth++ {
		req := prompt("deeper")
		req.Parent = parent
		if depth == 1 {
			req.MaxDepth = &two // the root asks for a shallower subtree than the deployment's 4
		}
		run, err := m.Start(context.Background(), "spawn", req)
		if depth <= 2 {
			if err != nil {
				t.Fatalf("depth %d: %v", depth, err)
			}
			defer run.Dispose()
			selves := p.selves()
			parent = selves[len(selves)-1]
			continue
		}
		wantCode(t, err, seam.ErrDepthExceeded)
		if want := "DEPTH_EXCEEDED: subagent depth 3 exceeds maxDepth 2"; err.Error() != want {
			t.Errorf("error = %q, want %q", err, want)
		}
		return
	}
}

func TestEvents(t *testing.T) {
	t.Run("start is emitted once the provider's driver is built and end once with the stop reason", func(t *testing.T) {
		var rec *recorder
		p := &fakeProvider{name: "spawn", caps: allCaps}
		p.driver = func(ctx context.Context, req seam.DriverRequest) (seam.Driver, error) {
			if n := len(rec.all()); n != 0 {
				t.Errorf("%d events emitted before the provider's driver was built", n)
			}
			return newWatchDriver(req.Journal), nil
		}
		m := newManager(t, manager.Options{}, p)
		rec, _ = record(m)
		run, err := m.Start(context.Background(), "spawn", prompt("hi"))
		if err != nil {
			t.Fatal(err)
		}
		evs := rec.all()
		if len(evs) != 1 || evs[0].Type != manager.EventStart || evs[0].RunID != run.ID() || evs[0].Provider != "spawn" || !evs[0].Local {
			t.Fatalf("events after Start = %+v, want one subagent/start for %s from spawn, local", evs, run.ID())
		}
		run.Dispose()
		end := rec.waitEnd(t)
		if end.RunID != run.ID() || end.StopReason != agent.StopAborted {
			t.Errorf("end event = %+v, want aborted for %s", end, run.ID())
		}
		// Close waits for every run's watcher: any second end is out by then.
		if err := m.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := rec.count(manager.EventEnd); n != 1 {
			t.Errorf("%d end events, want 1", n)
		}
	})
	t.Run("the end event carries the provider's stop reason and output", func(t *testing.T) {
		p := &fakeProvider{name: "spawn", caps: allCaps}
		m := newManager(t, manager.Options{}, p)
		rec, _ := record(m)
		run, err := m.Start(context.Background(), "spawn", prompt("hi"))
		if err != nil {
			t.Fatal(err)
		}
		p.run(t, 0).finish(agent.TurnResult{Output: "partial", StopReason: agent.StopMaxTokens})
		end := rec.waitEnd(t)
		if end.Type != manager.EventEnd || end.StopReason != agent.StopMaxTokens || end.Output != "partial" {
			t.Errorf("end event = %+v, want max-tokens with output partial", end)
		}
		evs := rec.all()
		if len(evs) != 2 || evs[0].Type != manager.EventStart || evs[1].Type != manager.EventEnd {
			t.Errorf("events = %+v, want start then end", evs)
		}
		if !end.Local {
			t.Errorf("end event = %+v, want local: every run this manager runs is", end)
		}
		if res := run.Result(); res.StopReason != agent.StopMaxTokens {
			t.Errorf("Result() = %+v", res)
		}
	})
	t.Run("a run that is already over when Start returns still gets start before end", func(t *testing.T) {
		p := &fakeProvider{name: "spawn", caps: allCaps, driver: func(_ context.Context, req seam.DriverRequest) (seam.Driver, error) {
			return doneDriver{req.Journal, agent.TurnResult{Output: "quick", StopReason: agent.StopCompleted}}, nil
		}}
		m := newManager(t, manager.Options{}, p)
		rec, _ := record(m)
		if _, err := m.Start(context.Background(), "spawn", prompt("hi")); err != nil {
			t.Fatal(err)
		}
		rec.waitEnd(t)
		evs := rec.all()
		if len(evs) != 2 || evs[0].Type != manager.EventStart || evs[1].Type != manager.EventEnd {
			t.Errorf("events = %+v, want start then end", evs)
		}
	})
	t.Run("a driver's failure is reported as an error end with its diagnostic", func(t *testing.T) {
		p := &fakeProvider{name: "remote", caps: allCaps}
		m := newManager(t, manager.Options{}, p)
		rec, _ := record(m)
		run, err := m.Start(context.Background(), "remote", prompt("hi"))
		if err != nil {
			t.Fatal(err)
		}
		p.run(t, 0).finish(agent.TurnResult{StopReason: agent.StopError, Diagnostic: "connection lost"})
		if end := rec.waitEnd(t); end.StopReason != agent.StopError {
			t.Errorf("end stop reason = %q, want error", end.StopReason)
		}
		if res := run.Result(); res.StopReason != agent.StopError || res.Diagnostic != "connection lost" {
			t.Errorf("Result() = %+v, want error with the driver's diagnostic", res)
		}
	})
	t.Run("a panicking listener breaks neither the run nor the other listeners", func(t *testing.T) {
		p := &fakeProvider{name: "spawn", caps: allCaps}
		m := newManager(t, manager.Options{}, p)
		m.Subscribe(func(manager.Event) { panic("listener bug") })
		rec, _ := record(m)
		m.Subscribe(func(manager.Event) { panic(errors.New("another listener bug")) })
		run, err := m.Start(context.Background(), "spawn", prompt("hi"))
		if err != nil {
			t.Fatalf("Start with a panicking listener: %v", err)
		}
		p.run(t, 0).finish(agent.TurnResult{Output: "ok", StopReason: agent.StopCompleted})
		end := rec.waitEnd(t)
		if end.StopReason != agent.StopCompleted {
			t.Errorf("end = %+v", end)
		}
		waitDone(t, run)
		if res := run.Result(); res.Output != "ok" || res.StopReason != agent.StopCompleted {
			t.Errorf("Result() = %+v", res)
		}
		if n := rec.count(manager.EventStart); n != 1 {
			t.Errorf("the healthy listener saw %d start events, want 1", n)
		}
	})
	t.Run("an unsubscribed listener hears nothing more", func(t *testing.T) {
		p := &fakeProvider{name: "spawn", caps: allCaps}
		m := newManager(t, manager.Options{}, p)
		gone, cancel := record(m)
		cancel()
		stay, _ := record(m)
		if _, err := m.Start(context.Background(), "spawn", prompt("hi")); err != nil {
			t.Fatal(err)
		}
		p.run(t, 0).finish(agent.TurnResult{StopReason: agent.StopCompleted})
		stay.waitEnd(t)
		if evs := gone.all(); len(evs) != 0 {
			t.Errorf("an unsubscribed listener got %+v", evs)
		}
	})
}

func TestResultNormalisation(t *testing.T) {
	const max = seam.MaxDiagnostic
	long := func(prefix int, r string) string {
		return strings.Repeat("a", prefix) + strings.Repeat(r, max) // well over MaxDiagnostic bytes
	}
	tests := []struct {
		name       string
		res        agent.TurnResult
		wantReason agent.StopReason
		wantDiag   func(t *testing.T, orig, got string)
	}{
		{name: "an unknown stop reason is an error naming it",
			res: agent.TurnResult{StopReason: "exploded"}, wantReason: agent.StopError,
			wantDiag: func(t *testing.T, _, got string) {
				if !strings.Contains(got, `"exploded"`) {
					t.Errorf("diagnostic %q does not name the unknown stop reason", got)
				}
			}},
		{name: "an empty stop reason is an error",
			res: agent.TurnResult{Output: "looks fine"}, wantReason: agent.StopError,
			wantDiag: func(t *testing.T, _, got string) {
				if got == "" {
					t.Error("no diagnostic for an empty stop reason")
				}
			}},
		{name: "an unknown stop reason keeps the provider's diagnostic",
			res: agent.TurnResult{StopReason: "paused", Diagnostic: "quota exhausted"}, wantReason: agent.StopError,
			wantDiag: func(t *testing.T, _, got string) {
				if got != "quota exhausted" {
					t.Errorf("diagnostic = %q", got)
				}
			}},
		{name: "known stop reasons pass through", res: agent.TurnResult{StopReason: agent.StopRefusal, Diagnostic: "no"},
			wantReason: agent.StopRefusal},
		{name: "a diagnostic of exactly MaxDiagnostic bytes is kept whole",
			res: agent.TurnResult{StopReason: agent.StopError, Diagnostic: strings.Repeat("x", max)}, wantReason: agent.StopError,
			wantDiag: func(t *testing.T, orig, got string) {
				if got != orig {
					t.Errorf("a %d-byte diagnostic was changed to %d bytes", len(orig), len(got))
				}
			}},
	}
	// Long diagnostics, with the cut falling on every byte of 2-, 3- and
	// 4-byte runes.
	for _, r := range []string{"é", "€", "𝄞"} {
		for prefix := 0; prefix < 4; prefix++ {
			tests = append(tests, struct {
				name       string
				res        agent.TurnResult
				wantReason agent.StopReason
				wantDiag   func(t *testing.T, orig, got string)
			}{
				name:       "a long diagnostic of " + r + " after " + strings.Repeat("a", prefix) + " is cut to valid UTF-8 within the bound",
				res:        agent.TurnResult{StopReason: agent.StopError, Diagnostic: long(prefix, r)},
				wantReason: agent.StopError,
				wantDiag: func(t *testing.T, orig, got string) {
					if len(got) > max {
						t.Errorf("diagnostic is %d bytes, want at most %d", len(got), max)
					}
					if !utf8.ValidString(got) {
						t.Errorf("diagnostic is not valid UTF-8 at its end: %q", got[len(got)-8:])
					}
					kept := strings.TrimSuffix(got, "…")
					if !strings.HasPrefix(orig, kept) || len(kept) < max-8 {
						t.Errorf("diagnostic keeps %d bytes of the original's start, want nearly %d", len(kept), max)
					}
				},
			})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &fakeProvider{name: "remote", caps: allCaps}
			m := newManager(t, manager.Options{}, p)
			rec, _ := record(m)
			run, err := m.Start(context.Background(), "remote", prompt("hi"))
			if err != nil {
				t.Fatal(err)
			}
			p.run(t, 0).finish(tt.res)
			waitDone(t, run)
			res := run.Result()
			if res.StopReason != tt.wantReason {
				t.Errorf("StopReason = %q, want %q", res.StopReason, tt.wantReason)
			}
			if tt.wantDiag != nil {
				tt.wantDiag(t, tt.res.Diagnostic, res.Diagnostic)
			}
			if end := rec.waitEnd(t); end.StopReason != tt.wantReason {
				t.Errorf("end event stop reason = %q, want %q", end.StopReason, tt.wantReason)
			}
		})
	}
}

func TestRunOnce(t *testing.T) {
	p := &fakeProvider{name: "spawn", caps: allCaps, driver: func(_ context.Context, req seam.DriverRequest) (seam.Driver, error) {
		return doneDriver{req.Journal, agent.TurnResult{Output: "42", StopReason: "weird"}}, nil
	}}
	m := newManager(t, manager.Options{}, p)
	id, res, err := managertest.RunOnce(context.Background(), m, "spawn", prompt("answer"))
	if err != nil {
		t.Fatal(err)
	}
	if id == "" || id != p.calls()[0].ID {
		t.Errorf("RunOnce id = %q, provider got %q", id, p.calls()[0].ID)
	}
	if res.Output != "42" || res.StopReason != agent.StopError {
		t.Errorf("RunOnce result = %+v: the unknown stop reason must be normalised here too", res)
	}
	if _, _, err := managertest.RunOnce(context.Background(), m, "nope", prompt("answer")); !errors.Is(err, seam.ErrNoProvider) {
		t.Errorf("RunOnce with an unknown provider: %v", err)
	}
}

func TestRemoveBlocksNewStartsButAcceptedRunsGoOn(t *testing.T) {
	p := &fakeProvider{name: "spawn", caps: allCaps}
	m := newManager(t, manager.Options{}, p, &fakeProvider{name: "fork"})
	rec, _ := record(m)
	run, err := m.Start(context.Background(), "spawn", prompt("long job"))
	if err != nil {
		t.Fatal(err)
	}
	m.Remove("spawn")
	_, err = m.Start(context.Background(), "spawn", prompt("another"))
	wantCode(t, err, seam.ErrNoProvider)
	if strings.Contains(strings.SplitN(err.Error(), "available:", 2)[1], "spawn") {
		t.Errorf("error %q still lists the removed provider", err)
	}
	if got := m.Providers(); len(got) != 1 || got[0].Name != "fork" {
		t.Errorf("Providers() after Remove = %+v", got)
	}
	select {
	case <-run.Done():
		t.Fatal("removing the provider ended an accepted run")
	case <-time.After(20 * time.Millisecond):
	}
	p.run(t, 0).finish(agent.TurnResult{Output: "done", StopReason: agent.StopCompleted})
	if end := rec.waitEnd(t); end.StopReason != agent.StopCompleted || end.RunID != run.ID() {
		t.Errorf("end = %+v", end)
	}
	if res := run.Result(); res.Output != "done" {
		t.Errorf("Result() = %+v", res)
	}
	// The name is free again.
	if err := m.Register(&fakeProvider{name: "spawn"}); err != nil {
		t.Errorf("re-registering a removed name: %v", err)
	}
}

func TestCancellation(t *testing.T) {
	t.Run("cancelled before the run is ready: CANCELLED and no events", func(t *testing.T) {
		for _, cause := range []string{"cancel", "deadline"} {
			t.Run(cause, func(t *testing.T) {
				entered := make(chan struct{})
				p := &fakeProvider{name: "spawn", caps: allCaps, driver: func(ctx context.Context, _ seam.DriverRequest) (seam.Driver, error) {
					close(entered)
					<-ctx.Done()
					return nil, ctx.Err()
				}}
				m := newManager(t, manager.Options{}, p)
				rec, _ := record(m)
				var ctx context.Context
				var cancel context.CancelFunc
				if cause == "cancel" {
					ctx, cancel = context.WithCancel(context.Background())
					go func() { <-entered; cancel() }()
				} else {
					ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
				}
				defer cancel()
				run, err := m.Start(ctx, "spawn", prompt("hi"))
				if run != nil {
					t.Errorf("Start returned a run with its error")
				}
				wantCode(t, err, seam.ErrCancelled)
				if !errors.Is(err, ctx.Err()) {
					t.Errorf("error %v does not wrap %v", err, ctx.Err())
				}
				// Close waits for every run's watcher: any event is out by then.
				if err := m.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
				if evs := rec.all(); len(evs) != 0 {
					t.Errorf("events for a start that never got ready: %+v", evs)
				}
			})
		}
	})
	t.Run("a provider failure with a live context is passed through, not called CANCELLED", func(t *testing.T) {
		boom := &seam.Error{Code: seam.CodeInvalidRequest, Message: "cwd: no such directory"}
		p := &fakeProvider{name: "spawn", caps: allCaps, driver: func(context.Context, seam.DriverRequest) (seam.Driver, error) {
			return nil, boom
		}}
		m := newManager(t, manager.Options{}, p)
		_, err := m.Start(context.Background(), "spawn", prompt("hi"))
		if err != error(boom) {
			t.Errorf("Start error = %v, want the provider's own", err)
		}
	})
	t.Run("cancelled after the run is ready: the run ends aborted", func(t *testing.T) {
		p := &fakeProvider{name: "spawn", caps: allCaps}
		m := newManager(t, manager.Options{}, p)
		rec, _ := record(m)
		ctx, cancel := context.WithCancel(context.Background())
		run, err := m.Start(ctx, "spawn", prompt("hi"))
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		waitDone(t, run)
		if res := run.Result(); res.StopReason != agent.StopAborted {
			t.Errorf("Result() = %+v; want aborted", res)
		}
		if end := rec.waitEnd(t); end.StopReason != agent.StopAborted {
			t.Errorf("end stop reason = %q, want aborted", end.StopReason)
		}
		if n := rec.count(manager.EventStart); n != 1 {
			t.Errorf("%d start events, want 1", n)
		}
	})
}

func TestClose(t *testing.T) {
	t.Run("close refuses new starts with DRAINING", func(t *testing.T) {
		p := &fakeProvider{name: "spawn", caps: allCaps}
		m := newManager(t, manager.Options{}, p)
		if err := m.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		_, err := m.Start(context.Background(), "spawn", prompt("hi"))
		wantCode(t, err, seam.ErrDraining)
		if n := len(p.calls()); n != 0 {
			t.Errorf("the provider was asked to prepare %d children after Close", n)
		}
	})
	t.Run("close waits for live runs to end", func(t *testing.T) {
		p := &fakeProvider{name: "spawn", caps: allCaps}
		m := newManager(t, manager.Options{}, p)
		rec, _ := record(m)
		run, err := m.Start(context.Background(), "spawn", prompt("hi"))
		if err != nil {
			t.Fatal(err)
		}
		closed := make(chan error, 1)
		go func() { closed <- m.Close(context.Background()) }()
		select {
		case err := <-closed:
			t.Fatalf("Close returned (%v) while a run was live", err)
		case <-time.After(50 * time.Millisecond):
		}
		_, err = m.Start(context.Background(), "spawn", prompt("late"))
		wantCode(t, err, seam.ErrDraining)
		p.run(t, 0).finish(agent.TurnResult{Output: "finished", StopReason: agent.StopCompleted})
		select {
		case err := <-closed:
			if err != nil {
				t.Errorf("Close: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not return after the last run ended")
		}
		if res := run.Result(); res.StopReason != agent.StopCompleted {
			t.Errorf("a drained run ended %q, want completed", res.StopReason)
		}
		if n := p.run(t, 0).disposed.Load(); n != 0 {
			t.Errorf("a run that ended in time was disposed %d times", n)
		}
		if n := rec.count(manager.EventEnd); n != 1 {
			t.Errorf("%d end events, want 1", n)
		}
	})
	t.Run("close with an expired context disposes live runs", func(t *testing.T) {
		p := &fakeProvider{name: "spawn", caps: allCaps}
		m := newManager(t, manager.Options{}, p)
		rec, _ := record(m)
		var runs []seam.Run
		for range 3 {
			run, err := m.Start(context.Background(), "spawn", prompt("forever"))
			if err != nil {
				t.Fatal(err)
			}
			runs = append(runs, run)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		closed := make(chan error, 1)
		go func() { closed <- m.Close(ctx) }()
		select {
		case err := <-closed:
			if err != nil {
				t.Errorf("Close: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not return after its context expired")
		}
		for i, run := range runs {
			if n := p.run(t, i).disposed.Load(); n != 1 {
				t.Errorf("run %d disposed %d times, want 1", i, n)
			}
			if res := run.Result(); res.StopReason != agent.StopAborted {
				t.Errorf("run %d ended %q, want aborted", i, res.StopReason)
			}
		}
		if n := rec.count(manager.EventEnd); n != 3 {
			t.Errorf("%d end events after Close, want 3", n)
		}
		// Disposing again is harmless.
		runs[0].Dispose()
		if n := p.run(t, 0).disposed.Load(); n != 1 {
			t.Errorf("a second Dispose reached the run (%d calls)", n)
		}
	})
	t.Run("a run that becomes ready after Close is disposed and refused", func(t *testing.T) {
		entered, proceed := make(chan struct{}), make(chan struct{})
		var made *watchDriver
		p := &fakeProvider{name: "spawn", caps: allCaps, driver: func(ctx context.Context, req seam.DriverRequest) (seam.Driver, error) {
			close(entered)
			<-proceed
			made = newWatchDriver(req.Journal)
			return made, nil
		}}
		m := newManager(t, manager.Options{}, p)
		rec, _ := record(m)
		started := make(chan error, 1)
		go func() {
			_, err := m.Start(context.Background(), "spawn", prompt("hi"))
			started <- err
		}()
		<-entered
		if err := m.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		close(proceed)
		err := <-started
		wantCode(t, err, seam.ErrDraining)
		if made.disposed.Load() != 1 {
			t.Error("the run made during shutdown was not disposed")
		}
		if evs := rec.all(); len(evs) != 0 {
			t.Errorf("events for a refused run: %+v", evs)
		}
	})
}

func TestNoGoroutineOutlivesClose(t *testing.T) {
	base := runtime.NumGoroutine()
	p := &fakeProvider{name: "spawn", caps: allCaps}
	m := manager.New(manager.Options{})
	if err := m.Register(p); err != nil {
		t.Fatal(err)
	}
	m.Subscribe(func(manager.Event) {})
	ctx, cancel := context.WithCancel(context.Background())
	var runs []seam.Run
	for range 10 {
		run, err := m.Start(ctx, "spawn", prompt("hi"))
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, run)
	}
	for i := range 5 {
		p.run(t, i).finish(agent.TurnResult{StopReason: agent.StopCompleted})
	}
	cancel() // the other five end aborted
	for _, run := range runs {
		waitDone(t, run)
		run.Dispose()
	}
	closeCtx, closeCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer closeCancel()
	if err := m.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestToolFilterKeeps(t *testing.T) {
	tests := []struct {
		name   string
		filter *seam.ToolFilter
		tool   string
		want   bool
	}{
		{"no filter keeps everything", nil, "run_shell", true},
		{"allow keeps a listed tool", &seam.ToolFilter{Allow: []string{"read_file"}}, "read_file", true},
		{"allow drops an unlisted tool", &seam.ToolFilter{Allow: []string{"read_file"}}, "run_shell", false},
		{"an empty allow list drops everything", &seam.ToolFilter{Allow: []string{}}, "read_file", false},
		{"deny drops a listed tool", &seam.ToolFilter{Deny: []string{"run_shell"}}, "run_shell", false},
		{"deny keeps an unlisted tool", &seam.ToolFilter{Deny: []string{"run_shell"}}, "read_file", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.filter.Keeps(tt.tool); got != tt.want {
				t.Errorf("Keeps(%q) = %v, want %v", tt.tool, got, tt.want)
			}
		})
	}
}

// A filter is part of what a child is created with, so it is stored and
// read back (DESIGN §2, descriptor): the round trip must not change what it
// keeps. An empty allow list (no tools) must not come back as no filter.
func TestToolFilterJSONRoundTripKeepsItsMeaning(t *testing.T) {
	for _, f := range []seam.ToolFilter{
		{Allow: []string{"read_file"}},
		{Allow: []string{}},
		{Deny: []string{"run_shell"}},
		{Deny: []string{}},
	} {
		b, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		var back seam.ToolFilter
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		for _, tool := range []string{"read_file", "run_shell", "write_file"} {
			if f.Keeps(tool) != back.Keeps(tool) {
				t.Errorf("%+v marshals as %s, which keeps %q: %v, want %v", f, b, tool, back.Keeps(tool), f.Keeps(tool))
			}
		}
	}
}
