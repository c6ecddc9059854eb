package persister

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// fakeStore fails its first fail writes with err; with landed, a failed
// write is applied all the same (a commit that failed after its data
// reached the file).
type fakeStore struct {
	mu     sync.Mutex
	fail   int
	err    error
	landed bool
	calls  int
	writes []seam.ChildWrite
	events int64
}

func (s *fakeStore) WriteChild(_ context.Context, _ string, w seam.ChildWrite) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.fail > 0 {
		s.fail--
		if s.landed {
			s.writes = append(s.writes, w)
			s.events += int64(len(w.Events))
		}
		return s.err
	}
	s.writes = append(s.writes, w)
	s.events += int64(len(w.Events))
	return nil
}

func (s *fakeStore) JournalLen(context.Context, string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.events, nil
}

func (s *fakeStore) Header(context.Context, string) (seam.Header, error) {
	return seam.Header{}, seam.ErrNotFound
}

func (s *fakeStore) counts() (calls, writes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, len(s.writes)
}

var testLog = slog.New(slog.DiscardHandler)

func newWriter(st *fakeStore, onFail func(error)) *Writer {
	return New(Config{Store: st, Ctx: context.Background(), Timeout: time.Second, ID: "agent-1", Owner: "me",
		Log: testLog, Retry: Retry{Attempts: 3, Delay: time.Millisecond}, Fence: &seam.Fence{Owner: "me", Epoch: 2}, OnFail: onFail})
}

func TestAWriteThatKeepsFailingBreaksTheWriterForGood(t *testing.T) {
	st := &fakeStore{fail: 100, err: errors.New("disk full")}
	var failed atomic.Int32
	w := newWriter(st, func(error) { failed.Add(1) })
	w.Enqueue(seam.QueuedMessage{ID: "msg-1", Text: "hi"})
	err := w.WaitFor(w.Mark())
	var se *seam.Error
	if !errors.As(err, &se) || se.Code != seam.CodePersistenceUnavailable {
		t.Fatalf("WaitFor = %v, want PERSISTENCE_UNAVAILABLE", err)
	}
	if calls, _ := st.counts(); calls != 3 {
		t.Errorf("the store was tried %d times, want 3 (Retry.Attempts)", calls)
	}
	// Nothing after a lost write is written, and every later waiter hears.
	w.Enqueue(seam.QueuedMessage{ID: "msg-2", Text: "again"})
	if err := w.WaitFor(w.Mark()); !errors.Is(err, se) {
		t.Errorf("a later WaitFor = %v, want the first failure", err)
	}
	w.Close()
	if calls, _ := st.counts(); calls != 3 || failed.Load() != 1 {
		t.Errorf("after the failure: %d store calls (want 3), OnFail called %d times (want 1)", calls, failed.Load())
	}
}

func TestALostClaimIsNotRetried(t *testing.T) {
	st := &fakeStore{fail: 100, err: seam.ErrOwned}
	w := newWriter(st, nil)
	w.Enqueue(seam.QueuedMessage{ID: "msg-1", Text: "hi"})
	err := w.WaitFor(w.Mark())
	var se *seam.Error
	if !errors.As(err, &se) || se.Code != seam.CodeNotResumable || !errors.Is(err, seam.ErrOwned) {
		t.Fatalf("WaitFor = %v, want NOT_RESUMABLE wrapping ErrOwned", err)
	}
	if calls, _ := st.counts(); calls != 1 {
		t.Errorf("the store was tried %d times, want 1: a lost claim stays lost", calls)
	}
	w.Close()
}

func TestAFailedCommitThatLandedIsNotWrittenTwice(t *testing.T) {
	st := &fakeStore{fail: 1, err: errors.New("fsync failed"), landed: true}
	w := newWriter(st, nil)
	w.Add(agent.Event{Seq: 0, Kind: agent.EventTurnStart})
	if err := w.Flush(nil, nil); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if calls, writes := st.counts(); calls != 1 || writes != 1 {
		t.Errorf("%d store calls, %d writes applied; want 1 and 1 (the retry saw the journal had it)", calls, writes)
	}
}

func TestANewChildsFenceIsItsFirstClaim(t *testing.T) {
	st := &fakeStore{}
	claim := seam.Owner{ID: "me", Expires: time.Now().Add(time.Minute)}
	w := New(Config{Store: st, Ctx: context.Background(), Timeout: time.Second, ID: "agent-1", Owner: "me", Log: testLog,
		Retry: Retry{Attempts: 1}, Create: &seam.NewChild{Header: seam.Header{ID: "agent-1"}}, Claim: &claim})
	created := make(chan struct{})
	w.OnCreated(func() { close(created) })
	if w.Fence() != nil || w.Recorded() {
		t.Fatal("a new child has a fence (or a record) before its record is committed")
	}
	w.Enqueue(seam.QueuedMessage{ID: "msg-1", Text: "first"})
	if err := w.Committed(); err != nil {
		t.Fatal(err)
	}
	<-created
	if f := w.Fence(); f == nil || *f != (seam.Fence{Owner: "me", Epoch: 1}) {
		t.Errorf("fence after the record = %v, want me@1", f)
	}
	w.Add(agent.Event{Seq: 0, Kind: agent.EventTurnStart})
	if err := w.WaitFor(w.Mark()); err != nil {
		t.Fatal(err)
	}
	w.Close()
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.writes) != 2 || st.writes[0].Create == nil || st.writes[0].Claim == nil || st.writes[0].Fence != nil {
		t.Errorf("the first write is not the unfenced record with its claim: %+v", st.writes)
	}
	for _, cw := range st.writes[1:] {
		if cw.Fence == nil || cw.Fence.Epoch != 1 {
			t.Errorf("a write after the record is not fenced by epoch 1: %+v", cw)
		}
	}
}

func TestRetryDoRetriesOnlyWhatARetryCanChange(t *testing.T) {
	r := Retry{Attempts: 4, Delay: time.Millisecond}
	for _, c := range []struct {
		err   error
		calls int
	}{{errors.New("busy"), 4}, {seam.ErrOwned, 1}, {seam.ErrNotFound, 1}} {
		n := 0
		got := r.Do(context.Background(), func(context.Context) error { n++; return c.err })
		if !errors.Is(got, c.err) || n != c.calls {
			t.Errorf("Do with %v: %d calls, err %v; want %d calls", c.err, n, got, c.calls)
		}
	}
	n := 0
	if err := r.Do(context.Background(), func(context.Context) error {
		if n++; n < 3 {
			return errors.New("busy")
		}
		return nil
	}); err != nil || n != 3 {
		t.Errorf("a write that succeeds on its third try: %d calls, err %v", n, err)
	}
}
