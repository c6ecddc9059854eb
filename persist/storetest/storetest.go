// Package storetest is the conformance suite for manager.Store
// implementations. Every backend (the bbolt store in persist, the in-memory
// one in persist/memstore, a future shared one) runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) manager.Store { return memstore.New() })
//	}
//
// The suite pins behaviour every caller may rely on: reads return what was
// written and never alias it, duplicate ids are refused, journals continue
// without gaps and appends are all-or-nothing, children list in creation
// order per parent, notices are numbered per principal and taken once,
// active marks round-trip, and concurrent writers do not interfere (run it
// under -race). Detecting corrupt bytes needs access to the bytes, so it is
// each backend's own test, not part of this suite.
package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/manager"
)

// Run runs the suite. Stores with the Batcher ability (WriteChild) must
// also be Inboxers; the child-write tests skip stores without it. open must return a new, empty store for each call;
// the suite closes it when the subtest ends (Close must therefore tolerate a
// second call if open registers its own cleanup).
func Run(t *testing.T, open func(t *testing.T) manager.Store) {
	t.Helper()
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s manager.Store)
	}{
		{"a created child reads back as written", testCreateRead},
		{"returned and passed values do not alias the store", testNoAliasing},
		{"CreateChild refuses duplicates and invalid input, storing nothing", testCreateRefusals},
		{"every per-child method refuses an unknown id without calling it corrupt", testUnknownChild},
		{"appends must continue the journal and are all-or-nothing", testAppendContinuity},
		{"events round-trip with messages, tool calls and usage", testEventContent},
		{"children list in creation order, isolated by parent", testChildrenOrder},
		{"checkpoints round-trip and are replaced", testCheckpoints},
		{"notices come out in order, once, numbered per principal", testNotices},
		{"a filtered take leaves the rest queued in order", testNoticesFiltered},
		{"active marks are set, listed and cleared", testActive},
		{"concurrent appends to different children do not interfere", testConcurrentAppends},
		{"concurrent CreateChild: distinct ids all land, one id lands once", testConcurrentCreate},
		{"readers run beside writers", testReadersBesideWriters},
		{"a child write applies whole: record, inbox, events, settlement", testWriteChild},
		{"a settlement and its notice commit together", testSettlementNotice},
		{"a refused child write leaves no trace", testWriteChildRefused},
		{"after Close every method fails and Close may repeat", testClose},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, s)
		})
	}
}

var base = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

// header returns a valid header for id under parent, created at base+offset.
func header(id, parent string, offset time.Duration) manager.Header {
	return manager.Header{
		ID: id, Parent: parent, Principal: "local", Depth: 1, DepthCap: 3,
		Mode: manager.ModeContinuable, Provider: "spawn", Label: "label of " + id,
		Cwd: "/work/" + id, CreatedAt: base.Add(offset),
	}
}

