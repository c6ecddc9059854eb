// Package storetest is the conformance suite for seam.Store
// implementations. Every backend (the bbolt store in persist, the in-memory
// one in persist/memstore, a future shared one) runs it from its own tests,
// with no skips and no backend-specific branches:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) seam.Store { return memstore.New() })
//	}
//
// The suite pins every method and every ability the manager relies on:
// reads return what was written and never alias it; every per-child method
// answers an unknown id with ErrNotFound (never ErrCorrupt); duplicate ids
// and invalid records are refused; WriteChild applies create, claim, inbox,
// events, settlement and notice whole and refuses a bad write whole;
// journals continue without gaps; Queued keeps admission order; Listings
// list in creation order per parent with the checkpoint gate; Descendants
// list a whole subtree in creation order across levels, paged; notices are
// numbered per address and taken exactly once, also under concurrency;
// Delete removes a child's subtree and refuses a claimed one;
// owner claims are granted, refused to another owner while unexpired (an
// error wrapping ErrOwned), taken over once expired, renewed, revoked by
// the settlement and listed by Residents; their epoch goes up on every
// takeover and a fenced write of a former owner stores nothing; a ctx already done is refused
// before any work; and concurrent writers do not interfere (run it under
// -race). Detecting corrupt bytes needs access to the bytes, so it is each
// backend's own test, not part of this suite; so is what a store knows
// across openings (an exclusive store's stale claims).
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Run runs the suite. open must return a new, empty store for each call;
// the suite closes it when the subtest ends (Close must therefore tolerate
// a second call if open registers its own cleanup).
func Run(t *testing.T, open func(t *testing.T) seam.Store) {
	t.Helper()
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s seam.Store)
	}{
		{"a created child reads back as written", testCreateRead},
		{"returned and passed values do not alias the store", testNoAliasing},
		{"a create refuses duplicates and invalid input, storing nothing", testCreateRefusals},
		{"every per-child method refuses an unknown id without calling it corrupt", testUnknownChild},
		{"appends must continue the journal and are all-or-nothing", testAppendContinuity},
		{"events round-trip with messages, tool calls and usage", testEventContent},
		{"listings come in creation order, isolated by parent", testListingsOrder},
		{"listing pages start after their key and visit every child once", testListingPages},
		{"descendants list one creation order across levels, paged by key", testDescendants},
		{"checkpoints round-trip, are replaced, and pass the gate in a listing", testCheckpoints},
		{"notices come out in order, once, numbered per address", testNotices},
		{"a filtered take leaves the rest queued in order", testNoticesFiltered},
		{"concurrent takers get each notice exactly once", testNoticesTakenOnce},
		{"concurrent appends to different children do not interfere", testConcurrentAppends},
		{"concurrent creates: distinct ids all land, one id lands once", testConcurrentCreate},
		{"readers run beside writers", testReadersBesideWriters},
		{"a child write applies whole: record, claim, inbox, events, settlement", testWriteChild},
		{"a whole short life in one write: record, claim, its message in and out, turn, settlement", testWholeLifeInOneWrite},
		{"one write admits messages and takes some of them and some stored before", testInboxInAndOutInOneWrite},
		{"the inbox keeps admission order across writes", testQueuedOrder},
		{"a settlement and its notice commit together, to an inbox or a queue", testSettlementNotice},
		{"a refused child write leaves no trace", testWriteChildRefused},
		{"a claim is granted, kept by its owner and refused to another", testClaimRefused},
		{"an expired claim is taken over", testClaimTakeover},
		{"Renew extends all of an owner's claims and only those", testRenew},
		{"the settlement revokes the claim; Residents lists the rest", testResidents},
		{"concurrent claims of one child: one owner wins", testConcurrentClaims},
		{"claims carry an epoch that goes up on every takeover", testClaimEpochs},
		{"after a takeover the former owner's fenced writes store nothing", testFencedWrites},
		{"a journal reads from an offset", testEventsFrom},
		{"a write made on a journal that grew since is refused whole", testStaleJournalWrites},
		{"a deleted child is gone with its subtree and everything keyed by it", testDelete},
		{"a claimed child, or one with a claimed descendant, is never deleted", testDeleteClaimed},
		{"a parent has children while one is deleted and another created at once", testDeleteBesideCreate},
		{"questions are stored, answered in place, listed in creation order and deleted with their child", testQuestions},
		{"a ctx already done is refused before any work", testDoneContext},
		{"after Close every method fails and Close may repeat", testClose},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, s)
		})
	}
}

// ctx is the context of every call but those testing a done one.
var ctx = context.Background()

var base = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

// header returns a valid header for id under parent, created at base+offset.
func header(id, parent string, offset time.Duration) seam.Header {
	return seam.Header{
		ID: id, Parent: parent, Principal: "local", Depth: 1, DepthCap: 3,
		Mode: seam.ModeContinuable, Provider: "spawn", Label: "label of " + id,
		Cwd: "/work/" + id, Model: "fast", CreatedAt: base.Add(offset),
	}
}

