package view

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// A tree stream does not list the tree itself: every tree stream of one
// principal shares that principal's feed, which lists the tree once per
// wake-up (a lifecycle event, or a tick), bounds it to the newest MaxRows
// rows, encodes each row once, and hands the result to every stream. So N
// tabs of one principal cost one listing per tick, not N, and a stream's
// own work is comparing its last sent rows with the shared ones.

// treeState is one listing as the feed shares it; never changed once
// published.
type treeState struct {
	rows     []Row
	js       []string // rows[i] as JSON
	total    int
	resident bool
	err      error // the listing failed before any succeeded
}

// same reports whether o shows what t shows (then nothing is published).
func (t *treeState) same(o *treeState) bool {
	if t == nil || o == nil || t.err != nil || o.err != nil || t.total != o.total || len(t.js) != len(o.js) {
		return false
	}
	for i := range t.js {
		if t.js[i] != o.js[i] {
			return false
		}
	}
	return true
}

// feed is one principal's shared listing. Its subscribers and latest state
// are guarded by Server.mu.
type feed struct {
	caller seam.ParentRef
	subs   map[chan *treeState]struct{}
	latest *treeState    // nil until the first listing
	stop   chan struct{} // closed when the last subscriber leaves
}

// DefaultMaxStreams is Options.MaxStreams' default.
const DefaultMaxStreams = 16

// admit counts a new stream of principal against Options.MaxStreams; it
// answers 429 (and false) when the principal already has that many.
func (s *Server) admit(w http.ResponseWriter, principal string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.open[principal]; n >= s.opts.MaxStreams {
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf(
			"TOO_MANY_STREAMS: this view's principal has %d streams open (tree and transcript), the most allowed (view option MaxStreams, default %d); close another view tab or wait for one to end, then reload",
			n, DefaultMaxStreams))
		return false
	}
	s.open[principal]++
	return true
}

func (s *Server) release(principal string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[principal]--; s.open[principal] <= 0 {
		delete(s.open, principal)
	}
}

// join subscribes a tree stream to its principal's feed, starting the
// feed for the first one. The channel holds at most the newest state not
// yet taken (a slow stream skips states, never queues them).
func (s *Server) join(caller seam.ParentRef) (ch chan *treeState, latest *treeState, leave func()) {
	ch = make(chan *treeState, 1)
	s.mu.Lock()
	f := s.feeds[caller.Principal]
	if f == nil {
		f = &feed{caller: caller, subs: map[chan *treeState]struct{}{}, stop: make(chan struct{})}
		s.feeds[caller.Principal] = f
		s.streams.Add(1)
		go s.runFeed(f)
	}
	f.subs[ch] = struct{}{}
	latest = f.latest
	s.mu.Unlock()
	return ch, latest, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(f.subs, ch)
		if len(f.subs) == 0 {
			delete(s.feeds, caller.Principal)
			close(f.stop)
		}
	}
}

// publish hands st to every subscriber, replacing a state one has not
// taken yet.
func (s *Server) publish(f *feed, st *treeState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f.latest = st
	for ch := range f.subs {
		select {
		case <-ch:
		default:
		}
		ch <- st
	}
}

// list reads the principal's tree once: bounded and encoded for every
// stream.
func (s *Server) list(caller seam.ParentRef) (*treeState, error) {
	list, err := s.src.ListDescendants(caller)
	if err != nil {
		return nil, err
	}
	rows, total := s.bound(list)
	st := &treeState{rows: make([]Row, len(rows)), js: make([]string, len(rows)), total: total, resident: anyResident(list)}
	for i, r := range rows {
		st.rows[i] = viewRow(r)
		b, _ := json.Marshal(st.rows[i])
		st.js[i] = string(b)
	}
	return st, nil
}

// runFeed lists a principal's tree for its streams until the last leaves
// or the view closes: at once, then on each lifecycle event and tick.
func (s *Server) runFeed(f *feed) {
	defer s.streams.Done()
	changed := make(chan struct{}, 1)
	// Any child's start or settlement re-reads the tree (coalesced); the
	// listing itself keeps to the caller's own tree.
	unsub := s.src.Subscribe(func(manager.Event) {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	defer unsub()
	tick := time.NewTicker(s.opts.Tick)
	defer tick.Stop()
	var last *treeState
	var listed time.Time
	ticks := 0
	for first := true; ; first = false {
		if !first {
			select {
			case <-f.stop:
				return
			case <-s.done:
				return
			case <-changed:
			case <-tick.C:
				// With no child resident only a lifecycle event (a
				// start, a resume) changes a row, and it re-reads at
				// once; the tick then only catches removals (a prune),
				// ten times slower.
				if ticks++; last != nil && !last.resident && ticks%10 != 0 {
					continue
				}
			}
			// A burst of lifecycle events (a thousand children
			// starting) costs one listing per quarter tick, not one
			// each.
			if gap := s.opts.Tick/4 - time.Since(listed); gap > 0 {
				t := time.NewTimer(gap)
				select {
				case <-f.stop:
					t.Stop()
					return
				case <-s.done:
					t.Stop()
					return
				case <-t.C:
				}
			}
		}
		listed = time.Now()
		st, err := s.list(f.caller)
		if err != nil {
			s.log.Warn("web view: listing the tree failed", "principal", f.caller.Principal, "err", err)
			if last == nil { // the streams waiting for a first listing answer with the error
				s.publish(f, &treeState{err: err})
			}
			continue
		}
		if st.same(last) {
			last = st // the resident flag may differ; the rows do not
			continue
		}
		last = st
		s.publish(f, st)
	}
}
