package recovery

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// fake is the store and the host at once: what it holds, and what
// recovery asked of it.
type fake struct {
	t         *testing.T
	mu        sync.Mutex
	claims    []seam.Claim
	headers   map[string]seam.Header
	events    map[string][]agent.Event
	later     map[string][]agent.Event // committed by the former owner between the read and the takeover
	unread    map[string]error         // Events fails
	resident  map[string]bool
	known     map[string]bool // unreadable already
	takeErr   error
	writeErr  error
	exclusive bool

	took, told, announced, closed, queued []string
	writes                                map[string]seam.ChildWrite
}

func newFake(t *testing.T) *fake {
	return &fake{t: t, headers: map[string]seam.Header{}, events: map[string][]agent.Event{}, later: map[string][]agent.Event{},
		unread: map[string]error{}, resident: map[string]bool{}, known: map[string]bool{}, writes: map[string]seam.ChildWrite{}}
}

func (f *fake) Residents(context.Context) ([]seam.Claim, error) { return f.claims, nil }
func (f *fake) Header(_ context.Context, id string) (seam.Header, error) {
	h, ok := f.headers[id]
	if !ok {
		return h, seam.ErrNotFound
	}
	return h, nil
}
func (f *fake) Events(_ context.Context, id string) ([]agent.Event, error) {
	if err := f.unread[id]; err != nil {
		return nil, err
	}
	return slices.Clone(f.events[id]), nil
}
func (f *fake) EventsFrom(_ context.Context, id string, from int64) ([]agent.Event, error) {
	if from != int64(len(f.events[id])) {
		f.t.Errorf("EventsFrom(%s, %d), want from the end of the first read (%d)", id, from, len(f.events[id]))
	}
	return f.later[id], nil
}

func (f *fake) Resident(id string) bool { return f.resident[id] }
func (f *fake) Exclusive(fn func()) {
	f.mu.Lock()
	f.exclusive = true
	fn()
	f.exclusive = false
	f.mu.Unlock()
}
func (f *fake) TakeOver(_ context.Context, c seam.Claim) (*seam.Fence, error) {
	if !f.exclusive {
		f.t.Error("the takeover ran outside Exclusive")
	}
	if f.takeErr != nil {
		return nil, f.takeErr
	}
	f.took = append(f.took, c.ChildID)
	return &seam.Fence{Owner: "A", Epoch: c.Epoch + 1}, nil
}
func (f *fake) Write(_ context.Context, id string, w seam.ChildWrite) error {
	if !f.exclusive {
		f.t.Error("the closing write ran outside Exclusive")
	}
	if f.writeErr != nil {
		return f.writeErr
	}
	f.writes[id] = w
	return nil
}
func (f *fake) Unreadable(id string) bool { return f.known[id] }
func (f *fake) TellUnreadable(h seam.Header, err error) {
	f.told = append(f.told, h.ID)
	f.known[h.ID] = true
}
func (f *fake) Usage(events []agent.Event) seam.Usage {
	return seam.Usage{InputTokens: int64(len(events))}
}
func (f *fake) Announce(h seam.Header, n seam.Notice)      { f.announced = append(f.announced, h.ID) }
func (f *fake) Closed(_ context.Context, id string)        { f.closed = append(f.closed, id) }
func (f *fake) RunQueued(_ context.Context, h seam.Header) { f.queued = append(f.queued, h.ID) }
func (f *fake) Settled(h seam.Header, last seam.Result) seam.Notice {
	return seam.Notice{ChildID: h.ID, Text: "settled " + string(last.StopReason), StopReason: last.StopReason}
}

var now = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func (f *fake) recoverer() Recoverer {
	return Recoverer{Store: f, Host: f, Owner: "A", Now: func() time.Time { return now }, Timeout: time.Minute, Log: slog.New(slog.DiscardHandler)}
}

// child adds a child with a claim of owner, expiring at exp, whose
// journal is events.
func (f *fake) child(id, owner string, exp time.Time, events ...agent.Event) {
	f.claims = append(f.claims, seam.Claim{ChildID: id, Owner: seam.Owner{ID: owner, Expires: exp}, Epoch: 3})
	f.headers[id] = seam.Header{ID: id, Parent: "parent-of-" + id, Label: "L", Mode: seam.ModeContinuable}
	f.events[id] = events
}

func ended(out string) []agent.Event {
	return []agent.Event{{Seq: 0, Kind: agent.EventTurnStart, Turn: 1},
		{Seq: 1, Kind: agent.EventMessage, Turn: 1, Message: &seam.Message{Role: seam.RoleAssistant, Content: out}},
		{Seq: 2, Kind: agent.EventTurnEnd, Turn: 1, StopReason: agent.StopCompleted}}
}

