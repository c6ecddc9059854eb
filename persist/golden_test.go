package persist

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Golden stores are bbolt files written by an earlier build, kept in
// testdata/golden/<date>/ with what that build read back from them
// (expect.json). They are never regenerated: a later build must open each
// one and read the same children, journals, inboxes, notices and marks.
// -golden.write=DIR writes a new fixture with this build, for a new dated
// directory when the format changes.
var goldenWrite = flag.String("golden.write", "", "write a golden store fixture into this directory and exit the test")

// goldenDump is everything a store holds, as read through the Store API.
type goldenDump struct {
	Children map[string]goldenChild   `json:"children"`
	ByParent map[string][]string      `json:"by_parent"`
	Notices  map[string][]seam.Notice `json:"notices"`
	Active   []string                 `json:"active"`
}

type goldenChild struct {
	Header     seam.Header          `json:"header"`
	Descriptor seam.Descriptor      `json:"descriptor"`
	Events     []agent.Event        `json:"events"`
	JournalLen int64                `json:"journal_len"`
	Checkpoint *seam.Checkpoint     `json:"checkpoint,omitempty"`
	Queued     []seam.QueuedMessage `json:"queued,omitempty"`
}

var goldenPrincipals = []string{"local", "alice"}

// writeGolden fills s with children that use every part of the format: a
// root child with a finished turn (tool calls, tool results, usage, a
// session handle), a fork child with a seed under it, a child with a
// queued inbox and an open turn left active, notices for two principals,
// and a settled child with its checkpoint.
func writeGolden(t *testing.T, s *Store) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	root := seam.PrincipalAddress("local")
	hdr := func(id, parent string, depth int, provider string, off time.Duration) seam.Header {
		return seam.Header{ID: id, Parent: parent, Principal: "local", Depth: depth, DepthCap: 3,
			Mode: seam.ModeContinuable, Provider: provider, Label: "golden " + id, Cwd: "/work/golden",
			CreatedAt: t0.Add(off)}
	}
	desc := func(provider string) seam.Descriptor {
		return seam.Descriptor{Version: seam.DescriptorVersion, Mode: seam.ModeContinuable,
			Provider: provider, Label: "golden", Model: "m-1"}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	ev := func(seq int64, e agent.Event) agent.Event {
		e.Seq, e.Time = seq, t0.Add(time.Duration(seq)*time.Second)
		return e
	}

	// agent-a: spawn, one finished turn with a tool round trip, settled.
	a := hdr("agent-aaaaaaaaaaaaaaaa", root, 1, "spawn", 0)
	da := desc("spawn")
	da.Persona = "terse"
	da.ToolFilter = &seam.ToolFilter{Deny: []string{"run_shell"}}
	da.OutputSchema = json.RawMessage(`{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}`)
	aEvents := []agent.Event{
		ev(0, agent.Event{Kind: agent.EventTurnStart, Turn: 1}),
		ev(1, agent.Event{Kind: agent.EventMessage, Turn: 1, Source: agent.SourceUser, Message: &seam.Message{Role: seam.RoleUser, Content: "list the files"}}),
		ev(2, agent.Event{Kind: agent.EventMessage, Turn: 1, Usage: &seam.Usage{InputTokens: 120, OutputTokens: 14},
			Message: &seam.Message{Role: seam.RoleAssistant, ToolCalls: []seam.ToolCall{{ID: "call-1", Name: "list_dir", Arguments: `{"path":"."}`}}}}),
		ev(3, agent.Event{Kind: agent.EventMessage, Turn: 1, Message: &seam.Message{Role: seam.RoleTool, ToolCallID: "call-1", Content: "a.go\nb.go"}}),
		ev(4, agent.Event{Kind: agent.EventMessage, Turn: 1, Usage: &seam.Usage{InputTokens: 150, OutputTokens: 9, CostUSD: 0.0012},
			Message: &seam.Message{Role: seam.RoleAssistant, Content: `{"ok":true}`}}),
		ev(5, agent.Event{Kind: agent.EventTurnEnd, Turn: 1, StopReason: agent.StopCompleted}),
		ev(6, agent.Event{Kind: agent.EventTurnStart, Turn: 2}),
		ev(7, agent.Event{Kind: agent.EventMessage, Turn: 2, Source: agent.SourceReport, Message: &seam.Message{Role: seam.RoleUser, Content: "[report] halfway"}}),
		ev(8, agent.Event{Kind: agent.EventMessage, Turn: 2, Message: &seam.Message{Role: seam.RoleAssistant, Refusal: "I will not do that"}}),
		ev(9, agent.Event{Kind: agent.EventTurnEnd, Turn: 2, StopReason: agent.StopRefusal, Diagnostic: "the model refused"}),
	}
	must(s.WriteChild(ctx, a.ID, seam.ChildWrite{Create: &seam.NewChild{Header: a, Descriptor: da}, Events: aEvents,
		Settle: &seam.Checkpoint{Seq: int64(len(aEvents)), Mode: seam.ModeContinuable, Label: a.Label,
			Usage: seam.Usage{InputTokens: 270, OutputTokens: 23, CostUSD: 0.0012}, Stop: agent.StopRefusal, Closing: "I will not do that"},
		Notify: &seam.ParentNotice{To: root, Notice: seam.Notice{ChildID: a.ID, Source: agent.SourceSettled,
			StopReason: agent.StopRefusal, Text: "agent-a declined the task.", Time: t0.Add(10 * time.Second), Session: "sess-1"}}}))

	// agent-b: an external child (codex) with a session handle, under a,
	// left active mid-turn with two queued messages.
	b := hdr("agent-bbbbbbbbbbbbbbbb", a.ID, 2, "codex", time.Minute)
	db := desc("codex")
	db.Session = "thread-0001"
	must(s.WriteChild(ctx, b.ID, seam.ChildWrite{Create: &seam.NewChild{Header: b, Descriptor: db}, Claim: &seam.Owner{ID: "golden", Expires: t0.Add(time.Hour)},
		Enqueue: []seam.QueuedMessage{{ID: "msg-1", Text: "first", Source: agent.SourceUser}, {ID: "msg-2", Text: "second", Source: agent.SourceUser},
			{ID: "msg-3", Text: "quiet report", Source: agent.SourceReport, Quiet: true}}}))
	must(s.WriteChild(ctx, b.ID, seam.ChildWrite{Dequeue: []string{"msg-1"}, Events: []agent.Event{
		ev(0, agent.Event{Kind: agent.EventTurnStart, Turn: 1}),
		ev(1, agent.Event{Kind: agent.EventMessage, Turn: 1, Source: agent.SourceUser, Message: &seam.Message{Role: seam.RoleUser, Content: "first"}}),
		ev(2, agent.Event{Kind: agent.EventSession, Turn: 1, Session: "thread-0001"}),
		ev(3, agent.Event{Kind: agent.EventMessage, Turn: 1, Message: &seam.Message{Role: seam.RoleAssistant, Content: "[ran: ls]"}}),
	}}))

	// agent-c: a fork of a with a seed (a's first turn), settled clean,
	// under the root with its checkpoint computed separately.
	c := hdr("agent-cccccccccccccccc", root, 1, "fork", 2*time.Minute)
	c.SeedLen = 6
	c.Session = "sess-2"
	cEvents := append([]agent.Event(nil), aEvents[:6]...)
	cEvents = append(cEvents,
		ev(6, agent.Event{Kind: agent.EventTurnStart, Turn: 2}),
		ev(7, agent.Event{Kind: agent.EventMessage, Turn: 2, Source: agent.SourceUser, Message: &seam.Message{Role: seam.RoleUser, Content: "and now?"}}),
		ev(8, agent.Event{Kind: agent.EventMessage, Turn: 2, Usage: &seam.Usage{InputTokens: 10, OutputTokens: 2}, Message: &seam.Message{Role: seam.RoleAssistant, Content: "done"}}),
		ev(9, agent.Event{Kind: agent.EventTurnEnd, Turn: 2, StopReason: agent.StopCompleted, Usage: &seam.Usage{InputTokens: 10, OutputTokens: 2}}),
	)
	must(s.WriteChild(ctx, c.ID, seam.ChildWrite{Create: &seam.NewChild{Header: c, Descriptor: desc("fork")}, Events: cEvents}))
	must(s.SetCheckpoint(ctx, c.ID, seam.Checkpoint{Seq: int64(len(cEvents)), Mode: seam.ModeContinuable, Label: c.Label,
		Usage: seam.Usage{InputTokens: 280, OutputTokens: 25, CostUSD: 0.0012}, Stop: agent.StopCompleted, Closing: "done"}))

	// Notices for a second principal, one already taken.
	must(s.AddNotice(ctx, seam.PrincipalAddress("alice"), seam.Notice{ChildID: "agent-dddddddddddddddd", Source: agent.SourceReport, Text: "taken", Time: t0}))
	must(s.AddNotice(ctx, seam.PrincipalAddress("alice"), seam.Notice{ChildID: "agent-dddddddddddddddd", Source: agent.SourceReport, Text: "still queued", Time: t0.Add(time.Second)}))
	if _, err := s.TakeNotices(ctx, seam.PrincipalAddress("alice"), func(n seam.Notice) bool { return n.Text == "taken" }); err != nil {
		t.Fatal(err)
	}
}

