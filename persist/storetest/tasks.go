package storetest

import (
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/tasks/taskstore"
)

// TaskReplaceDelete checks a taskstore.Store holding keep and drop (and
// others, want records in all): a record put again replaces the stored
// one by id; a delete removes one, and deleting an unknown id is no
// error; Tasks then lists want-1 records.
func TaskReplaceDelete(t *testing.T, s taskstore.Store, keep, drop taskstore.Record, want int) {
	t.Helper()
	keep.Status, keep.SettledAt = taskstore.StatusCancelled, keep.CreatedAt.Add(time.Minute)
	if err := s.PutTask(ctx, keep); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Task(ctx, keep.ID); got.Status != taskstore.StatusCancelled {
		t.Fatalf("a replaced record reads %v", got.Status)
	}
	if err := s.DeleteTask(ctx, drop.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTask(ctx, "task-none"); err != nil {
		t.Fatalf("deleting an unknown task: %v", err)
	}
	if all, err := s.Tasks(ctx); err != nil || len(all) != want-1 {
		t.Fatalf("after a delete the store lists %d tasks (%v), want %d", len(all), err, want-1)
	}
}
