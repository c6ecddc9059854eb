package agent

import "sync"

// TurnProgress sends progress notes (ProgressNotes) for j's next turn
// until the turn ends or the returned stop is called; after stop returns,
// no note is sent, neither from the journal nor through note (a note of
// the caller's own, such as the manager's "started <id>"). Its lock is
// held across send, so that no note goes out after stop.
func TurnProgress(j *Journal, send func(string)) (note func(string), stop func()) {
	notes := ProgressNotes(send)
	var mu sync.Mutex
	stopped := false
	// The listener never unsubscribes itself: it runs under the journal's
	// notification lock, which an Append may be waiting for while holding
	// the lock Subscribe's cancel takes.
	unsub := j.Subscribe(func(e Event) {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		notes(e)
		if e.Kind == EventTurnEnd {
			stopped = true
		}
	})
	note = func(n string) {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			send(n)
		}
	}
	var once sync.Once
	return note, func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
		once.Do(unsub)
	}
}
