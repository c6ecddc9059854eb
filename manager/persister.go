package manager

import (
	"log/slog"
	"sync"

	"github.com/mcp-subagent/mcp-subagent/agent"
)

// persister is a child's only writer. It commits the child's record, its
// journal events and its settlement in order, off the turn's path: the
// agent never waits for a disk sync, and whatever piles up during one sync
// goes out in the next commit. Ids handed to callers wait for the record's
// commit (committed); a crash can lose at most the events of the last few
// milliseconds.
type persister struct {
	store Store
	id    string
	log   *slog.Logger

	mu      sync.Mutex
	pending ChildWrite
	claimed []string      // dequeues held back to ride with the next event
	kick    chan struct{} // buffered 1
	drained *sync.Cond    // broadcast after each commit
	writing bool
	closed  bool
	done    chan struct{}
	// issued counts writes queued so far, written those committed: a
	// caller waits for its own write (waitFor(mark())) without waiting for
	// everything queued after it.
	issued, written int64

	created   chan struct{} // closed once the record is committed
	createErr error
}

// newPersister starts a child's writer. create, when non-nil, is the new
// child's record, committed first.
func newPersister(store Store, id string, log *slog.Logger, create *NewChild) *persister {
	p := &persister{store: store, id: id, log: log, kick: make(chan struct{}, 1), done: make(chan struct{}),
		created: make(chan struct{})}
	p.drained = sync.NewCond(&p.mu)
	if create != nil {
		p.pending.Create = create
		p.issued++
		p.kick <- struct{}{}
	} else {
		close(p.created)
	}
	go p.loop()
	return p
}

// committed waits until the child's record is committed.
func (p *persister) committed() error {
	<-p.created
	return p.createErr
}

// add queues an event; it is the journal listener and never blocks on I/O.
// Messages a turn claimed go out in the same commit as the turn's first
// event, so a crash leaves either the queued message or its turn, never
// neither.
func (p *persister) add(e agent.Event) {
	p.mu.Lock()
	p.pending.Events = append(p.pending.Events, e)
	p.pending.Dequeue = append(p.pending.Dequeue, p.claimed...)
	p.claimed = nil
	p.issued++
	p.mu.Unlock()
	p.poke()
}

// enqueue records a message admitted to the inbox.
func (p *persister) enqueue(q QueuedMessage) {
	p.mu.Lock()
	p.pending.Enqueue = append(p.pending.Enqueue, q)
	p.issued++
	p.mu.Unlock()
	p.poke()
}

// claim records that a turn took these messages; see add.
func (p *persister) claim(ids ...string) {
	p.mu.Lock()
	p.claimed = append(p.claimed, ids...)
	p.mu.Unlock()
}

func (p *persister) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *persister) loop() {
	defer close(p.done)
	for range p.kick {
		for {
			p.mu.Lock()
			w := p.pending
			p.pending = ChildWrite{}
			if w.Create == nil && len(w.Events) == 0 && w.Settle == nil && len(w.Enqueue)+len(w.Dequeue) == 0 {
				p.writing = false
				p.drained.Broadcast()
				closed := p.closed
				p.mu.Unlock()
				if closed {
					return
				}
				break
			}
			p.writing = true
			hi := p.issued
			p.mu.Unlock()
			err := writeChild(p.store, p.id, w)
			p.mu.Lock()
			p.written = hi
			p.drained.Broadcast()
			p.mu.Unlock()
			if w.Create != nil {
				if err != nil {
					p.createErr = &Error{Code: CodePersistenceUnavailable, AgentID: p.id, Message: "recording the child failed", Err: err}
				}
				close(p.created)
			}
			if err != nil {
				p.log.Error("persisting a child failed", "agent_id", p.id, "events", len(w.Events), "settle", w.Settle != nil, "err", err)
			}
		}
	}
}

// flush waits until everything queued so far is committed; with settle it
// first queues the final checkpoint (and the clearing of the active mark).
func (p *persister) flush(settle *Checkpoint) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return // the writer is gone (the server is stopping); nothing waits on it
	}
	if settle != nil {
		p.pending.Settle = settle
	}
	if settle != nil && len(p.claimed) > 0 { // a turn that wrote no event
		p.pending.Dequeue = append(p.pending.Dequeue, p.claimed...)
		p.claimed = nil
	}
	for p.pending.Create != nil || len(p.pending.Events) > 0 || p.pending.Settle != nil ||
		len(p.pending.Enqueue)+len(p.pending.Dequeue) > 0 || p.writing {
		p.poke()
		p.drained.Wait()
	}
}

// mark returns a ticket for everything queued so far.
func (p *persister) mark() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.issued
}

// waitFor waits until the writes up to ticket t are committed (not those
// queued after).
func (p *persister) waitFor(t int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.written < t && !p.closed {
		p.poke()
		p.drained.Wait()
	}
}

// close stops the writer once it is drained.
func (p *persister) close() {
	p.flush(nil)
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.poke()
	<-p.done
}