// dumpGolden reads everything back through the Store API. It takes the
// notices, so run it on a copy.
func dumpGolden(t *testing.T, s *Store) goldenDump {
	t.Helper()
	d := goldenDump{Children: map[string]goldenChild{}, ByParent: map[string][]string{}, Notices: map[string][]seam.Notice{}}
	queue := []string{seam.PrincipalAddress("local"), seam.PrincipalAddress("alice")}
	for len(queue) > 0 {
		parent := queue[0]
		queue = queue[1:]
		ls, err := s.Listings(ctx, parent, seam.Page{})
		if err != nil {
			t.Fatalf("Listings(%s) = %v", parent, err)
		}
		for _, l := range ls {
			if l.Corrupt {
				t.Fatalf("Listings(%s): %s is corrupt", parent, l.Header.ID)
			}
			h := l.Header
			d.ByParent[parent] = append(d.ByParent[parent], h.ID)
			queue = append(queue, h.ID)
			var c goldenChild
			if c.Header, err = s.Header(ctx, h.ID); err != nil {
				t.Fatal(err)
			}
			if c.Descriptor, err = s.Descriptor(ctx, h.ID); err != nil {
				t.Fatal(err)
			}
			if c.Events, err = s.Events(ctx, h.ID); err != nil {
				t.Fatal(err)
			}
			if c.JournalLen, err = s.JournalLen(ctx, h.ID); err != nil {
				t.Fatal(err)
			}
			if cp, ok, err := s.Checkpoint(ctx, h.ID); err != nil {
				t.Fatal(err)
			} else if ok {
				c.Checkpoint = &cp
			}
			if c.Queued, err = s.Queued(ctx, h.ID); err != nil {
				t.Fatal(err)
			}
			d.Children[h.ID] = c
		}
	}
	for _, p := range goldenPrincipals {
		ns, err := s.TakeNotices(ctx, seam.PrincipalAddress(p), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(ns) > 0 {
			d.Notices[p] = ns
		}
		if ns, err = s.TakeNotices(ctx, p, nil); err != nil {
			t.Fatal(err)
		} else if len(ns) > 0 {
			d.Notices[p+" (bare)"] = ns
		}
	}
	claims, err := s.Residents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims {
		d.Active = append(d.Active, c.ChildID)
	}
	return d
}

func TestGoldenStoresOpen(t *testing.T) {
	if *goldenWrite != "" {
		dir := *goldenWrite
		s := openTest(t, dir)
		writeGolden(t, s)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		tmp := t.TempDir()
		copyGolden(t, filepath.Join(dir, FileName), filepath.Join(tmp, FileName))
		b, err := json.MarshalIndent(dumpGolden(t, openTest(t, tmp)), "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "expect.json"), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", dir)
		return
	}
	dirs, _ := filepath.Glob(filepath.Join("testdata", "golden", "*"))
	if len(dirs) == 0 {
		t.Fatal("no golden stores in testdata/golden")
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			want, s := openGoldenCopy(t, dir)
			got := dumpGolden(t, s)
			// Compare as JSON values so time zones and nil-versus-empty
			// slices do not count, only what the store holds.
			if g, w := normJSON(t, got), normJSON(t, want); !reflect.DeepEqual(g, w) {
				gb, _ := json.MarshalIndent(got, "", "  ")
				t.Errorf("store %s reads back differently from what its build read:\n%s", dir, gb)
			}
		})
	}
}

func normJSON(t *testing.T, v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// openGoldenCopy opens a copy of the golden store in dir (the original is
// never written) and returns what its build read from it (expect.json).
func openGoldenCopy(t *testing.T, dir string) (goldenDump, *Store) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "expect.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want goldenDump
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	copyGolden(t, filepath.Join(dir, FileName), filepath.Join(tmp, FileName))
	return want, openTest(t, tmp)
}

func copyGolden(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
