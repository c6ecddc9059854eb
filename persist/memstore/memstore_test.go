package memstore_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/persist/storetest"
	"github.com/mcp-subagent/mcp-subagent/seam"
	"github.com/mcp-subagent/mcp-subagent/tasks/taskstore"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) seam.Store { return memstore.New() })
}

func TestShared(t *testing.T) {
	open := func(t *testing.T) (seam.Store, seam.Store) {
		s := memstore.New()
		return s, s
	}
	storetest.RunShared(t, open)
	storetest.RunSessions(t, open)
}

// Task records: replaced by id, deleted, and updated by compare-and-set
// (storetest.TaskUpdates).
func TestTaskRecords(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	a := taskstore.Record{ID: "task-a", Principal: "alice", Tool: "subagent", AgentID: "agent-1", Status: taskstore.StatusCompleted,
		CreatedAt: t0, UpdatedAt: t0, SettledAt: t0, TTL: time.Hour, Result: json.RawMessage(`{"content":[],"isError":false}`)}
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