func descriptor() manager.Descriptor {
	return manager.Descriptor{
		Version: manager.DescriptorVersion, Mode: manager.ModeContinuable, Provider: "spawn",
		Label: "review the parser", Model: "deepseek-chat", Persona: "Be terse.",
		ToolFilter:   &manager.ToolFilter{Allow: []string{"read_file", "list_dir"}},
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"ok":{"type":"boolean"}}}`),
		Session:      "thread-42",
	}
}

func mustCreate(t *testing.T, s manager.Store, h manager.Header) {
	t.Helper()
	if err := s.CreateChild(h, descriptor()); err != nil {
		t.Fatalf("CreateChild(%q): %v", h.ID, err)
	}
}

// turn returns a complete turn's events starting at seq.
func turn(seq int64, n int, text string) []agent.Event {
	at := base.Add(time.Duration(seq) * time.Second)
	return []agent.Event{
		{Seq: seq, Kind: agent.EventTurnStart, Time: at, Turn: n},
		{Seq: seq + 1, Kind: agent.EventMessage, Time: at, Turn: n, Source: agent.SourceUser,
			Message: &llm.Message{Role: llm.RoleUser, Content: text}},
		{Seq: seq + 2, Kind: agent.EventMessage, Time: at, Turn: n,
			Message: &llm.Message{Role: llm.RoleAssistant, Content: "done: " + text},
			Usage:   &llm.Usage{InputTokens: 10, OutputTokens: 3}},
		{Seq: seq + 3, Kind: agent.EventTurnEnd, Time: at, Turn: n, StopReason: agent.StopCompleted},
	}
}

func sameHeader(a, b manager.Header) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return false
	}
	a.CreatedAt, b.CreatedAt = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

func sameEvents(a, b []agent.Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if !x.Time.Equal(y.Time) {
			return false
		}
		x.Time, y.Time = time.Time{}, time.Time{}
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

func ids(hs []manager.Header) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.ID
	}
	return out
}

func testCreateRead(t *testing.T, s manager.Store) {
	h := header("c1", manager.PrincipalAddress("local"), 0)
	h.SeedLen = 4
	mustCreate(t, s, h)

	got, err := s.Header("c1")
	if err != nil {
		t.Fatalf("Header: %v", err)
	}
	if !sameHeader(got, h) {
		t.Errorf("Header = %+v, want %+v", got, h)
	}
	d, err := s.Descriptor("c1")
	if err != nil {
		t.Fatalf("Descriptor: %v", err)
	}
	if !reflect.DeepEqual(d, descriptor()) {
		t.Errorf("Descriptor = %+v, want %+v", d, descriptor())
	}
	if n, err := s.JournalLen("c1"); err != nil || n != 0 {
		t.Errorf("JournalLen of a new child = %d, %v; want 0, nil", n, err)
	}
	if evs, err := s.Events("c1"); err != nil || len(evs) != 0 {
		t.Errorf("Events of a new child = %v, %v; want none", evs, err)
	}
	if _, ok, err := s.Checkpoint("c1"); err != nil || ok {
		t.Errorf("Checkpoint of a new child: ok=%v err=%v; want absent", ok, err)
	}
	if act, err := s.Active(); err != nil || !reflect.DeepEqual(act, []string{"c1"}) {
		t.Errorf("Active = %v, %v; want [c1]: a new child is active", act, err)
	}
	hs, corrupt, err := s.Children(h.Parent)
	if err != nil || len(corrupt) != 0 || len(hs) != 1 || !sameHeader(hs[0], h) {
		t.Errorf("Children = %+v, %v, %v; want the one header", hs, corrupt, err)
	}
}

func testNoAliasing(t *testing.T, s manager.Store) {
	h := header("c1", "p", 0)
	d := descriptor()
	if err := s.CreateChild(h, d); err != nil {
		t.Fatal(err)
	}
	// Mutating what was passed in changes nothing stored.
	d.ToolFilter.Allow[0] = "MUTATED"
	d.OutputSchema[2] = 'X'
	evs := turn(0, 1, "hello")
	if err := s.AppendEvents("c1", evs); err != nil {
		t.Fatal(err)
	}
	evs[1].Message.Content = "MUTATED"

	// Mutating what came out changes nothing stored.
	got, err := s.Descriptor("c1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, descriptor()) {
		t.Fatalf("Descriptor changed with the caller's value: %+v", got)
	}
	got.ToolFilter.Allow[0] = "MUTATED"
	got.OutputSchema[2] = 'X'
	again, err := s.Descriptor("c1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, descriptor()) {
		t.Errorf("Descriptor changed with a returned value: %+v", again)
	}

	out, err := s.Events("c1")
	if err != nil {
		t.Fatal(err)
	}
	if !sameEvents(out, turn(0, 1, "hello")) {
		t.Fatalf("Events changed with the caller's value: %+v", out)
	}
	out[1].Message.Content = "MUTATED"
	out2, err := s.Events("c1")
	if err != nil {
		t.Fatal(err)
	}
	if !sameEvents(out2, turn(0, 1, "hello")) {
		t.Errorf("Events changed with a returned value: %+v", out2)
	}
}

func testCreateRefusals(t *testing.T, s manager.Store) {
	mustCreate(t, s, header("dup", "p", 0))
	if err := s.CreateChild(header("dup", "q", time.Second), descriptor()); err == nil {
		t.Error("CreateChild accepted a duplicate id")
	}
	if hs, _, _ := s.Children("q"); len(hs) != 0 {
		t.Errorf("a refused duplicate was indexed under its parent: %v", ids(hs))
	}
	if h, err := s.Header("dup"); err != nil || h.Parent != "p" {
		t.Errorf("a refused duplicate changed the stored header: %+v, %v", h, err)
	}

	bad := func(name string, h manager.Header, d manager.Descriptor) {
		t.Helper()
		if err := s.CreateChild(h, d); err == nil {
			t.Errorf("CreateChild accepted %s", name)
		}
		if h.ID != "" {
			if _, err := s.Header(h.ID); err == nil {
				t.Errorf("CreateChild stored a child with %s", name)
			}
		}
	}
	noParent := header("np", "", 0)
	zeroTime := header("zt", "p", 0)
	zeroTime.CreatedAt = time.Time{}
	v0, v2 := descriptor(), descriptor()
	v0.Version, v2.Version = 0, manager.DescriptorVersion+1
	bad("an empty id", header("", "p", 0), descriptor())
	bad("an empty parent", noParent, descriptor())
	bad("a zero created_at", zeroTime, descriptor())
	bad("descriptor version 0", header("v0", "p", 0), v0)
	bad("an unknown descriptor version", header("v2", "p", 0), v2)
	if hs, _, _ := s.Children("p"); len(hs) != 1 {
		t.Errorf("Children(p) after refusals = %v, want [dup]", ids(hs))
	}
}

func testUnknownChild(t *testing.T, s manager.Store) {
	mustCreate(t, s, header("known", "p", 0))
	const id = "ghost-7f3a"
	check := func(method string, err error) {
		t.Helper()
		switch {
		case err == nil:
			t.Errorf("%s(%q) succeeded for an unknown child", method, id)
		case errors.Is(err, manager.ErrCorrupt):
			t.Errorf("%s(%q) = %v: an unknown child is not corrupt", method, id, err)
		case !errors.Is(err, manager.ErrNotFound):
			t.Errorf("%s(%q) = %v: does not match manager.ErrNotFound", method, id, err)
		case !strings.Contains(err.Error(), id):
			t.Errorf("%s(%q) = %v: the error does not name the child", method, id, err)
		}
	}
	_, err := s.Header(id)
	check("Header", err)
	_, err = s.Descriptor(id)
	check("Descriptor", err)
	_, err = s.Events(id)
	check("Events", err)
	_, err = s.JournalLen(id)
	check("JournalLen", err)
	check("AppendEvents", s.AppendEvents(id, turn(0, 1, "x")))
	check("AppendEvents (empty)", s.AppendEvents(id, nil))
	_, _, err = s.Checkpoint(id)
	check("Checkpoint", err)
	check("SetCheckpoint", s.SetCheckpoint(id, manager.Checkpoint{Seq: 1}))
	check("SetActive", s.SetActive(id, true))
	check("SetActive(false)", s.SetActive(id, false))
	if act, _ := s.Active(); !reflect.DeepEqual(act, []string{"known"}) {
		t.Errorf("Active = %v after refused marks, want only the created child", act)
	}
	if hs, corrupt, err := s.Children("nobody"); err != nil || len(hs)+len(corrupt) != 0 {
		t.Errorf("Children of an unknown parent = %v, %v, %v; want empty, nil", hs, corrupt, err)
	}
}

func testAppendContinuity(t *testing.T, s manager.Store) {
	mustCreate(t, s, header("c", "p", 0))
	first := turn(0, 1, "one")[:3]
	if err := s.AppendEvents("c", first); err != nil {
		t.Fatalf("append 0..2: %v", err)
	}
	if err := s.AppendEvents("c", nil); err != nil {
		t.Fatalf("an empty append: %v", err)
	}
	if err := s.AppendEvents("c", turn(0, 1, "one")[3:]); err != nil {
		t.Fatalf("append 3: %v", err)
	}
	ev := func(seq int64) agent.Event {
		return agent.Event{Seq: seq, Kind: agent.EventTurnStart, Time: base, Turn: 2}
	}
	for _, tc := range []struct {
		name   string
		events []agent.Event
	}{
		{"a gap", []agent.Event{ev(5)}},
		{"a repeated sequence", []agent.Event{ev(3)}},
		{"a sequence from 0 again", []agent.Event{ev(0)}},
		{"a gap inside the batch", []agent.Event{ev(4), ev(6)}},
		{"a repeat inside the batch", []agent.Event{ev(4), ev(4)}},
		{"a negative sequence", []agent.Event{ev(-1)}},
		{"an event without a kind", []agent.Event{{Seq: 4, Time: base}}},
	} {
		if err := s.AppendEvents("c", tc.events); err == nil {
			t.Errorf("AppendEvents accepted %s", tc.name)
		}
		if n, _ := s.JournalLen("c"); n != 4 {
			t.Fatalf("after refusing %s, JournalLen = %d, want 4 (all-or-nothing)", tc.name, n)
		}
	}
	if err := s.AppendEvents("c", []agent.Event{ev(4), ev(5)}); err != nil {
		t.Fatalf("append 4..5: %v", err)
	}
	got, err := s.Events("c")
	if err != nil {
		t.Fatal(err)
	}
	want := append(turn(0, 1, "one"), ev(4), ev(5))
	if !sameEvents(got, want) {
		t.Errorf("Events = %+v\nwant %+v", got, want)
	}
	if n, err := s.JournalLen("c"); err != nil || n != 6 {
		t.Errorf("JournalLen = %d, %v; want 6", n, err)
	}
}

func testEventContent(t *testing.T, s manager.Store) {
	mustCreate(t, s, header("c", "p", 0))
	at := base.In(time.FixedZone("CET", 3600))
	events := []agent.Event{
		{Seq: 0, Kind: agent.EventTurnStart, Time: at, Turn: 1},
		{Seq: 1, Kind: agent.EventMessage, Time: at, Turn: 1, Source: agent.SourceReport,
			Message: &llm.Message{Role: llm.RoleUser, Content: "report: ✓ «quoted» \"x\"\n"}},
		{Seq: 2, Kind: agent.EventMessage, Time: at, Turn: 1,
			Message: &llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{
				{ID: "call_1", Name: "read_file", Arguments: `{"path":"a.go"}`}}},
			Usage: &llm.Usage{InputTokens: 1200, OutputTokens: 40}},
		{Seq: 3, Kind: agent.EventMessage, Time: at, Turn: 1,
			Message: &llm.Message{Role: llm.RoleTool, ToolCallID: "call_1", Content: "package a"}},
		{Seq: 4, Kind: agent.EventMessage, Time: at, Turn: 1,
			Message: &llm.Message{Role: llm.RoleAssistant, Refusal: "no"}},
		{Seq: 5, Kind: agent.EventTurnEnd, Time: at, Turn: 1, StopReason: agent.StopError, Diagnostic: "model failed"},
	}
	if err := s.AppendEvents("c", events); err != nil {
		t.Fatal(err)
	}
	got, err := s.Events("c")
	if err != nil {
		t.Fatal(err)
	}
	if !sameEvents(got, events) {
		t.Errorf("Events = %+v\nwant %+v", got, events)
	}
	if err := agent.Validate(got); err != nil {
		t.Errorf("stored journal fails the journal invariants: %v", err)
	}
}

func testChildrenOrder(t *testing.T, s manager.Store) {
	p, q := manager.PrincipalAddress("alice"), manager.PrincipalAddress("bob")
	// Created out of order on purpose; two share a timestamp (ties by id).
	for _, h := range []manager.Header{
		header("c3", p, 3*time.Second),
		header("q1", q, 2*time.Second),
		header("c1", p, time.Second),
		header("tie-b", p, 0),
		header("c2", p, 2*time.Second),
		header("tie-a", p, 0),
		header("old", p, -24*365*time.Hour*60), // before 1970
		header("g1", "c1", 5*time.Second),      // a grandchild, under c1
	} {
		mustCreate(t, s, h)
	}
	check := func(parent string, want ...string) {
		t.Helper()
		hs, corrupt, err := s.Children(parent)
		if err != nil || len(corrupt) != 0 {
			t.Fatalf("Children(%q): corrupt=%v err=%v", parent, corrupt, err)
		}
		if got := ids(hs); !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Errorf("Children(%q) = %v, want %v", parent, got, want)
		}
		for _, h := range hs {
			if h.Parent != parent {
				t.Errorf("Children(%q) returned %q whose parent is %q", parent, h.ID, h.Parent)
			}
		}
	}
	check(p, "old", "tie-a", "tie-b", "c1", "c2", "c3")
	check(q, "q1")
	check("c1", "g1")
	check("c2")
	check(manager.PrincipalAddress("carol"))
}

func testCheckpoints(t *testing.T, s manager.Store) {
	mustCreate(t, s, header("c", "p", 0))
	mustCreate(t, s, header("d", "p", time.Second))
	if err := s.AppendEvents("c", turn(0, 1, "a")); err != nil { // 4 events
		t.Fatal(err)
	}
	cp := manager.Checkpoint{Seq: 4, Mode: manager.ModeContinuable, Label: "x",
		Usage: manager.Usage{InputTokens: 100, OutputTokens: 7, CostUSD: 0.25}, Stop: agent.StopAborted}
	if err := s.SetCheckpoint("c", cp); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.Checkpoint("c")
	if err != nil || !ok || !reflect.DeepEqual(got, cp) {
		t.Errorf("Checkpoint = %+v, %v, %v; want %+v", got, ok, err, cp)
	}
	cp2 := manager.Checkpoint{Seq: 4, Mode: manager.ModeContinuable, Label: "y"}
	if err := s.SetCheckpoint("c", cp2); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.Checkpoint("c"); err != nil || !ok || !reflect.DeepEqual(got, cp2) {
		t.Errorf("Checkpoint after replace = %+v, %v, %v; want %+v", got, ok, err, cp2)
	}
	if _, ok, err := s.Checkpoint("d"); err != nil || ok {
		t.Errorf("a sibling's checkpoint: ok=%v err=%v; want absent", ok, err)
	}
	// A checkpoint that is not current is a cache miss, never stored.
	if err := s.SetCheckpoint("d", manager.Checkpoint{Seq: 5}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Checkpoint("d"); ok {
		t.Error("a checkpoint ahead of the journal was stored")
	}
	// An append makes the stored checkpoint stale: it is dropped.
	if err := s.AppendEvents("c", turn(4, 2, "b")); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Checkpoint("c"); ok {
		t.Error("a checkpoint survived a journal append")
	}
}

func testNotices(t *testing.T, s manager.Store) {
	given := base.Add(time.Hour)
	before := time.Now()
	for i, n := range []manager.Notice{
		{ChildID: "c1", Source: agent.SourceReport, Text: "first", Time: given},
		{ChildID: "c2", Source: agent.SourceSettled, Text: "second", Seq: 999},
		{ChildID: "c1", Source: agent.SourceSettled, Text: "third"},
	} {
		if err := s.AddNotice("alice", n); err != nil {
			t.Fatalf("AddNotice %d: %v", i, err)
		}
	}
	if err := s.AddNotice("bob", manager.Notice{ChildID: "b1", Source: agent.SourceReport, Text: "bob's"}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddNotice("", manager.Notice{Text: "nobody's"}); err == nil {
		t.Error("AddNotice accepted an empty principal")
	}
	got, err := s.TakeNotices("alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("TakeNotices(alice) = %+v, want 3 notices", got)
	}
	for i, text := range []string{"first", "second", "third"} {
		if got[i].Text != text {
			t.Errorf("notice %d text = %q, want %q", i, got[i].Text, text)
		}
		if i > 0 && got[i].Seq <= got[i-1].Seq {
			t.Errorf("notice seqs not increasing: %d then %d", got[i-1].Seq, got[i].Seq)
		}
	}
	if got[0].Seq < 1 {
		t.Errorf("first notice Seq = %d, want assigned from 1", got[0].Seq)
	}
	if !got[0].Time.Equal(given) {
		t.Errorf("a given notice time was replaced: %v, want %v", got[0].Time, given)
	}
	if got[1].Time.Before(before.Add(-time.Second)) || got[1].Time.After(time.Now().Add(time.Second)) {
		t.Errorf("a zero notice time was set to %v, want about now", got[1].Time)
	}
	if got[0].ChildID != "c1" || got[1].Source != agent.SourceSettled {
		t.Errorf("notice fields lost: %+v", got)
	}
	if again, err := s.TakeNotices("alice", nil); err != nil || len(again) != 0 {
		t.Errorf("second TakeNotices(alice) = %+v, %v; want none (taken once)", again, err)
	}
	if err := s.AddNotice("alice", manager.Notice{ChildID: "c9", Text: "later"}); err != nil {
		t.Fatal(err)
	}
	later, err := s.TakeNotices("alice", nil)
	if err != nil || len(later) != 1 || later[0].Seq <= got[2].Seq {
		t.Errorf("a notice after a take = %+v, %v; want one with Seq > %d (never reused)", later, err, got[2].Seq)
	}
	bob, err := s.TakeNotices("bob", nil)
	if err != nil || len(bob) != 1 || bob[0].Text != "bob's" {
		t.Errorf("TakeNotices(bob) = %+v, %v", bob, err)
	}
	if none, err := s.TakeNotices("carol", nil); err != nil || len(none) != 0 {
		t.Errorf("TakeNotices(carol) = %+v, %v; want none", none, err)
	}
}

func testNoticesFiltered(t *testing.T, s manager.Store) {
	for _, n := range []manager.Notice{
		{ChildID: "c1", Session: "s1", Text: "one", StopReason: agent.StopCompleted},
		{ChildID: "c2", Session: "s2", Text: "two"},
		{ChildID: "c3", Session: "s1", Text: "three"},
		{ChildID: "c4", Session: "s2", Text: "four"},
	} {
		if err := s.AddNotice("alice", n); err != nil {
			t.Fatal(err)
		}
	}
	texts := func(ns []manager.Notice) []string {
		out := []string{}
		for _, n := range ns {
			out = append(out, n.Text)
		}
		return out
	}
	s1, err := s.TakeNotices("alice", func(n manager.Notice) bool { return n.Session == "s1" })
	if err != nil || !reflect.DeepEqual(texts(s1), []string{"one", "three"}) {
		t.Fatalf("take of session s1 = %v, %v; want [one three]", texts(s1), err)
	}
	if s1[0].StopReason != agent.StopCompleted || s1[0].Session != "s1" {
		t.Errorf("notice fields lost: %+v", s1[0])
	}
	if again, _ := s.TakeNotices("alice", func(n manager.Notice) bool { return n.Session == "s1" }); len(again) != 0 {
		t.Errorf("second take of s1 = %v; want none", texts(again))
	}
	rest, err := s.TakeNotices("alice", nil)
	if err != nil || !reflect.DeepEqual(texts(rest), []string{"two", "four"}) {
		t.Errorf("the rest = %v, %v; want [two four] in order", texts(rest), err)
	}
}

func testActive(t *testing.T, s manager.Store) {
	for i, id := range []string{"b", "a", "c"} {
		mustCreate(t, s, header(id, "p", time.Duration(i)))
	}
	if got, err := s.Active(); err != nil || !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Errorf("Active after CreateChild = %v, %v; want [a b c]: new children are active", got, err)
	}
	if err := s.SetActive("c", false); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"b", "a", "a"} {
		if err := s.SetActive(id, true); err != nil {
			t.Fatalf("SetActive(%q): %v", id, err)
		}
	}
	if got, err := s.Active(); err != nil || !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("Active = %v, %v; want [a b]", got, err)
	}
	if err := s.SetActive("a", false); err != nil {
		t.Fatal(err)
	}
	if err := s.SetActive("c", false); err != nil {
		t.Errorf("clearing an unmarked child: %v", err)
	}
	if got, err := s.Active(); err != nil || !reflect.DeepEqual(got, []string{"b"}) {
		t.Errorf("Active = %v, %v; want [b]", got, err)
	}
}

func testConcurrentAppends(t *testing.T, s manager.Store) {
	const children, turns = 8, 25
	for i := range children {
		mustCreate(t, s, header(fmt.Sprintf("c%d", i), "p", time.Duration(i)))
	}
	var wg sync.WaitGroup
	errs := make(chan error, children)
	for i := range children {
		wg.Go(func() {
			id := fmt.Sprintf("c%d", i)
			for n := range turns {
				if err := s.AppendEvents(id, turn(int64(n*4), n+1, id)); err != nil {
					errs <- fmt.Errorf("%s turn %d: %w", id, n, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range children {
		id := fmt.Sprintf("c%d", i)
		got, err := s.Events(id)
		if err != nil {
			t.Fatal(err)
		}
		var want []agent.Event
		for n := range turns {
			want = append(want, turn(int64(n*4), n+1, id)...)
		}
		if !sameEvents(got, want) {
			t.Errorf("%s: journal of %d events differs from the %d appended", id, len(got), len(want))
		}
	}
}

func testConcurrentCreate(t *testing.T, s manager.Store) {
	const distinct, racers = 32, 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range distinct {
		wg.Go(func() {
			if err := s.CreateChild(header(fmt.Sprintf("c%02d", i), "p", time.Duration(i)), descriptor()); err != nil {
				t.Errorf("CreateChild c%02d: %v", i, err)
			}
		})
	}
	for i := range racers {
		wg.Go(func() {
			h := header("contested", "p", time.Hour)
			h.Label = fmt.Sprintf("racer %d", i)
			if s.CreateChild(h, descriptor()) == nil {
				mu.Lock()
				won++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if won != 1 {
		t.Errorf("%d racers created the same id, want exactly 1", won)
	}
	hs, corrupt, err := s.Children("p")
	if err != nil || len(corrupt) != 0 {
		t.Fatal(err, corrupt)
	}
	if len(hs) != distinct+1 {
		t.Fatalf("Children = %d headers, want %d", len(hs), distinct+1)
	}
	for i := range distinct {
		if want := fmt.Sprintf("c%02d", i); hs[i].ID != want {
			t.Errorf("Children[%d] = %q, want %q", i, hs[i].ID, want)
		}
	}
	if hs[distinct].ID != "contested" {
		t.Errorf("last child = %q, want contested", hs[distinct].ID)
	}
}

func testReadersBesideWriters(t *testing.T, s manager.Store) {
	mustCreate(t, s, header("w", "p", 0))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		defer close(stop)
		for n := range 20 {
			if err := s.AppendEvents("w", turn(int64(n*4), n+1, "w")); err != nil {
				t.Error(err)
				return
			}
			if err := s.CreateChild(header(fmt.Sprintf("s%02d", n), "p", time.Duration(n+1)), descriptor()); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				evs, err := s.Events("w")
				if err != nil {
					t.Error(err)
					return
				}
				if len(evs)%4 != 0 {
					t.Errorf("a reader saw %d events: half an append", len(evs))
				}
				if err := agent.Validate(evs); err != nil {
					t.Error(err)
				}
				if _, _, err := s.Children("p"); err != nil {
					t.Error(err)
				}
				if _, err := s.JournalLen("w"); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
}

func testClose(t *testing.T, s manager.Store) {
	mustCreate(t, s, header("c", "p", 0))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Header("c"); err == nil {
		t.Error("Header after Close succeeded")
	}
	if err := s.CreateChild(header("d", "p", 0), descriptor()); err == nil {
		t.Error("CreateChild after Close succeeded")
	}
	if err := s.AddNotice("alice", manager.Notice{Text: "x"}); err == nil {
		t.Error("AddNotice after Close succeeded")
	}
	if _, _, err := s.Children("p"); err == nil {
		t.Error("Children after Close succeeded")
	}
}

func batcher(t *testing.T, s manager.Store) manager.Inboxer {
	t.Helper()
	ib, ok := s.(manager.Inboxer)
	if !ok {
		if _, ok := s.(manager.Batcher); ok {
			t.Fatal("the store can WriteChild but not read an inbox back (Queued)")
		}
		t.Skip("the store has no WriteChild")
	}
	return ib
}

func queuedIDs(t *testing.T, ib manager.Inboxer, id string) []string {
	t.Helper()
	qs, err := ib.Queued(id)
	if err != nil {
		t.Fatalf("Queued(%q): %v", id, err)
	}
	out := []string{}
	for _, q := range qs {
		out = append(out, q.ID)
	}
	return out
}

func testWriteChild(t *testing.T, s manager.Store) {
	ib := batcher(t, s)
	h := header("w1", "principal:local", 0)
	err := ib.WriteChild("w1", manager.ChildWrite{Create: &manager.NewChild{Header: h, Descriptor: descriptor()},
		Enqueue: []manager.QueuedMessage{{ID: "m1", Text: "first", Source: agent.SourceUser}, {ID: "m2", Text: "quiet", Source: agent.SourceReport, Quiet: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Header("w1"); !sameHeader(got, h) {
		t.Errorf("Header after a create write = %+v", got)
	}
	if act, _ := s.Active(); !reflect.DeepEqual(act, []string{"w1"}) {
		t.Errorf("Active = %v; a created child is active", act)
	}
	qs, err := ib.Queued("w1")
	if err != nil || len(qs) != 2 || qs[0].ID != "m1" || qs[0].Text != "first" || !qs[1].Quiet || qs[1].Source != agent.SourceReport {
		t.Fatalf("Queued = %+v, %v", qs, err)
	}
	// A turn claims m1 with its first events.
	if err := ib.WriteChild("w1", manager.ChildWrite{Dequeue: []string{"m1"}, Events: turn(0, 1, "first"),
		Enqueue: []manager.QueuedMessage{{ID: "m3", Text: "third"}}}); err != nil {
		t.Fatal(err)
	}
	if got := queuedIDs(t, ib, "w1"); !reflect.DeepEqual(got, []string{"m2", "m3"}) {
		t.Errorf("Queued after a claim = %v, want [m2 m3] in order", got)
	}
	if n, _ := s.JournalLen("w1"); n != 4 {
		t.Errorf("JournalLen = %d, want 4", n)
	}
	cp := manager.Checkpoint{Seq: 4, Mode: manager.ModeContinuable, Label: "l", Stop: agent.StopCompleted, Closing: "done"}
	if err := ib.WriteChild("w1", manager.ChildWrite{Dequeue: []string{"m2", "m3"}, Settle: &cp}); err != nil {
		t.Fatal(err)
	}
	if act, _ := s.Active(); len(act) != 0 {
		t.Errorf("Active = %v after the settlement", act)
	}
	if got, ok, err := s.Checkpoint("w1"); err != nil || !ok || got.Closing != "done" {
		t.Errorf("Checkpoint = %+v, %v, %v", got, ok, err)
	}
	if got := queuedIDs(t, ib, "w1"); len(got) != 0 {
		t.Errorf("Queued after the settlement = %v", got)
	}
}

func testSettlementNotice(t *testing.T, s manager.Store) {
	ib := batcher(t, s)
	mustCreate(t, s, header("parent", "principal:local", 0))
	mustCreate(t, s, header("kid", "parent", time.Second))
	mustCreate(t, s, header("root-kid", "principal:local", 2*time.Second))
	// To a live parent agent: into its stored inbox.
	cp := manager.Checkpoint{Seq: 0, Mode: manager.ModeContinuable}
	msg := manager.QueuedMessage{ID: "msg-settled", Text: "kid finished", Source: agent.SourceSettled}
	if err := ib.WriteChild("kid", manager.ChildWrite{Settle: &cp, Notify: &manager.ParentNotice{To: "parent", Inbox: true, Message: msg}}); err != nil {
		t.Fatal(err)
	}
	if got := queuedIDs(t, ib, "parent"); !reflect.DeepEqual(got, []string{"msg-settled"}) {
		t.Errorf("parent's inbox = %v, want the settlement notice", got)
	}
	// To a principal: queued as a notice, numbered by the store.
	n := manager.Notice{ChildID: "root-kid", Source: agent.SourceSettled, StopReason: agent.StopCompleted, Text: "root-kid finished"}
	if err := ib.WriteChild("root-kid", manager.ChildWrite{Events: turn(0, 1, "go"), Settle: &manager.Checkpoint{Seq: 4},
		Notify: &manager.ParentNotice{To: "principal:local", Notice: n}}); err != nil {
		t.Fatal(err)
	}
	if act, _ := s.Active(); !reflect.DeepEqual(act, []string{"parent"}) {
		t.Errorf("Active = %v, want only the parent", act)
	}
	got, err := s.TakeNotices("principal:local", nil)
	if err != nil || len(got) != 1 || got[0].ChildID != "root-kid" || got[0].Text != n.Text || got[0].Seq != 1 || got[0].Time.IsZero() {
		t.Errorf("TakeNotices = %+v, %v; want the settlement notice, Seq 1 and a time", got, err)
	}
}

func testWriteChildRefused(t *testing.T, s manager.Store) {
	ib := batcher(t, s)
	mustCreate(t, s, header("r1", "principal:local", 0))
	cp := manager.Checkpoint{Seq: 4}
	// The recipient of the notice does not exist: nothing of the write lands.
	err := ib.WriteChild("r1", manager.ChildWrite{Events: turn(0, 1, "x"), Settle: &cp,
		Enqueue: []manager.QueuedMessage{{ID: "q"}},
		Notify:  &manager.ParentNotice{To: "ghost", Inbox: true, Message: manager.QueuedMessage{ID: "n"}}})
	if err == nil {
		t.Fatal("a settlement notice to an unknown child's inbox was accepted")
	}
	if n, _ := s.JournalLen("r1"); n != 0 {
		t.Errorf("JournalLen = %d after a refused write", n)
	}
	if act, _ := s.Active(); !reflect.DeepEqual(act, []string{"r1"}) {
		t.Errorf("Active = %v after a refused settlement", act)
	}
	if got := queuedIDs(t, ib, "r1"); len(got) != 0 {
		t.Errorf("Queued = %v after a refused write", got)
	}
	// Events that do not continue the journal: refused whole.
	if err := ib.WriteChild("r1", manager.ChildWrite{Events: turn(1, 1, "x"), Settle: &cp}); err == nil {
		t.Error("events with a gap were accepted")
	}
	if act, _ := s.Active(); !reflect.DeepEqual(act, []string{"r1"}) {
		t.Errorf("Active = %v after a refused settlement", act)
	}
	// A notice without a settlement is refused.
	if err := ib.WriteChild("r1", manager.ChildWrite{Notify: &manager.ParentNotice{To: "principal:local"}}); err == nil {
		t.Error("a notice without its settlement was accepted")
	}
	if ns, _ := s.TakeNotices("principal:local", nil); len(ns) != 0 {
		t.Errorf("notices = %+v after refused writes", ns)
	}
}
