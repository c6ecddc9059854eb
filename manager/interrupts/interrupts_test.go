package interrupts

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// store is a fake of the abilities: claims, pending requests, wake-ups.
type store struct {
	mu       sync.Mutex
	claims   map[string]seam.Claim
	pending  map[string]seam.InterruptRequest
	recorded []seam.InterruptRequest
	reqErr   error
	wake     chan struct{}
}

func newStore() *store {
	return &store{claims: map[string]seam.Claim{}, pending: map[string]seam.InterruptRequest{}, wake: make(chan struct{}, 1)}
}

func (s *store) ClaimOf(_ context.Context, id string) (seam.Claim, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.claims[id]
	return c, ok, nil
}

func (s *store) RequestInterrupt(_ context.Context, id string, r seam.InterruptRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reqErr != nil {
		return s.reqErr
	}
	s.recorded = append(s.recorded, r)
	s.pending[id] = r
	return nil
}

func (s *store) TakeInterrupt(_ context.Context, id string, f *seam.Fence) (seam.InterruptRequest, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.pending[id]
	delete(s.pending, id)
	return r, ok, nil
}

func (s *store) Watch(context.Context, string) (<-chan struct{}, func(), error) {
	return s.wake, func() {}, nil
}

func (s *store) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func TestRequestRecordsOnlyForAnotherLiveOwner(t *testing.T) {
	now := time.Now()
	s := newStore()
	s.claims["live"] = seam.Claim{ChildID: "live", Owner: seam.Owner{ID: "B", Expires: now.Add(time.Minute)}, Epoch: 4}
	s.claims["mine"] = seam.Claim{ChildID: "mine", Owner: seam.Owner{ID: "A", Expires: now.Add(time.Minute)}}
	s.claims["expired"] = seam.Claim{ChildID: "expired", Owner: seam.Owner{ID: "B", Expires: now.Add(-time.Second)}}
	caller := seam.ParentRef{Principal: "p"}
	for _, id := range []string{"unclaimed", "mine", "expired", "live"} {
		if err := Request(context.Background(), s, "A", now, caller, id, quiet); err != nil {
			t.Fatalf("Request(%s) = %v", id, err)
		}
	}
	if len(s.recorded) != 1 || s.recorded[0].From != "A" || s.recorded[0].Epoch != 4 || s.recorded[0].Reason != "interrupted by "+caller.Address() {
		t.Fatalf("recorded %+v, want one request from A at epoch 4 for the live child only", s.recorded)
	}

	s.reqErr = errors.New("database down")
	err := Request(context.Background(), s, "A", now, caller, "live", quiet)
	var se *seam.Error
	if !errors.As(err, &se) || se.Code != seam.CodePersistenceUnavailable || se.AgentID != "live" {
		t.Fatalf("Request with a failing store = %v, want PERSISTENCE_UNAVAILABLE", err)
	}
	// A store without the ability: a no-op.
	if err := Request(context.Background(), struct{ Claims }{s}, "A", now, caller, "live", quiet); err != nil {
		t.Fatalf("Request on a store without seam.Interrupts = %v, want nil", err)
	}
}

func TestWatchTakesRequestsOfTheCurrentEpochOnly(t *testing.T) {
	s := newStore()
	interrupted := make(chan string, 4)
	adopted := make(chan struct{}, 16)
	released, created := make(chan struct{}), make(chan struct{})
	c := Child{ID: "c", Released: released, Created: created,
		Fence:     func() *seam.Fence { return &seam.Fence{Owner: "A", Epoch: 3} },
		Interrupt: func() { interrupted <- "c" },
		Adopt:     func() { adopted <- struct{}{} }}
	done := make(chan struct{})
	go func() { Watch(context.Background(), s, c, time.Second, quiet); close(done) }()

	// A request already pending is taken once the record is committed.
	s.mu.Lock()
	s.pending["c"] = seam.InterruptRequest{From: "B", Epoch: 3}
	s.mu.Unlock()
	close(created)
	if got := <-interrupted; got != "c" {
		t.Fatalf("interrupted %q", got)
	}
	<-adopted

	// A request of an earlier epoch is dropped (and consumed).
	s.mu.Lock()
	s.pending["c"] = seam.InterruptRequest{From: "old", Epoch: 2}
	s.mu.Unlock()
	s.signal()
	<-adopted
	s.mu.Lock()
	_, left := s.pending["c"]
	s.mu.Unlock()
	if left {
		t.Fatal("the old epoch's request was not consumed")
	}
	select {
	case <-interrupted:
		t.Fatal("interrupted by a request of the former owner's epoch")
	default:
	}

	close(released)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not end when the child was released")
	}
}

func TestWatchNeedsBothAbilities(t *testing.T) {
	c := Child{ID: "c", Fence: func() *seam.Fence { t.Fatal("read the fence"); return nil }}
	Watch(context.Background(), struct{ Claims }{newStore()}, c, time.Second, quiet) // returns at once
}