func descriptor() seam.Descriptor {
	return seam.Descriptor{
		Version: seam.DescriptorVersion, Mode: seam.ModeContinuable, Provider: "spawn",
		Label: "review the parser", Model: "deepseek-chat", Persona: "Be terse.",
		ToolFilter:   &seam.ToolFilter{Allow: []string{"read_file", "list_dir"}},
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"ok":{"type":"boolean"}}}`),
		Session:      "thread-42",
	}
}

// create writes a new child, unclaimed.
func create(s seam.Store, h seam.Header, d seam.Descriptor) error {
	return s.WriteChild(ctx, h.ID, seam.ChildWrite{Create: &seam.NewChild{Header: h, Descriptor: d}})
}

func mustCreate(t *testing.T, s seam.Store, h seam.Header) {
	t.Helper()
	if err := create(s, h, descriptor()); err != nil {
		t.Fatalf("create %q: %v", h.ID, err)
	}
}

// mustClaim creates a child claimed by owner, as the manager creates one.
func mustClaim(t *testing.T, s seam.Store, h seam.Header, owner seam.Owner) {
	t.Helper()
	if err := s.WriteChild(ctx, h.ID, seam.ChildWrite{Create: &seam.NewChild{Header: h, Descriptor: descriptor()}, Claim: &owner}); err != nil {
		t.Fatalf("create %q claimed by %q: %v", h.ID, owner.ID, err)
	}
}

func appendEvents(s seam.Store, id string, evs []agent.Event) error {
	return s.WriteChild(ctx, id, seam.ChildWrite{Events: evs})
}

// listed returns the ids Listings gives for parent, in order.
func listed(t *testing.T, s seam.Store, parent string) []string {
	t.Helper()
	ls, err := s.Listings(ctx, parent, seam.Page{})
	if err != nil {
		t.Fatalf("Listings(%q): %v", parent, err)
	}
	out := []string{}
	for _, l := range ls {
		out = append(out, l.Header.ID)
	}
	return out
}

// residents returns the ids of claimed children, in Residents' order.
func residents(t *testing.T, s seam.Store) []string {
	t.Helper()
	cs, err := s.Residents(ctx)
	if err != nil {
		t.Fatalf("Residents: %v", err)
	}
	out := []string{}
	for _, c := range cs {
		out = append(out, c.ChildID)
	}
	return out
}

// owner is a lease held for an hour from now.
func owner(id string) seam.Owner { return seam.Owner{ID: id, Expires: time.Now().Add(time.Hour)} }

// turn returns a complete turn's events starting at seq.
func turn(seq int64, n int, text string) []agent.Event {
	at := base.Add(time.Duration(seq) * time.Second)
	return []agent.Event{
		{Seq: seq, Kind: agent.EventTurnStart, Time: at, Turn: n},
		{Seq: seq + 1, Kind: agent.EventMessage, Time: at, Turn: n, Source: agent.SourceUser,
			Message: &seam.Message{Role: seam.RoleUser, Content: text}},
		{Seq: seq + 2, Kind: agent.EventMessage, Time: at, Turn: n,
			Message: &seam.Message{Role: seam.RoleAssistant, Content: "done: " + text},
			Usage:   &seam.Usage{InputTokens: 10, OutputTokens: 3}},
		{Seq: seq + 3, Kind: agent.EventTurnEnd, Time: at, Turn: n, StopReason: agent.StopCompleted},
	}
}

func sameHeader(a, b seam.Header) bool {
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

func testCreateRead(t *testing.T, s seam.Store) {
	h := header("c1", seam.PrincipalAddress("local"), 0)
	h.SeedLen = 4
	mustCreate(t, s, h)

	got, err := s.Header(ctx, "c1")
	if err != nil {
		t.Fatalf("Header: %v", err)
	}
	if !sameHeader(got, h) {
		t.Errorf("Header = %+v, want %+v", got, h)
	}
	d, err := s.Descriptor(ctx, "c1")
	if err != nil {
		t.Fatalf("Descriptor: %v", err)
	}
	if !reflect.DeepEqual(d, descriptor()) {
		t.Errorf("Descriptor = %+v, want %+v", d, descriptor())
	}
	if n, err := s.JournalLen(ctx, "c1"); err != nil || n != 0 {
		t.Errorf("JournalLen of a new child = %d, %v; want 0, nil", n, err)
	}
	if evs, err := s.Events(ctx, "c1"); err != nil || len(evs) != 0 {
		t.Errorf("Events of a new child = %v, %v; want none", evs, err)
	}
	if _, ok, err := s.Checkpoint(ctx, "c1"); err != nil || ok {
		t.Errorf("Checkpoint of a new child: ok=%v err=%v; want absent", ok, err)
	}
	if q, err := s.Queued(ctx, "c1"); err != nil || len(q) != 0 {
		t.Errorf("Queued of a new child = %v, %v; want empty", q, err)
	}
	if act := residents(t, s); len(act) != 0 {
		t.Errorf("Residents = %v; a child created without a claim is not resident", act)
	}
	ls, err := s.Listings(ctx, h.Parent, seam.Page{})
	if err != nil || len(ls) != 1 {
		t.Fatalf("Listings = %+v, %v; want the one child", ls, err)
	}
	l := ls[0]
	want := seam.Header{ID: h.ID, Parent: h.Parent, Depth: h.Depth, Mode: h.Mode, Provider: h.Provider, Label: h.Label, Cwd: h.Cwd, Model: h.Model, CreatedAt: h.CreatedAt}
	got.Principal, got.DepthCap, got.SeedLen, got.Session = "", 0, 0, ""
	lh := l.Header
	lh.Principal, lh.DepthCap, lh.SeedLen, lh.Session = "", 0, 0, "" // a listing may leave them out
	if !sameHeader(lh, want) || l.Corrupt || l.Checkpoint != nil || l.HasChildren {
		t.Errorf("Listing = %+v; want the row fields of %+v, no checkpoint, no children", l, want)
	}
}

func testNoAliasing(t *testing.T, s seam.Store) {
	h := header("c1", "p", 0)
	d := descriptor()
	if err := create(s, h, d); err != nil {
		t.Fatal(err)
	}
	// Mutating what was passed in changes nothing stored.
	d.ToolFilter.Allow[0] = "MUTATED"
	d.OutputSchema[2] = 'X'
	evs := turn(0, 1, "hello")
	if err := appendEvents(s, "c1", evs); err != nil {
		t.Fatal(err)
	}
	evs[1].Message.Content = "MUTATED"

	// Mutating what came out changes nothing stored.
	got, err := s.Descriptor(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, descriptor()) {
		t.Fatalf("Descriptor changed with the caller's value: %+v", got)
	}
	got.ToolFilter.Allow[0] = "MUTATED"
	got.OutputSchema[2] = 'X'
	again, err := s.Descriptor(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, descriptor()) {
		t.Errorf("Descriptor changed with a returned value: %+v", again)
	}

	out, err := s.Events(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if !sameEvents(out, turn(0, 1, "hello")) {
		t.Fatalf("Events changed with the caller's value: %+v", out)
	}
	out[1].Message.Content = "MUTATED"
	out2, err := s.Events(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if !sameEvents(out2, turn(0, 1, "hello")) {
		t.Errorf("Events changed with a returned value: %+v", out2)
	}
}

func testCreateRefusals(t *testing.T, s seam.Store) {
	mustCreate(t, s, header("dup", "p", 0))
	if err := create(s, header("dup", "q", time.Second), descriptor()); err == nil {
		t.Errorf("a create of a duplicate id = %v, want refused", err)
	}
	if got := listed(t, s, "q"); len(got) != 0 {
		t.Errorf("a refused duplicate was indexed under its parent: %v", got)
	}
	if h, err := s.Header(ctx, "dup"); err != nil || h.Parent != "p" {
		t.Errorf("a refused duplicate changed the stored header: %+v, %v", h, err)
	}

	bad := func(name string, h seam.Header, d seam.Descriptor) {
		t.Helper()
		if err := create(s, h, d); err == nil {
			t.Errorf("a create accepted %s", name)
		}
		if h.ID != "" {
			if _, err := s.Header(ctx, h.ID); err == nil {
				t.Errorf("a create stored a child with %s", name)
			}
		}
	}
	noParent := header("np", "", 0)
	zeroTime := header("zt", "p", 0)
	zeroTime.CreatedAt = time.Time{}
	v0, v2 := descriptor(), descriptor()
	v0.Version, v2.Version = 0, seam.DescriptorVersion+1
	bad("an empty id", header("", "p", 0), descriptor())
	bad("an empty parent", noParent, descriptor())
	bad("a zero created_at", zeroTime, descriptor())
	bad("descriptor version 0", header("v0", "p", 0), v0)
	bad("an unknown descriptor version", header("v2", "p", 0), v2)
	if got := listed(t, s, "p"); !reflect.DeepEqual(got, []string{"dup"}) {
		t.Errorf("Listings(p) after refusals = %v, want [dup]", got)
	}
	// A create that names another id than the one written is refused.
	if err := s.WriteChild(ctx, "other", seam.ChildWrite{Create: &seam.NewChild{Header: header("named", "p", 0), Descriptor: descriptor()}}); err == nil {
		t.Error("a create under another id was accepted")
	}
}

func testUnknownChild(t *testing.T, s seam.Store) {
	mustCreate(t, s, header("known", "p", 0))
	const id = "ghost-7f3a"
	check := func(method string, err error) {
		t.Helper()
		switch {
		case err == nil:
			t.Errorf("%s(%q) succeeded for an unknown child", method, id)
		case errors.Is(err, seam.ErrCorrupt):
			t.Errorf("%s(%q) = %v: an unknown child is not corrupt", method, id, err)
		case !errors.Is(err, seam.ErrNotFound):
			t.Errorf("%s(%q) = %v: does not match seam.ErrNotFound", method, id, err)
		case !strings.Contains(err.Error(), id):
			t.Errorf("%s(%q) = %v: the error does not name the child", method, id, err)
		}
	}
	_, err := s.Header(ctx, id)
	check("Header", err)
	_, err = s.Descriptor(ctx, id)
	check("Descriptor", err)
	_, err = s.Events(ctx, id)
	check("Events", err)
	_, err = s.EventsFrom(ctx, id, 0)
	check("EventsFrom", err)
	_, _, err = s.ClaimOf(ctx, id)
	check("ClaimOf", err)
	_, err = s.JournalLen(ctx, id)
	check("JournalLen", err)
	check("AppendEvents", appendEvents(s, id, turn(0, 1, "x")))
	check("AppendEvents (empty)", appendEvents(s, id, nil))
	_, _, err = s.Checkpoint(ctx, id)
	check("Checkpoint", err)
	check("SetCheckpoint", s.SetCheckpoint(ctx, id, seam.Checkpoint{Seq: 1}))
	_, err = s.Queued(ctx, id)
	check("Queued", err)
	_, err = s.Delete(ctx, id)
	check("Delete", err)
	o := owner("o1")
	check("WriteChild (claim)", s.WriteChild(ctx, id, seam.ChildWrite{Claim: &o}))
	check("WriteChild (inbox)", s.WriteChild(ctx, id, seam.ChildWrite{Enqueue: []seam.QueuedMessage{{ID: "m"}}}))
	check("WriteChild (settle)", s.WriteChild(ctx, id, seam.ChildWrite{Settle: &seam.Checkpoint{}}))
	if act := residents(t, s); len(act) != 0 {
		t.Errorf("Residents = %v after refused claims, want none", act)
	}
	if ls, err := s.Listings(ctx, "nobody", seam.Page{}); err != nil || len(ls) != 0 {
		t.Errorf("Listings of an unknown parent = %v, %v; want empty, nil", ls, err)
	}
}

func testAppendContinuity(t *testing.T, s seam.Store) {
	mustCreate(t, s, header("c", "p", 0))
	first := turn(0, 1, "one")[:3]
	if err := appendEvents(s, "c", first); err != nil {
		t.Fatalf("append 0..2: %v", err)
	}
	if err := appendEvents(s, "c", nil); err != nil {
		t.Fatalf("an empty append: %v", err)
	}
	if err := appendEvents(s, "c", turn(0, 1, "one")[3:]); err != nil {
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
		if err := appendEvents(s, "c", tc.events); err == nil {
			t.Errorf("AppendEvents accepted %s", tc.name)
		}
		if n, _ := s.JournalLen(ctx, "c"); n != 4 {
			t.Fatalf("after refusing %s, JournalLen = %d, want 4 (all-or-nothing)", tc.name, n)
		}
	}
	if err := appendEvents(s, "c", []agent.Event{ev(4), ev(5)}); err != nil {
		t.Fatalf("append 4..5: %v", err)
	}
	got, err := s.Events(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	want := append(turn(0, 1, "one"), ev(4), ev(5))
	if !sameEvents(got, want) {
		t.Errorf("Events = %+v\nwant %+v", got, want)
	}
	if n, err := s.JournalLen(ctx, "c"); err != nil || n != 6 {
		t.Errorf("JournalLen = %d, %v; want 6", n, err)
	}
}

func testEventContent(t *testing.T, s seam.Store) {
	mustCreate(t, s, header("c", "p", 0))
	at := base.In(time.FixedZone("CET", 3600))
	events := []agent.Event{
		{Seq: 0, Kind: agent.EventTurnStart, Time: at, Turn: 1},
		{Seq: 1, Kind: agent.EventMessage, Time: at, Turn: 1, Source: agent.SourceReport,
			Message: &seam.Message{Role: seam.RoleUser, Content: "report: ✓ «quoted» \"x\"\n"}},
		{Seq: 2, Kind: agent.EventMessage, Time: at, Turn: 1,
			Message: &seam.Message{Role: seam.RoleAssistant, ToolCalls: []seam.ToolCall{
				{ID: "call_1", Name: "read_file", Arguments: `{"path":"a.go"}`}}},
			Usage: &seam.Usage{InputTokens: 1200, OutputTokens: 40}},
		{Seq: 3, Kind: agent.EventMessage, Time: at, Turn: 1,
			Message: &seam.Message{Role: seam.RoleTool, ToolCallID: "call_1", Content: "package a"}},
		{Seq: 4, Kind: agent.EventMessage, Time: at, Turn: 1,
			Message: &seam.Message{Role: seam.RoleAssistant, Refusal: "no"}},
		{Seq: 5, Kind: agent.EventTurnEnd, Time: at, Turn: 1, StopReason: agent.StopError, Diagnostic: "model failed"},
	}
	if err := appendEvents(s, "c", events); err != nil {
		t.Fatal(err)
	}
	got, err := s.Events(ctx, "c")
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

func testListingsOrder(t *testing.T, s seam.Store) {
	p, q := seam.PrincipalAddress("alice"), seam.PrincipalAddress("bob")
	// Created out of order on purpose; two share a timestamp (ties by id).
	for _, h := range []seam.Header{
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
		ls, err := s.Listings(ctx, parent, seam.Page{})
		if err != nil {
			t.Fatalf("Listings(%q): %v", parent, err)
		}
		got := []string{}
		for _, l := range ls {
			got = append(got, l.Header.ID)
			if l.Header.Parent != parent || l.Corrupt {
				t.Errorf("Listings(%q) returned %+v", parent, l)
			}
			if l.HasChildren != (l.Header.ID == "c1") {
				t.Errorf("Listings(%q): %s HasChildren = %v", parent, l.Header.ID, l.HasChildren)
			}
		}
		if !reflect.DeepEqual(got, append([]string{}, want...)) {
			t.Errorf("Listings(%q) = %v, want %v", parent, got, want)
		}
	}
	check(p, "old", "tie-a", "tie-b", "c1", "c2", "c3")
	check(q, "q1")
	check("c1", "g1")
	check("c2")
	check(seam.PrincipalAddress("carol"))
}

func testCheckpoints(t *testing.T, s seam.Store) {
	mustCreate(t, s, header("c", "p", 0))
	mustCreate(t, s, header("d", "p", time.Second))
	if err := appendEvents(s, "c", turn(0, 1, "a")); err != nil { // 4 events
		t.Fatal(err)
	}
	cp := seam.Checkpoint{Seq: 4, Mode: seam.ModeContinuable, Label: "x",
		Usage: seam.Usage{InputTokens: 100, OutputTokens: 7, CostUSD: 0.25}, Stop: agent.StopAborted}
	if err := s.SetCheckpoint(ctx, "c", cp); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.Checkpoint(ctx, "c")
	if err != nil || !ok || !reflect.DeepEqual(got, cp) {
		t.Errorf("Checkpoint = %+v, %v, %v; want %+v", got, ok, err, cp)
	}
	cp2 := seam.Checkpoint{Seq: 4, Mode: seam.ModeContinuable, Label: "y"}
	if err := s.SetCheckpoint(ctx, "c", cp2); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.Checkpoint(ctx, "c"); err != nil || !ok || !reflect.DeepEqual(got, cp2) {
		t.Errorf("Checkpoint after replace = %+v, %v, %v; want %+v", got, ok, err, cp2)
	}
	if _, ok, err := s.Checkpoint(ctx, "d"); err != nil || ok {
		t.Errorf("a sibling's checkpoint: ok=%v err=%v; want absent", ok, err)
	}
	// A checkpoint that is not current is a cache miss, never stored.
	if err := s.SetCheckpoint(ctx, "d", seam.Checkpoint{Seq: 5}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Checkpoint(ctx, "d"); ok {
		t.Error("a checkpoint ahead of the journal was stored")
	}
	// An append makes the stored checkpoint stale: it is dropped.
	if err := appendEvents(s, "c", turn(4, 2, "b")); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Checkpoint(ctx, "c"); ok {
		t.Error("a checkpoint survived a journal append")
	}
	// A listing carries the current checkpoint with its gate.
	cp3 := seam.Checkpoint{Seq: 8, Mode: seam.ModeContinuable, Label: "z", Stop: agent.StopCompleted, Closing: "bye",
		Usage: seam.Usage{InputTokens: 3, OutputTokens: 1, CostUSD: 0.5}}
	if err := s.SetCheckpoint(ctx, "c", cp3); err != nil {
		t.Fatal(err)
	}
	ls, err := s.Listings(ctx, "p", seam.Page{})
	if err != nil || len(ls) != 2 {
		t.Fatalf("Listings = %+v, %v", ls, err)
	}
	if l := ls[0]; l.Checkpoint == nil || !reflect.DeepEqual(*l.Checkpoint, cp3) || l.JournalLen != 8 {
		t.Errorf("c's listing = %+v; want its checkpoint and JournalLen 8", l)
	}
	if l := ls[1]; l.Checkpoint != nil {
		t.Errorf("d's listing has a checkpoint: %+v", l.Checkpoint)
	}
	if err := appendEvents(s, "c", turn(8, 3, "c")); err != nil {
		t.Fatal(err)
	}
	if ls, _ := s.Listings(ctx, "p", seam.Page{}); len(ls) != 2 || ls[0].Checkpoint != nil {
		t.Errorf("a listing after an append still has the stale checkpoint: %+v", ls)
	}
}

func testNotices(t *testing.T, s seam.Store) {
	given := base.Add(time.Hour)
	before := time.Now()
	for i, n := range []seam.Notice{
		{ChildID: "c1", Source: agent.SourceReport, Text: "first", Time: given},
		{ChildID: "c2", Source: agent.SourceSettled, Text: "second", Seq: 999},
		{ChildID: "c1", Source: agent.SourceSettled, Text: "third"},
	} {
		if err := s.AddNotice(ctx, "alice", n); err != nil {
			t.Fatalf("AddNotice %d: %v", i, err)
		}
	}
	if err := s.AddNotice(ctx, "bob", seam.Notice{ChildID: "b1", Source: agent.SourceReport, Text: "bob's"}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddNotice(ctx, "", seam.Notice{Text: "nobody's"}); err == nil {
		t.Error("AddNotice accepted an empty principal")
	}
	got, err := s.TakeNotices(ctx, "alice", nil)
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
	if again, err := s.TakeNotices(ctx, "alice", nil); err != nil || len(again) != 0 {
		t.Errorf("second TakeNotices(alice) = %+v, %v; want none (taken once)", again, err)
	}
	if err := s.AddNotice(ctx, "alice", seam.Notice{ChildID: "c9", Text: "later"}); err != nil {
		t.Fatal(err)
	}
	later, err := s.TakeNotices(ctx, "alice", nil)
	if err != nil || len(later) != 1 || later[0].Seq <= got[2].Seq {
		t.Errorf("a notice after a take = %+v, %v; want one with Seq > %d (never reused)", later, err, got[2].Seq)
	}
	bob, err := s.TakeNotices(ctx, "bob", nil)
	if err != nil || len(bob) != 1 || bob[0].Text != "bob's" {
		t.Errorf("TakeNotices(bob) = %+v, %v", bob, err)
	}
	if none, err := s.TakeNotices(ctx, "carol", nil); err != nil || len(none) != 0 {
		t.Errorf("TakeNotices(carol) = %+v, %v; want none", none, err)
	}
}

func testNoticesFiltered(t *testing.T, s seam.Store) {
	for _, n := range []seam.Notice{
		{ChildID: "c1", Session: "s1", Text: "one", StopReason: agent.StopCompleted},
		{ChildID: "c2", Session: "s2", Text: "two"},
		{ChildID: "c3", Session: "s1", Text: "three"},
		{ChildID: "c4", Session: "s2", Text: "four"},
	} {
		if err := s.AddNotice(ctx, "alice", n); err != nil {
			t.Fatal(err)
		}
	}
	texts := func(ns []seam.Notice) []string {
		out := []string{}
		for _, n := range ns {
			out = append(out, n.Text)
		}
		return out
	}
	s1, err := s.TakeNotices(ctx, "alice", func(n seam.Notice) bool { return n.Session == "s1" })
	if err != nil || !reflect.DeepEqual(texts(s1), []string{"one", "three"}) {
		t.Fatalf("take of session s1 = %v, %v; want [one three]", texts(s1), err)
	}
	if s1[0].StopReason != agent.StopCompleted || s1[0].Session != "s1" {
		t.Errorf("notice fields lost: %+v", s1[0])
	}
	if again, _ := s.TakeNotices(ctx, "alice", func(n seam.Notice) bool { return n.Session == "s1" }); len(again) != 0 {
		t.Errorf("second take of s1 = %v; want none", texts(again))
	}
	rest, err := s.TakeNotices(ctx, "alice", nil)
	if err != nil || !reflect.DeepEqual(texts(rest), []string{"two", "four"}) {
		t.Errorf("the rest = %v, %v; want [two four] in order", texts(rest), err)
	}
}

func testConcurrentAppends(t *testing.T, s seam.Store) {
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
				if err := appendEvents(s, id, turn(int64(n*4), n+1, id)); err != nil {
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
		got, err := s.Events(ctx, id)
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

func testConcurrentCreate(t *testing.T, s seam.Store) {
	const distinct, racers = 32, 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range distinct {
		wg.Go(func() {
			if err := create(s, header(fmt.Sprintf("c%02d", i), "p", time.Duration(i)), descriptor()); err != nil {
				t.Errorf("create c%02d: %v", i, err)
			}
		})
	}
	for i := range racers {
		wg.Go(func() {
			h := header("contested", "p", time.Hour)
			h.Label = fmt.Sprintf("racer %d", i)
			if create(s, h, descriptor()) == nil {
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
	got := listed(t, s, "p")
	if len(got) != distinct+1 {
		t.Fatalf("Listings = %d children, want %d", len(got), distinct+1)
	}
	for i := range distinct {
		if want := fmt.Sprintf("c%02d", i); got[i] != want {
			t.Errorf("Listings[%d] = %q, want %q", i, got[i], want)
		}
	}
	if got[distinct] != "contested" {
		t.Errorf("last child = %q, want contested", got[distinct])
	}
}

func testReadersBesideWriters(t *testing.T, s seam.Store) {
	mustCreate(t, s, header("w", "p", 0))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		defer close(stop)
		for n := range 20 {
			if err := appendEvents(s, "w", turn(int64(n*4), n+1, "w")); err != nil {
				t.Error(err)
				return
			}
			if err := create(s, header(fmt.Sprintf("s%02d", n), "p", time.Duration(n+1)), descriptor()); err != nil {
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
				evs, err := s.Events(ctx, "w")
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
				if _, err := s.Listings(ctx, "p", seam.Page{}); err != nil {
					t.Error(err)
				}
				if _, err := s.JournalLen(ctx, "w"); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
}

func testClose(t *testing.T, s seam.Store) {
	mustCreate(t, s, header("c", "p", 0))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Header(ctx, "c"); err == nil {
		t.Error("Header after Close succeeded")
	}
	if err := create(s, header("d", "p", 0), descriptor()); err == nil {
		t.Error("a create after Close succeeded")
	}
	if err := s.AddNotice(ctx, "alice", seam.Notice{Text: "x"}); err == nil {
		t.Error("AddNotice after Close succeeded")
	}
	if _, err := s.Listings(ctx, "p", seam.Page{}); err == nil {
		t.Error("Listings after Close succeeded")
	}
	if _, err := s.Residents(ctx); err == nil {
		t.Error("Residents after Close succeeded")
	}
	if err := s.Renew(ctx, owner("o1")); err == nil {
		t.Error("Renew after Close succeeded")
	}
	if _, err := s.Delete(ctx, "c"); err == nil {
		t.Error("Delete after Close succeeded")
	}
}

func queuedIDs(t *testing.T, s seam.Store, id string) []string {
	t.Helper()
	qs, err := s.Queued(ctx, id)
	if err != nil {
		t.Fatalf("Queued(%q): %v", id, err)
	}
	out := []string{}
	for _, q := range qs {
		out = append(out, q.ID)
	}
	return out
}

func testWriteChild(t *testing.T, s seam.Store) {
	h := header("w1", "principal:local", 0)
	o := owner("o1")
	err := s.WriteChild(ctx, "w1", seam.ChildWrite{Create: &seam.NewChild{Header: h, Descriptor: descriptor()}, Claim: &o, Events: turn(0, 1, "seed"),
		Enqueue: []seam.QueuedMessage{{ID: "m1", Text: "first", Source: agent.SourceUser}, {ID: "m2", Text: "quiet", Source: agent.SourceReport, Quiet: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Header(ctx, "w1"); !sameHeader(got, h) {
		t.Errorf("Header after a create write = %+v", got)
	}
	if act := residents(t, s); !reflect.DeepEqual(act, []string{"w1"}) {
		t.Errorf("Residents = %v; a child created with a claim is resident", act)
	}
	if evs, err := s.Events(ctx, "w1"); err != nil || !sameEvents(evs, turn(0, 1, "seed")) {
		t.Errorf("Events after a create with events = %+v, %v", evs, err)
	}
	qs, err := s.Queued(ctx, "w1")
	if err != nil || len(qs) != 2 || qs[0].ID != "m1" || qs[0].Text != "first" || !qs[1].Quiet || qs[1].Source != agent.SourceReport {
		t.Fatalf("Queued = %+v, %v", qs, err)
	}
	// A turn claims m1 with its first events.
	if err := s.WriteChild(ctx, "w1", seam.ChildWrite{Dequeue: []string{"m1"}, Events: turn(4, 2, "first"),
		Enqueue: []seam.QueuedMessage{{ID: "m3", Text: "third"}}}); err != nil {
		t.Fatal(err)
	}
	if got := queuedIDs(t, s, "w1"); !reflect.DeepEqual(got, []string{"m2", "m3"}) {
		t.Errorf("Queued after a claim = %v, want [m2 m3] in order", got)
	}
	if n, _ := s.JournalLen(ctx, "w1"); n != 8 {
		t.Errorf("JournalLen = %d, want 8", n)
	}
	cp := seam.Checkpoint{Seq: 8, Mode: seam.ModeContinuable, Label: "l", Stop: agent.StopCompleted, Closing: "done"}
	if err := s.WriteChild(ctx, "w1", seam.ChildWrite{Dequeue: []string{"m2", "m3"}, Settle: &cp}); err != nil {
		t.Fatal(err)
	}
	if act := residents(t, s); len(act) != 0 {
		t.Errorf("Residents = %v after the settlement", act)
	}
	if got, ok, err := s.Checkpoint(ctx, "w1"); err != nil || !ok || got.Closing != "done" {
		t.Errorf("Checkpoint = %+v, %v, %v", got, ok, err)
	}
	if got := queuedIDs(t, s, "w1"); len(got) != 0 {
		t.Errorf("Queued after the settlement = %v", got)
	}
}

// A short foreground turn whose record lingered (manager.GatedDriver)
// commits everything at once: the message is queued and taken in the same
// write, and the settlement revokes the claim made in it.
func testWholeLifeInOneWrite(t *testing.T, s seam.Store) {
	h := header("once", "principal:local", 0)
	o := owner("o1")
	cp := seam.Checkpoint{Seq: 4, Mode: seam.ModeContinuable, Label: "l", Stop: agent.StopCompleted, Closing: "done"}
	err := s.WriteChild(ctx, "once", seam.ChildWrite{Create: &seam.NewChild{Header: h, Descriptor: descriptor()}, Claim: &o,
		Enqueue: []seam.QueuedMessage{{ID: "m1", Text: "first", Source: agent.SourceUser}}, Dequeue: []string{"m1"},
		Events: turn(0, 1, "first"), Settle: &cp})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Header(ctx, "once"); !sameHeader(got, h) {
		t.Errorf("Header = %+v", got)
	}
	if evs, err := s.Events(ctx, "once"); err != nil || !sameEvents(evs, turn(0, 1, "first")) {
		t.Errorf("Events = %+v, %v", evs, err)
	}
	if got := queuedIDs(t, s, "once"); len(got) != 0 {
		t.Errorf("Queued = %v; the message was taken in the same write", got)
	}
	if act := residents(t, s); len(act) != 0 {
		t.Errorf("Residents = %v; the settlement revokes the claim made in the same write", act)
	}
	if got, ok, err := s.Checkpoint(ctx, "once"); err != nil || !ok || got.Closing != "done" {
		t.Errorf("Checkpoint = %+v, %v, %v", got, ok, err)
	}
	if got := listed(t, s, "principal:local"); !reflect.DeepEqual(got, []string{"once"}) {
		t.Errorf("listed = %v", got)
	}
}

// A write may take a message it admits itself beside ones stored before:
// what it admits and does not take stays, in admission order.
func testInboxInAndOutInOneWrite(t *testing.T, s seam.Store) {
	h := header("io", "principal:local", 0)
	err := s.WriteChild(ctx, "io", seam.ChildWrite{Create: &seam.NewChild{Header: h, Descriptor: descriptor()},
		Enqueue: []seam.QueuedMessage{{ID: "old-1", Text: "a"}, {ID: "old-2", Text: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	err = s.WriteChild(ctx, "io", seam.ChildWrite{Events: turn(0, 1, "a"),
		Enqueue: []seam.QueuedMessage{{ID: "new-1", Text: "c"}, {ID: "new-2", Text: "d"}, {ID: "new-3", Text: "e"}},
		Dequeue: []string{"new-2", "old-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := queuedIDs(t, s, "io"); !reflect.DeepEqual(got, []string{"old-2", "new-1", "new-3"}) {
		t.Errorf("Queued = %v, want [old-2 new-1 new-3]", got)
	}
	// Taking only what the same write admits leaves the stored ones.
	err = s.WriteChild(ctx, "io", seam.ChildWrite{Enqueue: []seam.QueuedMessage{{ID: "new-4", Text: "f"}}, Dequeue: []string{"new-4"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := queuedIDs(t, s, "io"); !reflect.DeepEqual(got, []string{"old-2", "new-1", "new-3"}) {
		t.Errorf("Queued after admitting and taking new-4 = %v, want [old-2 new-1 new-3]", got)
	}
}

func testSettlementNotice(t *testing.T, s seam.Store) {
	o := owner("o1")
	mustClaim(t, s, header("parent", "principal:local", 0), o)
	mustClaim(t, s, header("kid", "parent", time.Second), o)
	mustClaim(t, s, header("root-kid", "principal:local", 2*time.Second), o)
	// To a live parent agent: into its stored inbox.
	cp := seam.Checkpoint{Seq: 0, Mode: seam.ModeContinuable}
	msg := seam.QueuedMessage{ID: "msg-settled", Text: "kid finished", Source: agent.SourceSettled}
	if err := s.WriteChild(ctx, "kid", seam.ChildWrite{Settle: &cp, Notify: &seam.ParentNotice{To: "parent", Inbox: true, Message: msg}}); err != nil {
		t.Fatal(err)
	}
	if got := queuedIDs(t, s, "parent"); !reflect.DeepEqual(got, []string{"msg-settled"}) {
		t.Errorf("parent's inbox = %v, want the settlement notice", got)
	}
	// To a principal: queued as a notice, numbered by the store.
	n := seam.Notice{ChildID: "root-kid", Source: agent.SourceSettled, StopReason: agent.StopCompleted, Text: "root-kid finished"}
	if err := s.WriteChild(ctx, "root-kid", seam.ChildWrite{Events: turn(0, 1, "go"), Settle: &seam.Checkpoint{Seq: 4},
		Notify: &seam.ParentNotice{To: "principal:local", Notice: n}}); err != nil {
		t.Fatal(err)
	}
	if act := residents(t, s); !reflect.DeepEqual(act, []string{"parent"}) {
		t.Errorf("Residents = %v, want only the parent", act)
	}
	if cp, ok, _ := s.Checkpoint(ctx, "root-kid"); !ok || cp.Seq != 4 {
		t.Errorf("root-kid's settlement checkpoint = %+v, %v", cp, ok)
	}
	got, err := s.TakeNotices(ctx, "principal:local", nil)
	if err != nil || len(got) != 1 || got[0].ChildID != "root-kid" || got[0].Text != n.Text || got[0].Seq != 1 || got[0].Time.IsZero() {
		t.Errorf("TakeNotices = %+v, %v; want the settlement notice, Seq 1 and a time", got, err)
	}
}

func testWriteChildRefused(t *testing.T, s seam.Store) {
	mustClaim(t, s, header("r1", "principal:local", 0), owner("o1"))
	cp := seam.Checkpoint{Seq: 4}
	// The recipient of the notice does not exist: nothing of the write lands.
	err := s.WriteChild(ctx, "r1", seam.ChildWrite{Events: turn(0, 1, "x"), Settle: &cp,
		Enqueue: []seam.QueuedMessage{{ID: "q"}},
		Notify:  &seam.ParentNotice{To: "ghost", Inbox: true, Message: seam.QueuedMessage{ID: "n"}}})
	if err == nil {
		t.Fatal("a settlement notice to an unknown child's inbox was accepted")
	}
	if n, _ := s.JournalLen(ctx, "r1"); n != 0 {
		t.Errorf("JournalLen = %d after a refused write", n)
	}
	if act := residents(t, s); !reflect.DeepEqual(act, []string{"r1"}) {
		t.Errorf("Residents = %v after a refused settlement", act)
	}
	if got := queuedIDs(t, s, "r1"); len(got) != 0 {
		t.Errorf("Queued = %v after a refused write", got)
	}
	// Events that do not continue the journal: refused whole.
	if err := s.WriteChild(ctx, "r1", seam.ChildWrite{Events: turn(1, 1, "x"), Settle: &cp}); err == nil {
		t.Error("events with a gap were accepted")
	}
	if act := residents(t, s); !reflect.DeepEqual(act, []string{"r1"}) {
		t.Errorf("Residents = %v after a refused settlement", act)
	}
	// A notice without a settlement is refused.
	if err := s.WriteChild(ctx, "r1", seam.ChildWrite{Notify: &seam.ParentNotice{To: "principal:local"}}); err == nil {
		t.Error("a notice without its settlement was accepted")
	}
	// A claim another owner holds refuses the write whole: no inbox, no
	// events, no settlement, no notice.
	other := owner("o2")
	n := seam.Notice{ChildID: "r1", Text: "r1 finished"}
	err = s.WriteChild(ctx, "r1", seam.ChildWrite{Claim: &other, Enqueue: []seam.QueuedMessage{{ID: "q"}}, Events: turn(0, 1, "x"),
		Settle: &cp, Notify: &seam.ParentNotice{To: "principal:local", Notice: n}})
	if !errors.Is(err, seam.ErrOwned) {
		t.Errorf("a write claiming another owner's child = %v, want ErrOwned", err)
	}
	if n, _ := s.JournalLen(ctx, "r1"); n != 0 {
		t.Errorf("JournalLen = %d after a refused claim", n)
	}
	if got := queuedIDs(t, s, "r1"); len(got) != 0 {
		t.Errorf("Queued = %v after a refused claim", got)
	}
	if cs, _ := s.Residents(ctx); len(cs) != 1 || cs[0].Owner.ID != "o1" {
		t.Errorf("Residents = %+v after a refused claim, want r1 still o1's", cs)
	}
	// A claim without an owner id is refused.
	if err := s.WriteChild(ctx, "r1", seam.ChildWrite{Claim: &seam.Owner{Expires: time.Now().Add(time.Hour)}}); err == nil {
		t.Error("a claim without an owner id was accepted")
	}
	if ns, _ := s.TakeNotices(ctx, "principal:local", nil); len(ns) != 0 {
		t.Errorf("notices = %+v after refused writes", ns)
	}
}

// A page is the children after its key, at most its limit; following the
// last key of each page visits every child once, in order, also while
// later children are being created, and a key that names no child (one
// between two) still starts at the next.
func testListingPages(t *testing.T, s seam.Store) {
	p := seam.PrincipalAddress("pager")
	var all []string
	for i := range 23 {
		off := time.Duration(i/2) * time.Second // pairs share a time: ties by id
		id := fmt.Sprintf("c%02d", i)
		mustCreate(t, s, header(id, p, off))
		all = append(all, id)
	}
	mustCreate(t, s, header("other", seam.PrincipalAddress("someone-else"), 0))
	page := func(after seam.ListingKey, limit int) []seam.Listing {
		t.Helper()
		ls, err := s.Listings(ctx, p, seam.Page{After: after, Limit: limit})
		if err != nil {
			t.Fatalf("Listings(after %v, limit %d): %v", after, limit, err)
		}
		if limit > 0 && len(ls) > limit {
			t.Fatalf("a page of limit %d has %d children", limit, len(ls))
		}
		return ls
	}
	var got []string
	var after seam.ListingKey
	created := 0
	for {
		ls := page(after, 5)
		if len(ls) == 0 {
			break
		}
		for _, l := range ls {
			got = append(got, l.Header.ID)
		}
		after = ls[len(ls)-1].Key()
		if created < 4 { // later children join the end while paging
			id := fmt.Sprintf("late%d", created)
			mustCreate(t, s, header(id, p, time.Hour+time.Duration(created)*time.Second))
			all = append(all, id)
			created++
		}
	}
	if !reflect.DeepEqual(got, all) {
		t.Errorf("paging visited %v, want each child once in order: %v", got, all)
	}
	// A key between two children: the page starts at the next one.
	between := seam.ListingKey{CreatedAt: base.Add(3 * time.Second), ID: "c06x"}
	if ls := page(between, 2); len(ls) != 2 || ls[0].Header.ID != "c07" || ls[1].Header.ID != "c08" {
		t.Errorf("a page after %v = %v, want c07, c08", between, ls)
	}
	// The zero key and no limit: everything.
	if ls := page(seam.ListingKey{}, 0); len(ls) != len(all) {
		t.Errorf("an unbounded page has %d children, want %d", len(ls), len(all))
	}
	// Past the end: nothing.
	if ls := page(seam.ListingKey{CreatedAt: base.Add(48 * time.Hour)}, 3); len(ls) != 0 {
		t.Errorf("a page past the end = %v, want none", ls)
	}
}
