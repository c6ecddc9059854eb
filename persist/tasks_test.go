package persist

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/persist/storetest"
	"github.com/mcp-subagent/mcp-subagent/tasks/taskstore"
)

func sampleTask(id string) taskstore.Record {
	return taskstore.Record{ID: id, Principal: "alice", Tool: "subagent", AgentID: "agent-1", MessageID: "msg-1",
		Status: taskstore.StatusCompleted, StatusMessage: "answered", CreatedAt: t0, UpdatedAt: t0.Add(time.Second),
		SettledAt: t0.Add(2 * time.Second), TTL: time.Hour,
		Result: json.RawMessage(`{"content":[{"type":"text","text":"done"}],"isError":false}`)}
}

// Task records round-trip through the store, survive a reopen, replace
// by id and delete; an unknown id is taskstore.ErrNotFound.
func TestTaskRecords(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir)
	if got, err := s.Tasks(ctx); err != nil || len(got) != 0 {
		t.Fatalf("a new store lists tasks %v, %v", got, err)
	}
	if _, err := s.Task(ctx, "task-none"); !errors.Is(err, taskstore.ErrNotFound) {
		t.Fatalf("an unknown task: %v, want taskstore.ErrNotFound", err)
	}
	a := sampleTask("task-a")
	w := sampleTask("task-w")
	w.Status, w.SettledAt, w.Result = taskstore.StatusWorking, time.Time{}, nil
	f := sampleTask("task-f")
	f.Status, f.Result, f.Error = taskstore.StatusFailed, nil, &taskstore.RPCError{Code: -32603, Message: "the server stopped"}
	for _, r := range []taskstore.Record{a, w, f} {
		if err := s.PutTask(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir)
	for _, want := range []taskstore.Record{a, w, f} {
		got, err := s.Task(ctx, want.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("read back %+v\nwant %+v", got, want)
		}
	}
	storetest.TaskReplaceDelete(t, s, w, a, 3)
	storetest.TaskUpdates(t, s)
}

// A store from before task records (the golden one) opens and reads
// unchanged, lists no tasks, takes one, and still holds its children.
func TestGoldenStoreTakesTasks(t *testing.T) {
	ctx := context.Background()
	dirs, _ := filepath.Glob(filepath.Join("testdata", "golden", "*"))
	if len(dirs) == 0 {
		t.Fatal("no golden stores")
	}
	for _, d := range dirs {
		want, s := openGoldenCopy(t, d)
		if got, err := s.Tasks(ctx); err != nil || len(got) != 0 {
			t.Fatalf("%s: tasks %v, %v; want none", d, got, err)
		}
		if err := s.PutTask(ctx, sampleTask("task-g")); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		if got, err := s.Task(ctx, "task-g"); err != nil || got.ID != "task-g" {
			t.Fatalf("%s: the task reads back %+v, %v", d, got, err)
		}
		if got := dumpGolden(t, s); !reflect.DeepEqual(normJSON(t, got), normJSON(t, want)) {
			t.Fatalf("%s: with a task written, the children read back differently from what the store's build read", d)
		}
	}
}
