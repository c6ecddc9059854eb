//go:build postgres

package pgstore_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/persist/storetest"
	"github.com/mcp-subagent/mcp-subagent/tasks/taskstore"
)

// Task records round-trip, replace by id and delete; an unknown id is
// taskstore.ErrNotFound.
func TestTaskRecords(t *testing.T) {
	s := open(t)
	if got, err := s.Tasks(ctx); err != nil || len(got) != 0 {
		t.Fatalf("a new store lists tasks %v, %v", got, err)
	}
	if _, err := s.Task(ctx, "task-none"); !errors.Is(err, taskstore.ErrNotFound) {
		t.Fatalf("an unknown task: %v, want taskstore.ErrNotFound", err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	a := taskstore.Record{ID: "task-a", Principal: "alice", Tool: "subagent", AgentID: "agent-1", MessageID: "msg-1",
		Status: taskstore.StatusCompleted, StatusMessage: "answered", CreatedAt: t0, UpdatedAt: t0.Add(time.Second),
		SettledAt: t0.Add(2 * time.Second), TTL: time.Hour, Result: json.RawMessage(`{"content":[],"isError":false}`)}
	w := a
	w.ID, w.Status, w.SettledAt, w.Result = "task-w", taskstore.StatusWorking, time.Time{}, nil
	for _, r := range []taskstore.Record{a, w} {
		if err := s.PutTask(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.Task(ctx, a.ID); err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("read back %+v, %v\nwant %+v", got, err, a)
	}
	storetest.TaskReplaceDelete(t, s, w, a, 2)
	storetest.TaskUpdates(t, s)
}
