package storetest

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/tasks/taskstore"
)

// Tasks checks a new taskstore.Store: it lists no task and an unknown id
// is an error wrapping taskstore.ErrNotFound; records round-trip, then
// TaskReplaceDelete and TaskUpdates.
func Tasks(t *testing.T, s taskstore.Store) {
	t.Helper()
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
	TaskReplaceDelete(t, s, w, a, 2)
	TaskUpdates(t, s)
}

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

// TaskUpdates checks a taskstore.Store's compare-and-set (UpdateTask) on a
// store that holds no record "task-cas": an unknown id is an error
// wrapping taskstore.ErrNotFound and fn is not called; fn's error is
// returned as it is and stores nothing; an update may not change the id;
// fn's record is stored and returned. Two goroutines each updating the one
// record lose no update, and a record one of them settles is never
// written working again by the other, which updates it only while working.
func TaskUpdates(t *testing.T, s taskstore.Store) {
	t.Helper()
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	w := taskstore.Record{ID: "task-cas", Principal: "alice", Tool: "subagent", AgentID: "agent-1", MessageID: "msg-1",
		Status: taskstore.StatusWorking, StatusMessage: "0", CreatedAt: t0, UpdatedAt: t0, TTL: time.Hour, Runner: "i1", Beat: t0}
	called := false
	if _, err := s.UpdateTask(ctx, "task-none", func(r taskstore.Record) (taskstore.Record, error) { called = true; return r, nil }); !errors.Is(err, taskstore.ErrNotFound) || called {
		t.Fatalf("updating an unknown task: %v (fn called: %v); want an error wrapping taskstore.ErrNotFound, fn not called", err, called)
	}
	if err := s.PutTask(ctx, w); err != nil {
		t.Fatal(err)
	}
	declined := errors.New("declined")
	if _, err := s.UpdateTask(ctx, w.ID, func(r taskstore.Record) (taskstore.Record, error) {
		r.Status = taskstore.StatusCompleted
		return r, declined
	}); err != declined {
		t.Fatalf("an update whose fn declines returned %v; want fn's error as it is", err)
	}
	if _, err := s.UpdateTask(ctx, w.ID, func(r taskstore.Record) (taskstore.Record, error) { r.ID = "task-cas-2"; return r, nil }); err == nil {
		t.Fatal("an update changing the record's id succeeded")
	}
	if got, err := s.Task(ctx, w.ID); err != nil || !reflect.DeepEqual(got, w) {
		t.Fatalf("after a declined update and a refused one the record reads %+v, %v; want it unchanged", got, err)
	}
	if _, err := s.Task(ctx, "task-cas-2"); !errors.Is(err, taskstore.ErrNotFound) {
		t.Fatalf("a refused update stored a record under its new id: %v", err)
	}
	got, err := s.UpdateTask(ctx, w.ID, func(r taskstore.Record) (taskstore.Record, error) { r.CancelRequested = true; return r, nil })
	if back, _ := s.Task(ctx, w.ID); err != nil || !got.CancelRequested || !reflect.DeepEqual(back, got) {
		t.Fatalf("an update returned %+v, %v and stored %+v; want the record fn returned, stored", got, err, back)
	}

	// No lost update: each goroutine counts n in StatusMessage; once the
	// first is done (the count is at least n) the record is settled,
	// while the second may still be counting, then beats only while the
	// record works.
	const n = 50
	settled := errors.New("settled")
	count := func(r taskstore.Record) (taskstore.Record, error) {
		c, err := strconv.Atoi(r.StatusMessage)
		if err != nil {
			return r, err
		}
		r.StatusMessage = strconv.Itoa(c + 1)
		return r, nil
	}
	beat := func(r taskstore.Record) (taskstore.Record, error) {
		if r.Status.Terminal() {
			return r, settled
		}
		r.Beat = r.Beat.Add(time.Millisecond)
		return r, nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	first := make(chan struct{})
	done := make(chan struct{}) // closed once the settle returned
	for g := range 2 {
		wg.Go(func() {
			if g == 0 {
				defer close(first)
			}
			for range n {
				if _, err := s.UpdateTask(ctx, w.ID, count); err != nil {
					errs <- err
					return
				}
			}
			if g == 0 {
				return
			}
			// Bounded: once the settle is stored, the next beat must
			// see it (a store that lost it would have us beat forever).
			for last := false; ; {
				select {
				case <-done:
					last = true
				default:
				}
				_, err := s.UpdateTask(ctx, w.ID, beat)
				switch {
				case err == settled:
					return
				case err != nil:
					errs <- err
					return
				case last:
					errs <- errors.New("a settled record was written working again")
					return
				}
			}
		})
	}
	wg.Go(func() {
		defer close(done)
		<-first
		_, err := s.UpdateTask(ctx, w.ID, func(r taskstore.Record) (taskstore.Record, error) {
			if r.Status.Terminal() {
				return r, settled
			}
			r.Status, r.SettledAt = taskstore.StatusCompleted, t0.Add(time.Minute)
			return r, nil
		})
		if err != nil {
			errs <- err
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	final, err := s.Task(ctx, w.ID)
	if err != nil || final.StatusMessage != strconv.Itoa(2*n) || final.Status != taskstore.StatusCompleted || !final.CancelRequested {
		t.Fatalf("after two goroutines' %d updates each and a settle the record reads %+v, %v; want count %d, completed, the cancel request kept", n, final, err, 2*n)
	}
}
