package persist

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/persist/storetest"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) seam.Store { return openTest(t, t.TempDir()) })
}

func TestShared(t *testing.T) {
	storetest.RunShared(t, func(t *testing.T) (seam.Store, seam.Store) {
		s := openTest(t, t.TempDir())
		return s, s
	})
}

var ctx = context.Background()

func createChild(s *Store, h seam.Header, d seam.Descriptor) error {
	return s.WriteChild(ctx, h.ID, seam.ChildWrite{Create: &seam.NewChild{Header: h, Descriptor: d}})
}

func appendTo(s *Store, id string, evs []agent.Event) error {
	return s.WriteChild(ctx, id, seam.ChildWrite{Events: evs})
}

// listedIDs returns the ids Listings gives for parent, in order.
func listedIDs(t testing.TB, s *Store, parent string) []string {
	t.Helper()
	ls, err := s.Listings(ctx, parent, seam.Page{})
	if err != nil {
		t.Fatalf("Listings(%q): %v", parent, err)
	}
	var out []string
	for _, l := range ls {
		out = append(out, l.Header.ID)
	}
	return out
}

func openTest(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := Open(dir, Options{LockTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func testHeader(id, parent string, offset time.Duration) seam.Header {
	return seam.Header{ID: id, Parent: parent, Principal: "local", Depth: 1, DepthCap: 3,
		Mode: seam.ModeContinuable, Provider: "spawn", Label: "label " + id, Cwd: "/w",
		CreatedAt: t0.Add(offset)}
}

func testDescriptor() seam.Descriptor {
	return seam.Descriptor{Version: seam.DescriptorVersion, Mode: seam.ModeContinuable,
		Provider: "spawn", Label: "lbl", ToolFilter: &seam.ToolFilter{Deny: []string{"shell"}}}
}

func testTurn(seq int64, text string) []agent.Event {
	return []agent.Event{
		{Seq: seq, Kind: agent.EventTurnStart, Time: t0, Turn: 1},
		{Seq: seq + 1, Kind: agent.EventMessage, Time: t0, Turn: 1, Source: agent.SourceUser,
			Message: &seam.Message{Role: seam.RoleUser, Content: text}},
		{Seq: seq + 2, Kind: agent.EventTurnEnd, Time: t0, Turn: 1, StopReason: agent.StopCompleted},
	}
}

func TestOpenCreatesPrivateDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "mcp-subagent")
	s := openTest(t, dir)
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("data directory mode = %o, want 700", perm)
	}
	if want := filepath.Join(dir, FileName); s.Path() != want {
		t.Errorf("Path = %s, want %s", s.Path(), want)
	}
	if _, err := os.Stat(s.Path()); err != nil {
		t.Errorf("database file: %v", err)
	}
}

func TestReopenKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	p := seam.PrincipalAddress("local")
	h := testHeader("c1", p, 0)
	if err := createChild(s, h, testDescriptor()); err != nil {
		t.Fatal(err)
	}
	if err := createChild(s, testHeader("c2", p, time.Second), testDescriptor()); err != nil {
		t.Fatal(err)
	}
	events := append(testTurn(0, "one"), testTurn(3, "two")...)
	if err := appendTo(s, "c1", events); err != nil {
		t.Fatal(err)
	}
	cp := seam.Checkpoint{Seq: int64(len(events)), Mode: seam.ModeContinuable, Label: "x"}
	if err := s.SetCheckpoint(ctx, "c1", cp); err != nil {
		t.Fatal(err)
	}
	if err := s.AddNotice(ctx, "local", seam.Notice{ChildID: "c1", Source: agent.SourceSettled, Text: "done", Time: t0}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddNotice(ctx, "local", seam.Notice{ChildID: "c2", Source: agent.SourceReport, Text: "note", Time: t0}); err != nil {
		t.Fatal(err)
	}
	lease := seam.Owner{ID: "o1", Expires: time.Now().Add(time.Hour)}
	for _, id := range []string{"c1", "c2"} {
		if err := s.WriteChild(ctx, id, seam.ChildWrite{Claim: &lease}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	r := openTest(t, dir)
	if got, err := r.Header(ctx, "c1"); err != nil || !got.CreatedAt.Equal(h.CreatedAt) || got.Label != h.Label || got.Parent != p {
		t.Errorf("Header after reopen = %+v, %v", got, err)
	}
	if got, err := r.Descriptor(ctx, "c1"); err != nil || !reflect.DeepEqual(got, testDescriptor()) {
		t.Errorf("Descriptor after reopen = %+v, %v", got, err)
	}
	got, err := r.Events(ctx, "c1")
	if err != nil || len(got) != len(events) {
		t.Fatalf("Events after reopen = %d events, %v; want %d", len(got), err, len(events))
	}
	for i := range got {
		if got[i].Seq != events[i].Seq || got[i].Kind != events[i].Kind || !got[i].Time.Equal(events[i].Time) {
			t.Errorf("event %d = %+v, want %+v", i, got[i], events[i])
		}
	}
	if n, err := r.JournalLen(ctx, "c1"); err != nil || n != 6 {
		t.Errorf("JournalLen after reopen = %d, %v", n, err)
	}
	if c, ok, err := r.Checkpoint(ctx, "c1"); err != nil || !ok || !reflect.DeepEqual(c, cp) {
		t.Errorf("Checkpoint after reopen = %+v, %v, %v", c, ok, err)
	}
	if err := appendTo(r, "c1", testTurn(6, "three")); err != nil {
		t.Errorf("the journal does not continue after reopen: %v", err)
	}
	if got := listedIDs(t, r, p); !reflect.DeepEqual(got, []string{"c1", "c2"}) {
		t.Errorf("Listings after reopen = %v", got)
	}
	// The claims survive the reopen, but their owner held the lock of an
	// earlier opening: they read as stale (zero Expires), and another
	// owner takes one over at once though its lease has an hour to run.
	want := []seam.Claim{{ChildID: "c1", Owner: seam.Owner{ID: "o1"}, Epoch: 1}, {ChildID: "c2", Owner: seam.Owner{ID: "o1"}, Epoch: 1}}
	if cs, err := r.Residents(ctx); err != nil || !reflect.DeepEqual(cs, want) {
		t.Errorf("Residents after reopen = %+v, %v; want %+v", cs, err, want)
	}
	next := seam.Owner{ID: "o2", Expires: time.Now().Add(time.Hour)}
	if err := r.WriteChild(ctx, "c1", seam.ChildWrite{Claim: &next}); err != nil {
		t.Errorf("claiming a child of an earlier opening's owner = %v, want granted", err)
	}
	if cs, _ := r.Residents(ctx); len(cs) != 2 || cs[0].Owner.ID != "o2" || !cs[0].Owner.Expires.Equal(next.Expires) || cs[1].Owner.Expires != (time.Time{}) {
		t.Errorf("Residents after the takeover = %+v", cs)
	}
	// Once the earlier owner claims through this opening, its lease counts
	// again.
	if err := r.WriteChild(ctx, "c2", seam.ChildWrite{Claim: &lease}); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteChild(ctx, "c2", seam.ChildWrite{Claim: &next}); !errors.Is(err, seam.ErrOwned) {
		t.Errorf("claiming a child its owner renewed through this opening = %v, want ErrOwned", err)
	}
	ns, err := r.TakeNotices(ctx, "local", nil)
	if err != nil || len(ns) != 2 || ns[0].Text != "done" || ns[1].Text != "note" || ns[0].Seq != 1 || ns[1].Seq != 2 {
		t.Fatalf("TakeNotices after reopen = %+v, %v", ns, err)
	}
	// The per-principal sequence survives a reopen too: no Seq is reused.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r2 := openTest(t, dir)
	if err := r2.AddNotice(ctx, "local", seam.Notice{Text: "after"}); err != nil {
		t.Fatal(err)
	}
	if ns, err := r2.TakeNotices(ctx, "local", nil); err != nil || len(ns) != 1 || ns[0].Seq != 3 {
		t.Errorf("notice after two reopens = %+v, %v; want Seq 3", ns, err)
	}
}

func TestSecondOpenFailsFastNamingTheDirectory(t *testing.T) {
	dir := t.TempDir()
	first := openTest(t, dir)

	start := time.Now()
	second, err := Open(dir, Options{LockTimeout: 500 * time.Millisecond})
	elapsed := time.Since(start)
	if err == nil {
		second.Close()
		t.Fatal("a second Open on a held directory succeeded")
	}
	if elapsed > 2500*time.Millisecond {
		t.Errorf("the second Open took %s, want at most 2.5s", elapsed)
	}
	if elapsed < 400*time.Millisecond {
		t.Errorf("the second Open gave up after %s, before its 500ms timeout", elapsed)
	}
	want := fmt.Sprintf("data directory %s is in use by another mcp-subagent process (lock not acquired within 500ms); stop it or use --data-dir", dir)
	if err.Error() != want {
		t.Errorf("error = %q\nwant    %q", err, want)
	}
	if !errors.Is(err, ErrLocked) {
		t.Errorf("errors.Is(err, ErrLocked) = false for %v", err)
	}

	// The holder is unaffected, and once it closes the directory opens.
	if err := createChild(first, testHeader("c", "p", 0), testDescriptor()); err != nil {
		t.Fatalf("the first store after a refused second Open: %v", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	third := openTest(t, dir)
	if _, err := third.Header(ctx, "c"); err != nil {
		t.Errorf("after the holder closed: %v", err)
	}
}

func TestDefaultLockTimeoutIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("waits the default lock timeout")
	}
	dir := t.TempDir()
	openTest(t, dir)
	start := time.Now()
	_, err := Open(dir, Options{})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "within 2s") {
		t.Errorf("Open with a zero LockTimeout = %v, want the 2s locked error", err)
	}
	if elapsed := time.Since(start); elapsed > 2500*time.Millisecond {
		t.Errorf("took %s, want about 2s", elapsed)
	}
}

func TestOpenRefusesAnotherFormat(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	s.Close()
	mangle(t, s.Path(), func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyFormat, []byte("99"))
	})
	_, err := Open(dir, Options{LockTimeout: 500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "format") || !strings.Contains(err.Error(), dir) {
		t.Errorf("Open of a format-99 store = %v, want an error naming the format and the file", err)
	}
}

