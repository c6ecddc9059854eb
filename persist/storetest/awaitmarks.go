package storetest

import (
	"errors"
	"slices"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// The cases of seam.AwaitMarks, run by RunShared.

func awaitMarks(t *testing.T, s seam.Store) seam.AwaitMarks {
	t.Helper()
	am, ok := s.(seam.AwaitMarks)
	if !ok {
		t.Fatalf("%T is not a seam.AwaitMarks", s)
	}
	return am
}

func testAwaitMarks(t *testing.T, w, s seam.Store) {
	mustCreate(t, s, header("c", "principal:local", 0))
	// The awaited flag is kept with the queued message.
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Enqueue: []seam.QueuedMessage{{ID: "m1", Text: "hi", Source: agent.SourceUser, Awaited: true}}}); err != nil {
		t.Fatal(err)
	}
	if qs, err := w.Queued(ctx, "c"); err != nil || len(qs) != 1 || !qs[0].Awaited {
		t.Fatalf("Queued = %+v, %v; want m1, awaited", qs, err)
	}
	mw, ms := awaitMarks(t, w), awaitMarks(t, s)
	if got, err := mw.TakeAbandoned(ctx, "c", []string{"m1"}); err != nil || len(got) != 0 {
		t.Fatalf("TakeAbandoned with none marked = %v, %v; want none", got, err)
	}
	for _, id := range []string{"m1", "m2", "m3"} {
		if err := ms.MarkAbandoned(ctx, "c", id, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := ms.MarkAbandoned(ctx, "c", "m1", true); err != nil {
		t.Fatalf("marking m1 again: %v; want no error", err)
	}
	if err := ms.MarkAbandoned(ctx, "c", "m2", false); err != nil {
		t.Fatal(err)
	}
	if err := ms.MarkAbandoned(ctx, "c", "never", false); err != nil {
		t.Fatalf("clearing a mark never set: %v; want no error", err)
	}
	// Taken through the other handle: the marks are in the store.
	got, err := mw.TakeAbandoned(ctx, "c", []string{"m1", "m2", "m4"})
	slices.Sort(got)
	if err != nil || !slices.Equal(got, []string{"m1"}) {
		t.Fatalf("TakeAbandoned(m1, m2, m4) = %v, %v; want [m1] (m2 was cleared, m4 never marked)", got, err)
	}
	if got, err := mw.TakeAbandoned(ctx, "c", []string{"m1"}); err != nil || len(got) != 0 {
		t.Fatalf("a second TakeAbandoned(m1) = %v, %v; want none: a mark is taken once", got, err)
	}
	if got, err := ms.TakeAbandoned(ctx, "c", []string{"m3"}); err != nil || !slices.Equal(got, []string{"m3"}) {
		t.Fatalf("TakeAbandoned(m3) = %v, %v; want [m3], left by the take of the others", got, err)
	}
	for _, err := range []error{
		ms.MarkAbandoned(ctx, "nope", "m1", true),
		ms.MarkAbandoned(ctx, "nope", "m1", false),
		func() error { _, err := ms.TakeAbandoned(ctx, "nope", []string{"m1"}); return err }(),
	} {
		if !errors.Is(err, seam.ErrNotFound) {
			t.Errorf("an unknown child = %v; want ErrNotFound", err)
		}
	}
}

func testAwaitMarkTakenOnce(t *testing.T, w, s seam.Store) {
	mustCreate(t, s, header("c", "principal:local", 0))
	if err := awaitMarks(t, s).MarkAbandoned(ctx, "c", "m1", true); err != nil {
		t.Fatal(err)
	}
	handles := []seam.AwaitMarks{awaitMarks(t, w), awaitMarks(t, s)}
	got := concurrentTakes(t, func(i int) (int, error) {
		ids, err := handles[i%2].TakeAbandoned(ctx, "c", []string{"m1"})
		return len(ids), err
	})
	if got != 1 {
		t.Errorf("%d of %d concurrent takers got the mark; want exactly 1", got, takers)
	}
}

func testAwaitMarksDeleted(t *testing.T, w, s seam.Store) {
	mustCreate(t, s, header("c", "principal:local", 0))
	mustCreate(t, s, header("c2", "principal:local", 0)) // its id extends c's
	ms := awaitMarks(t, s)
	for _, id := range []string{"c", "c2"} {
		if err := ms.MarkAbandoned(ctx, id, "m1", true); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Delete(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, header("c", "principal:local", 0))
	mw := awaitMarks(t, w)
	if got, err := mw.TakeAbandoned(ctx, "c", []string{"m1"}); err != nil || len(got) != 0 {
		t.Fatalf("TakeAbandoned of a child created again after a Delete = %v, %v; want none", got, err)
	}
	if got, err := mw.TakeAbandoned(ctx, "c2", []string{"m1"}); err != nil || len(got) != 1 {
		t.Fatalf("TakeAbandoned of another child after c's Delete = %v, %v; want its mark, kept", got, err)
	}
}
