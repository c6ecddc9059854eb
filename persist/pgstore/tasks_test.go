package pgstore_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/tasks"
)

// Task records round-trip, replace by id and delete; an unknown id is
// tasks.ErrNotFound.
func TestTaskRecords(t *testing.T) {
	s := open(t)
	if got, err := s.Tasks(ctx); err != nil || len(got) != 0 {
		t.Fatalf("a new store lists tasks %v, %v", got, err)
	}
	if _, err := s.Task(ctx, "task-none"); !errors.Is(err, tasks.ErrNotFound) {
		t.Fatalf("an unknown task: %v, want tasks.ErrNotFound", err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	a := tasks.Record{ID: "task-a", Principal: "alice", Tool: "subagent", AgentID: "agent-1", MessageID: "msg-1",
		Status: tasks.StatusCompleted, StatusMessage: "answered", CreatedAt: t0, UpdatedAt: t0.Add(time.Second),
		SettledAt: t0.Add(2 * time.Second), TTL: time.Hour, Result: json.RawMessage(`{"content":[],"isError":false}`)}
	w := a
	w.ID, w.Status, w.SettledAt, w.Result = "task-w", tasks.StatusWorking, time.Time{}, nil
	for _, r := range []tasks.Record{a, w} {
		if err := s.PutTask(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.Task(ctx, a.ID); err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("read back %+v, %v\nwant %+v", got, err, a)
	}
	w.Status, w.SettledAt = tasks.StatusCancelled, t0.Add(time.Minute)
	if err := s.PutTask(ctx, w); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Task(ctx, w.ID); got.Status != tasks.StatusCancelled {
		t.Fatalf("a replaced record reads %v", got.Status)
	}
	if err := s.DeleteTask(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTask(ctx, "task-none"); err != nil {
		t.Fatalf("deleting an unknown task: %v", err)
	}
	if all, err := s.Tasks(ctx); err != nil || len(all) != 1 || all[0].ID != w.ID {
		t.Fatalf("after a delete the store lists %v (%v), want task-w", all, err)
	}
}
