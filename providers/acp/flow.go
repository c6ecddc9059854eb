package acp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"sync"
	"time"
)

const (
	// flowLimit bounds the session/update notifications handed to the SDK
	// and not yet handled, well below the SDK's queue of 1024.
	flowLimit = 256
	// flowStall is how long the reader waits without any update being
	// handled before it stops counting the ones outstanding (the SDK drops
	// an update it cannot decode without calling the handler).
	flowStall = 200 * time.Millisecond
)

// flow sits between the agent's stdout and the SDK's reader and holds the
// reading back while too many updates wait to be handled.
//
// The SDK reads lines as fast as they come and queues notifications for
// one goroutine to handle; when its queue of 1024 overflows it closes the
// connection. A handler that never blocks is not enough: an agent that
// bursts (session/load replays a whole history at once) can outrun the
// handling goroutine, and does on a busy or single-CPU machine. So the
// reader counts the session/update lines it passes on, the handler counts
// the ones it got, and the reader waits while the difference is at the
// limit; the agent's writes then block on the full pipe, which is the
// backpressure the protocol relies on.
type flow struct {
	r    *bufio.Reader
	line []byte // the rest of the line being passed on
	err  error  // the read error to return once line is passed on

	mu       sync.Mutex
	sent     int64
	handled  int64
	progress chan struct{} // closed when an update is handled while a reader waits
}

func newFlow(r io.Reader) *flow {
	return &flow{r: bufio.NewReaderSize(r, 64<<10)}
}

func (f *flow) Read(p []byte) (int, error) {
	if len(f.line) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		line, err := f.r.ReadBytes('\n')
		f.line, f.err = line, err
		if len(line) == 0 {
			return 0, err
		}
		if isUpdate(line) {
			f.admit()
		}
	}
	n := copy(p, f.line)
	f.line = f.line[n:]
	return n, nil
}

// admit waits until one more update may be passed on, and counts it.
func (f *flow) admit() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.sent-f.handled >= flowLimit {
		if f.progress == nil {
			f.progress = make(chan struct{})
		}
		ch, before := f.progress, f.handled
		f.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(flowStall):
		}
		f.mu.Lock()
		if f.handled == before {
			// Nothing was handled for a while: what is outstanding is lost.
			f.sent = f.handled
		}
	}
	f.sent++
}

// handledOne is called by the update handler for each update.
func (f *flow) handledOne() {
	f.mu.Lock()
	if f.handled < f.sent { // a line the reader did not count is not progress
		f.handled++
	}
	if f.progress != nil {
		close(f.progress)
		f.progress = nil
	}
	f.mu.Unlock()
}

// isUpdate reports whether a line is a session/update notification, the
// way the SDK reads it.
func isUpdate(line []byte) bool {
	if !bytes.Contains(line, []byte("session/update")) {
		return false
	}
	var m struct {
		ID     *json.RawMessage `json:"id"`
		Method string           `json:"method"`
	}
	return json.Unmarshal(line, &m) == nil && m.ID == nil && m.Method == "session/update"
}

// waitCaughtUp waits, at most d, until every update passed on so far has
// been handled. A permission request is handled on its own goroutine,
// possibly before the tool_call update the agent sent just before it: this
// lets the request see what that update said of the tool.
func (f *flow) waitCaughtUp(d time.Duration) {
	deadline := time.Now().Add(d)
	f.mu.Lock()
	defer f.mu.Unlock()
	target := f.sent
	for f.handled < target {
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		if f.progress == nil {
			f.progress = make(chan struct{})
		}
		ch := f.progress
		f.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(left):
		}
		f.mu.Lock()
	}
}
