package manager_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/internal/managertest"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/llm/openai"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist"
	"github.com/mcp-subagent/mcp-subagent/providers/spawn"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// A journal holding records a later build wrote (a kind this build does not
// know, a later format version) still lists and resumes: the records keep
// their place and bytes in the store, the listing folds past them, and the
// resumed model's transcript leaves them out.
func TestRecordsALaterBuildWroteAreSkippedOnResume(t *testing.T) {
	fake := fakeopenai.New(func(n int, req fakeopenai.Request) fakeopenai.Reply {
		return fakeopenai.Reply{Text: "done: " + req.LastUserText()}
	})
	defer fake.Close()
	client := openai.New(transport.Config{BaseURL: fake.URL(), APIKey: "k", RetryBaseDelay: time.Millisecond})
	dir := t.TempDir()
	root := seam.ParentRef{Principal: "p", Cwd: t.TempDir()}
	ctx := context.Background()
	open := func() (*persist.Store, *manager.Manager) {
		st, m := openSpawn(t, dir, client)
		if err := m.Recover(context.Background()); err != nil {
			t.Fatal(err)
		}
		return st, m
	}
	st, m := open()
	s, err := m.StartContinuable(ctx, "spawn", seam.StartRequest{Label: "l", Prompt: "first", Parent: root}, false)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for len(m.WaitNotices(wctx, "p", "")) == 0 {
		if wctx.Err() != nil {
			t.Fatal("the first epoch never settled")
		}
	}
	_ = m.Close(ctx)
	n, err := st.JournalLen(context.Background(), s.ChildID)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()

	const marker = "words only a later build can read"
	later := [][]byte{
		fmt.Appendf(nil, `{"seq":%d,"kind":"reasoning","time":"2026-12-01T09:00:00Z","text":%q}`, n, marker),
		fmt.Appendf(nil, `{"v":2,"seq":%d,"kind":"message","time":"2026-12-01T09:00:01Z","message":{"role":"user","content":%q}}`, n+1, marker),
	}
	key := func(seq int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(seq)) }
	path := filepath.Join(dir, persist.FileName)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		j := tx.Bucket([]byte("journals")).Bucket([]byte(s.ChildID))
		for i, b := range later {
			if err := j.Put(key(n+int64(i)), b); err != nil {
				return err
			}
		}
		return nil
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	st, m = open()
	rows, err := managertest.ListChildren(m, root)
	if err != nil || len(rows) != 1 || rows[0].Kind != "child" || rows[0].LastStopReason != agent.StopCompleted ||
		rows[0].LastMessage != "done: first" {
		t.Fatalf("ListChildren = %+v, %v; want the child ready with its last outcome", rows, err)
	}
	sent, err := m.Followup(ctx, root, s.ChildID, "second", true)
	if err != nil || sent.Route != manager.RouteResumed {
		t.Fatalf("Followup = %+v, %v; want resumed", sent, err)
	}
	res, ok := sent.Wait(wctx)
	if !ok || res.StopReason != agent.StopCompleted || res.Output != "done: second" {
		t.Fatalf("resumed turn = %+v, %v", res, ok)
	}
	reqs := fake.Requests()
	var seen []string
	for _, msg := range reqs[len(reqs)-1].Messages {
		if msg.Role != "system" {
			seen = append(seen, msg.Role+":"+msg.Content)
		}
	}
	if got, want := strings.Join(seen, " | "), "user:first | assistant:done: first | user:second"; got != want {
		t.Errorf("the resumed model saw %q, want %q", got, want)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}

	events, err := st.Events(context.Background(), s.ChildID)
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Validate(events); err != nil {
		t.Fatalf("the journal after the resume is invalid: %v", err)
	}
	if len(events) <= int(n)+2 || events[n].Kind != agent.EventUnknown || events[n+1].Kind != agent.EventUnknown ||
		events[n+2].Kind != agent.EventTurnStart {
		t.Fatalf("the journal after the resume does not keep the later records in place: %+v", events[n:])
	}
	st.Close()
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_ = db.View(func(tx *bolt.Tx) error {
		j := tx.Bucket([]byte("journals")).Bucket([]byte(s.ChildID))
		for i, b := range later {
			if got := j.Get(key(n + int64(i))); !bytes.Equal(got, b) {
				t.Errorf("stored record %d became %s, was %s", n+int64(i), got, b)
			}
		}
		return nil
	})
}

// openSpawn opens the store in dir and a manager on it with spawn over
// client registered.
func openSpawn(t *testing.T, dir string, client llm.Client) (*persist.Store, *manager.Manager) {
	t.Helper()
	st, err := persist.Open(dir, persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := manager.New(manager.Options{Store: st})
	if err := m.Register(spawn.New(spawn.Options{Client: client, Model: "m"})); err != nil {
		t.Fatal(err)
	}
	return st, m
}
