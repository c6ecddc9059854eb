package persist

import (
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
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) manager.Store { return openTest(t, t.TempDir()) })
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

func testHeader(id, parent string, offset time.Duration) manager.Header {
	return manager.Header{ID: id, Parent: parent, Principal: "local", Depth: 1, DepthCap: 3,
		Mode: manager.ModeContinuable, Provider: "spawn", Label: "label " + id, Cwd: "/w",
		CreatedAt: t0.Add(offset)}
}

func testDescriptor() manager.Descriptor {
	return manager.Descriptor{Version: manager.DescriptorVersion, Mode: manager.ModeContinuable,
		Provider: "spawn", Label: "lbl", ToolFilter: &manager.ToolFilter{Deny: []string{"shell"}}}
}

func testTurn(seq int64, text string) []agent.Event {
	return []agent.Event{
		{Seq: seq, Kind: agent.EventTurnStart, Time: t0, Turn: 1},
		{Seq: seq + 1, Kind: agent.EventMessage, Time: t0, Turn: 1, Source: agent.SourceUser,
			Message: &llm.Message{Role: llm.RoleUser, Content: text}},
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
	p := manager.PrincipalAddress("local")
	h := testHeader("c1", p, 0)
	if err := s.CreateChild(h, testDescriptor()); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateChild(testHeader("c2", p, time.Second), testDescriptor()); err != nil {
		t.Fatal(err)
	}
	events := append(testTurn(0, "one"), testTurn(3, "two")...)
	if err := s.AppendEvents("c1", events); err != nil {
		t.Fatal(err)
	}
	cp := manager.Checkpoint{Seq: int64(len(events)), Mode: manager.ModeContinuable, Label: "x"}
	if err := s.SetCheckpoint("c1", cp); err != nil {
		t.Fatal(err)
	}
	if err := s.AddNotice("local", manager.Notice{ChildID: "c1", Source: agent.SourceSettled, Text: "done", Time: t0}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddNotice("local", manager.Notice{ChildID: "c2", Source: agent.SourceReport, Text: "note", Time: t0}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c1", "c2"} {
		if err := s.SetActive(id, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	r := openTest(t, dir)
	if got, err := r.Header("c1"); err != nil || !got.CreatedAt.Equal(h.CreatedAt) || got.Label != h.Label || got.Parent != p {
		t.Errorf("Header after reopen = %+v, %v", got, err)
	}
	if got, err := r.Descriptor("c1"); err != nil || !reflect.DeepEqual(got, testDescriptor()) {
		t.Errorf("Descriptor after reopen = %+v, %v", got, err)
	}
	got, err := r.Events("c1")
	if err != nil || len(got) != len(events) {
		t.Fatalf("Events after reopen = %d events, %v; want %d", len(got), err, len(events))
	}
	for i := range got {
		if got[i].Seq != events[i].Seq || got[i].Kind != events[i].Kind || !got[i].Time.Equal(events[i].Time) {
			t.Errorf("event %d = %+v, want %+v", i, got[i], events[i])
		}
	}
	if n, err := r.JournalLen("c1"); err != nil || n != 6 {
		t.Errorf("JournalLen after reopen = %d, %v", n, err)
	}
	if c, ok, err := r.Checkpoint("c1"); err != nil || !ok || !reflect.DeepEqual(c, cp) {
		t.Errorf("Checkpoint after reopen = %+v, %v, %v", c, ok, err)
	}
	if err := r.AppendEvents("c1", testTurn(6, "three")); err != nil {
		t.Errorf("the journal does not continue after reopen: %v", err)
	}
	if hs, corrupt, err := r.Children(p); err != nil || len(corrupt) != 0 || len(hs) != 2 || hs[0].ID != "c1" || hs[1].ID != "c2" {
		t.Errorf("Children after reopen = %+v, %v, %v", hs, corrupt, err)
	}
	if act, err := r.Active(); err != nil || !reflect.DeepEqual(act, []string{"c1", "c2"}) {
		t.Errorf("Active after reopen = %v, %v", act, err)
	}
	ns, err := r.TakeNotices("local", nil)
	if err != nil || len(ns) != 2 || ns[0].Text != "done" || ns[1].Text != "note" || ns[0].Seq != 1 || ns[1].Seq != 2 {
		t.Fatalf("TakeNotices after reopen = %+v, %v", ns, err)
	}
	// The per-principal sequence survives a reopen too: no Seq is reused.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r2 := openTest(t, dir)
	if err := r2.AddNotice("local", manager.Notice{Text: "after"}); err != nil {
		t.Fatal(err)
	}
	if ns, err := r2.TakeNotices("local", nil); err != nil || len(ns) != 1 || ns[0].Seq != 3 {
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
	if err := first.CreateChild(testHeader("c", "p", 0), testDescriptor()); err != nil {
		t.Fatalf("the first store after a refused second Open: %v", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	third := openTest(t, dir)
	if _, err := third.Header("c"); err != nil {
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
		if err := s.CreateChild(testHeader(id, p, time.Duration(i)*time.Second), testDescriptor()); err != nil {
			t.Fatal(err)
		}
		if err := s.AppendEvents(id, testTurn(0, id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetCheckpoint("ok1", manager.Checkpoint{Seq: 3}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddNotice("local", manager.Notice{Text: "good one"}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddNotice("local", manager.Notice{Text: "to be mangled"}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddNotice("local", manager.Notice{Text: "good two"}); err != nil {
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
		if !errors.Is(err, manager.ErrCorrupt) {
			t.Errorf("%s = %v, want an error wrapping ErrCorrupt", what, err)
		}
		if errors.Is(err, ErrNotFound) {
			t.Errorf("%s = %v: corrupt is not not-found", what, err)
		}
	}
	_, err := r.Header("badhdr")
	isCorrupt("Header(badhdr)", err)
	for _, id := range []string{"badjournal", "gap", "keymismatch"} {
		_, err := r.Events(id)
		isCorrupt("Events("+id+")", err)
	}
	for _, id := range []string{"baddesc", "unknownfield", "v2"} {
		_, err := r.Descriptor(id)
		isCorrupt("Descriptor("+id+")", err)
	}

	// One broken part never hides the child's healthy parts.
	if _, err := r.Events("badhdr"); err != nil {
		t.Errorf("Events of a child with a corrupt header: %v", err)
	}
	if _, err := r.Descriptor("badjournal"); err != nil {
		t.Errorf("Descriptor of a child with a corrupt journal: %v", err)
	}
	// JournalLen reads keys only, so a bad event body does not fail it.
	if n, err := r.JournalLen("badjournal"); err != nil || n != 3 {
		t.Errorf("JournalLen(badjournal) = %d, %v; want 3", n, err)
	}

	hs, corrupt, err := r.Children(p)
	if err != nil {
		t.Fatalf("Children failed for one bad child: %v", err)
	}
	var got []string
	for _, h := range hs {
		got = append(got, h.ID)
	}
	if !reflect.DeepEqual(got, ids) {
		t.Errorf("Children = %v, want %v (in creation order)", got, ids)
	}
	if !reflect.DeepEqual(corrupt, []string{"badhdr"}) {
		t.Errorf("corrupt = %v, want [badhdr]", corrupt)
	}
	if !reflect.DeepEqual(hs[1], manager.Header{ID: "badhdr"}) {
		t.Errorf("the corrupt child's row = %+v, want only its id", hs[1])
	}
	if hs[0].Label != "label ok1" || hs[8].Label != "label ok2" {
		t.Errorf("siblings of a corrupt child lost their headers: %+v, %+v", hs[0], hs[8])
	}

	// A corrupt checkpoint is a cache miss, not a failure.
	if _, ok, err := r.Checkpoint("ok1"); err != nil || ok {
		t.Errorf("Checkpoint over garbage = ok %v, err %v; want a miss", ok, err)
	}
	// A corrupt notice is dropped (and logged); the others are delivered once.
	ns, err := r.TakeNotices("local", nil)
	if err != nil || len(ns) != 2 || ns[0].Text != "good one" || ns[1].Text != "good two" {
		t.Errorf("TakeNotices over one corrupt notice = %+v, %v", ns, err)
	}
	if ns, _ := r.TakeNotices("local", nil); len(ns) != 0 {
		t.Errorf("notices left after a take: %+v", ns)
	}

	// An unknown child is not corrupt.
	if _, err := r.Events("nobody"); !errors.Is(err, ErrNotFound) || errors.Is(err, manager.ErrCorrupt) {
		t.Errorf("Events(nobody) = %v, want ErrNotFound and not ErrCorrupt", err)
	}
}

func TestHeaderIndexedUnderAnotherParentIsCorrupt(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	if err := s.CreateChild(testHeader("c", "p", 0), testDescriptor()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	mangle(t, s.Path(), func(tx *bolt.Tx) error {
		b, _ := json.Marshal(testHeader("c", "q", 0))
		return tx.Bucket(bucketChildren).Put([]byte("c"), b)
	})
	r := openTest(t, dir)
	hs, corrupt, err := r.Children("p")
	if err != nil || len(hs) != 1 || !reflect.DeepEqual(corrupt, []string{"c"}) {
		t.Errorf("Children(p) = %+v, %v, %v; want c listed as corrupt", hs, corrupt, err)
	}
}

func TestErrorsMatchSentinels(t *testing.T) {
	s := openTest(t, t.TempDir())
	if _, err := s.Header("x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Header(x) = %v, want ErrNotFound", err)
	}
	if err := s.CreateChild(testHeader("x", "p", 0), testDescriptor()); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateChild(testHeader("x", "p", 0), testDescriptor()); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate CreateChild = %v, want ErrExists", err)
	}
}