func TestOpenRefusesAFileThatIsNotBbolt(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(strings.Repeat("not a database\n", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, Options{LockTimeout: 500 * time.Millisecond})
	if err == nil {
		s.Close()
		t.Fatal("Open accepted a file that is not a bbolt database")
	}
	if !strings.Contains(err.Error(), dir) {
		t.Errorf("error %q does not name the file", err)
	}
}

// mangle opens the closed store's file with bbolt directly and runs fn in a
// write transaction, as a damaged disk or a stray tool would.
func mangle(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptBytesAreReportedNotHidden(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	const p = "principal:local"
	ids := []string{"ok1", "badhdr", "badjournal", "baddesc", "unknownfield", "v2", "gap", "keymismatch", "ok2"}
	for i, id := range ids {
		if err := createChild(s, testHeader(id, p, time.Duration(i)*time.Second), testDescriptor()); err != nil {
			t.Fatal(err)
		}
		if err := appendTo(s, id, testTurn(0, id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetCheckpoint(ctx, "ok1", seam.Checkpoint{Seq: 3}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddNotice(ctx, "local", seam.Notice{Text: "good one"}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddNotice(ctx, "local", seam.Notice{Text: "to be mangled"}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddNotice(ctx, "local", seam.Notice{Text: "good two"}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	garbage := []byte("\x00\xff{not json")
	descWith := func(extra string) []byte {
		b, _ := json.Marshal(testDescriptor())
		return append(b[:len(b)-1], []byte(extra+"}")...)
	}
	mangle(t, s.Path(), func(tx *bolt.Tx) error {
		must := func(err error) {
			if err != nil {
				t.Fatal(err)
			}
		}
		must(tx.Bucket(bucketChildren).Put([]byte("badhdr"), garbage))
		must(tx.Bucket(bucketJournals).Bucket([]byte("badjournal")).Put(seqKey(1), garbage))
		must(tx.Bucket(bucketDescriptors).Put([]byte("baddesc"), garbage))
		must(tx.Bucket(bucketDescriptors).Put([]byte("unknownfield"), descWith(`,"resume_hint":"x"`)))
		b, _ := json.Marshal(testDescriptor())
		must(tx.Bucket(bucketDescriptors).Put([]byte("v2"), []byte(strings.Replace(string(b), `"version":1`, `"version":2`, 1))))
		must(tx.Bucket(bucketJournals).Bucket([]byte("gap")).Delete(seqKey(1)))
		ev, _ := json.Marshal(agent.Event{Seq: 7, Kind: agent.EventTurnEnd, Time: t0})
		must(tx.Bucket(bucketJournals).Bucket([]byte("keymismatch")).Put(seqKey(2), ev))
		must(tx.Bucket(bucketCheckpoints).Put([]byte("ok1"), garbage))
		must(tx.Bucket(bucketNotices).Bucket([]byte("local")).Put(seqKey(2), garbage))
		return nil
	})

	r := openTest(t, dir)
	isCorrupt := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, seam.ErrCorrupt) {
			t.Errorf("%s = %v, want an error wrapping ErrCorrupt", what, err)
		}
		if errors.Is(err, ErrNotFound) {
			t.Errorf("%s = %v: corrupt is not not-found", what, err)
		}
	}
	_, err := r.Header(ctx, "badhdr")
	isCorrupt("Header(badhdr)", err)
	for _, id := range []string{"badjournal", "gap", "keymismatch"} {
		_, err := r.Events(ctx, id)
		isCorrupt("Events("+id+")", err)
	}
	for _, id := range []string{"baddesc", "unknownfield", "v2"} {
		_, err := r.Descriptor(ctx, id)
		isCorrupt("Descriptor("+id+")", err)
	}

	// One broken part never hides the child's healthy parts.
	if _, err := r.Events(ctx, "badhdr"); err != nil {
		t.Errorf("Events of a child with a corrupt header: %v", err)
	}
	if _, err := r.Descriptor(ctx, "badjournal"); err != nil {
		t.Errorf("Descriptor of a child with a corrupt journal: %v", err)
	}
	// JournalLen reads keys only, so a bad event body does not fail it.
	if n, err := r.JournalLen(ctx, "badjournal"); err != nil || n != 3 {
		t.Errorf("JournalLen(badjournal) = %d, %v; want 3", n, err)
	}

	// A listing lists every child in creation order, marks those whose
	// descriptor bytes no longer match their checksum, and keeps the rows
	// of their siblings (it reads index records, not headers or journals).
	ls, err := r.Listings(ctx, p, seam.Page{})
	if err != nil {
		t.Fatalf("Listings failed for bad children: %v", err)
	}
	var got, bad []string
	for _, l := range ls {
		got = append(got, l.Header.ID)
		if l.Corrupt {
			bad = append(bad, l.Header.ID)
		}
	}
	if !reflect.DeepEqual(got, ids) {
		t.Errorf("Listings = %v, want %v (in creation order)", got, ids)
	}
	if !reflect.DeepEqual(bad, []string{"baddesc", "unknownfield", "v2"}) {
		t.Errorf("corrupt = %v, want the three mangled descriptors", bad)
	}
	if ls[0].Header.Label != "label ok1" || ls[8].Header.Label != "label ok2" || ls[1].Header.Label != "label badhdr" {
		t.Errorf("siblings of a corrupt child lost their rows: %+v, %+v", ls[0], ls[8])
	}

	// A corrupt checkpoint is a cache miss, not a failure.
	if _, ok, err := r.Checkpoint(ctx, "ok1"); err != nil || ok {
		t.Errorf("Checkpoint over garbage = ok %v, err %v; want a miss", ok, err)
	}
	// A corrupt notice is dropped (and logged); the others are delivered once.
	ns, err := r.TakeNotices(ctx, "local", nil)
	if err != nil || len(ns) != 2 || ns[0].Text != "good one" || ns[1].Text != "good two" {
		t.Errorf("TakeNotices over one corrupt notice = %+v, %v", ns, err)
	}
	if ns, _ := r.TakeNotices(ctx, "local", nil); len(ns) != 0 {
		t.Errorf("notices left after a take: %+v", ns)
	}

	// An unknown child is not corrupt.
	if _, err := r.Events(ctx, "nobody"); !errors.Is(err, ErrNotFound) || errors.Is(err, seam.ErrCorrupt) {
		t.Errorf("Events(nobody) = %v, want ErrNotFound and not ErrCorrupt", err)
	}
}

// An active mark an older build wrote (child id → empty) reads as a claim
// of an unknown earlier owner, expired: listed by Residents with a zero
// Owner and taken over by the first claim. A claim record that does not
// decode is treated the same.
func TestOldActiveMarksReadAsExpiredClaims(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	for i, id := range []string{"old", "mangled"} {
		if err := createChild(s, testHeader(id, "p", time.Duration(i)), testDescriptor()); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	mangle(t, s.Path(), func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketActive).Put([]byte("old"), nil); err != nil {
			return err
		}
		return tx.Bucket(bucketActive).Put([]byte("mangled"), []byte{9, 9})
	})
	r := openTest(t, dir)
	want := []seam.Claim{{ChildID: "mangled"}, {ChildID: "old"}}
	if cs, err := r.Residents(ctx); err != nil || !reflect.DeepEqual(cs, want) {
		t.Errorf("Residents = %+v, %v; want %+v", cs, err, want)
	}
	o := seam.Owner{ID: "o1", Expires: time.Now().Add(time.Hour)}
	for _, id := range []string{"old", "mangled"} {
		if err := r.WriteChild(ctx, id, seam.ChildWrite{Claim: &o}); err != nil {
			t.Errorf("claiming %s = %v, want granted", id, err)
		}
	}
	if cs, _ := r.Residents(ctx); len(cs) != 2 || cs[0].Owner.ID != "o1" || cs[1].Owner.ID != "o1" {
		t.Errorf("Residents after the claims = %+v", cs)
	}
}

func TestErrorsMatchSentinels(t *testing.T) {
	s := openTest(t, t.TempDir())
	if _, err := s.Header(ctx, "x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Header(x) = %v, want ErrNotFound", err)
	}
	if err := createChild(s, testHeader("x", "p", 0), testDescriptor()); err != nil {
		t.Fatal(err)
	}
	if err := createChild(s, testHeader("x", "p", 0), testDescriptor()); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate create = %v, want ErrExists", err)
	}
}