func TestRecoverClosesOnlyTheEpochsOfOwnersThatAreGone(t *testing.T) {
	f := newFake(t)
	open := []agent.Event{{Seq: 0, Kind: agent.EventTurnStart, Turn: 1}}
	f.child("expired", "B", now.Add(-time.Second), open...)
	f.child("live", "B", now.Add(time.Minute), open...)
	f.child("mine", "A", now.Add(time.Minute), ended("done")...)
	f.child("here", "A", now.Add(time.Minute), open...)
	f.resident["here"] = true
	if err := f.recoverer().Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"expired", "mine"}; !slices.Equal(f.took, want) || !slices.Equal(f.announced, want) || !slices.Equal(f.closed, want) {
		t.Fatalf("took %v, announced %v, closed %v; want %v each", f.took, f.announced, f.closed, want)
	}
	if len(f.queued) != 0 {
		t.Fatalf("Recover on an unshared store ran queued messages of %v: they wait for the next resume", f.queued)
	}

	// The expired child's open turn is closed aborted, in one write
	// fenced by the new claim, with its checkpoint and its notice.
	w := f.writes["expired"]
	if w.Fence == nil || w.Fence.Epoch != 4 {
		t.Fatalf("closing write fence %+v, want the takeover's (epoch 4)", w.Fence)
	}
	if len(w.Events) != 1 || w.Events[0].Kind != agent.EventTurnEnd || w.Events[0].StopReason != agent.StopAborted {
		t.Fatalf("closing events %+v, want the open turn ended aborted", w.Events)
	}
	if w.Settle == nil || w.Settle.Seq != 2 || w.Settle.Stop != agent.StopAborted || w.Settle.Usage.InputTokens != 2 || w.Settle.Label != "L" {
		t.Fatalf("checkpoint %+v, want seq 2, stop aborted, the usage of all events", w.Settle)
	}
	if w.Notify == nil || w.Notify.To != "parent-of-expired" || w.Notify.Notice.StopReason != agent.StopAborted {
		t.Fatalf("notice %+v, want an aborted settlement to the parent", w.Notify)
	}
	// An ended epoch closes with its last turn's outcome and nothing to
	// append.
	w = f.writes["mine"]
	if len(w.Events) != 0 || w.Settle.Stop != agent.StopCompleted || w.Settle.Closing != "done" {
		t.Fatalf("ended epoch's write %+v / %+v, want no events, completed, closing \"done\"", w.Events, w.Settle)
	}
}

func TestTheTakeoverReadsWhatTheFormerOwnerCommittedMeanwhile(t *testing.T) {
	f := newFake(t)
	f.child("c", "B", now.Add(-time.Second), agent.Event{Seq: 0, Kind: agent.EventTurnStart, Turn: 1})
	f.later["c"] = []agent.Event{{Seq: 1, Kind: agent.EventTurnEnd, Turn: 1, StopReason: agent.StopCompleted}}
	if err := f.recoverer().Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w := f.writes["c"]; len(w.Events) != 0 || w.Settle.Seq != 2 || w.Settle.Stop != agent.StopCompleted {
		t.Fatalf("write %+v / %+v: the turn ended before the takeover must not be closed again", w.Events, w.Settle)
	}
}

func TestAnEmptyEpochEndsAborted(t *testing.T) {
	f := newFake(t)
	f.child("c", "B", now.Add(-time.Second))
	_ = f.recoverer().Recover(context.Background())
	if w := f.writes["c"]; w.Settle == nil || w.Settle.Stop != agent.StopAborted {
		t.Fatalf("an epoch with no turn settled %+v, want aborted", w.Settle)
	}
}

func TestATakeoverRefusedOrAFailedWriteClosesNothing(t *testing.T) {
	for name, set := range map[string]func(*fake){
		"held":          func(f *fake) { f.takeErr = seam.ErrOwned },
		"write refused": func(f *fake) { f.writeErr = seam.ErrOwned },
		"write failed":  func(f *fake) { f.writeErr = errors.New("down") },
	} {
		f := newFake(t)
		f.child("c", "B", now.Add(-time.Second))
		set(f)
		f.recoverer().Sweep(context.Background())
		if len(f.announced)+len(f.closed)+len(f.queued) != 0 {
			t.Errorf("%s: announced %v, closed %v, queued %v; want nothing", name, f.announced, f.closed, f.queued)
		}
	}
}

func TestAnUnreadableJournalKeepsItsClaimAndIsToldOnce(t *testing.T) {
	f := newFake(t)
	f.child("c", "B", now.Add(-time.Second))
	f.unread["c"] = seam.ErrCorrupt
	r := f.recoverer()
	_ = r.Recover(context.Background())
	r.Sweep(context.Background())
	r.Sweep(context.Background())
	if !slices.Equal(f.told, []string{"c"}) || len(f.took) != 0 {
		t.Fatalf("told %v, took %v; want told once, nothing taken over", f.told, f.took)
	}
	// A new start tells again.
	_ = r.Recover(context.Background())
	if len(f.told) != 2 {
		t.Fatalf("told %v after a second Recover, want twice", f.told)
	}
}

func TestSweepTakesOverExpiredAndOwnNonResidentClaims(t *testing.T) {
	f := newFake(t)
	f.child("expired", "B", now.Add(-time.Second), ended("x")...)
	f.child("live", "B", now.Add(time.Minute), ended("x")...)
	f.child("old-build", "", now.Add(-time.Hour), ended("x")...)
	f.child("mine", "A", now.Add(time.Minute), ended("x")...)
	f.child("mine-here", "A", now.Add(time.Minute), ended("x")...)
	f.child("theirs-here", "B", now.Add(-time.Second), ended("x")...)
	f.resident["mine-here"], f.resident["theirs-here"] = true, true
	f.recoverer().Sweep(context.Background())
	if want := []string{"expired", "mine"}; !slices.Equal(f.took, want) || !slices.Equal(f.queued, want) {
		t.Fatalf("took %v, queued %v; want %v each", f.took, f.queued, want)
	}
}

func TestRecoverOnASharedStoreRunsWhatWasQueued(t *testing.T) {
	f := newFake(t)
	f.child("expired", "B", now.Add(-time.Second), ended("x")...)
	f.child("live", "B", now.Add(time.Minute), ended("x")...)
	r := f.recoverer()
	r.Shared = true
	if err := r.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"expired"}; !slices.Equal(f.queued, want) {
		t.Fatalf("queued %v, want %v", f.queued, want)
	}
}
