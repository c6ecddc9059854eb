package manager

import (
	"log/slog"
	"sync"

	"github.com/mcp-subagent/mcp-subagent/agent"
)

// persister writes a child's journal events to the store in order, off the
// turn's path: the agent never waits for a disk sync, and events that pile
// up during one sync go out together in the next. Ids handed to callers do
// not depend on it (they are committed synchronously); a crash can lose at
// most the events of the last few milliseconds.
type persister struct {
	store Store
	id    string
	log   *slog.Logger

	mu      sync.Mutex
	pending []agent.Event
	kick    chan struct{} // buffered 1
	drained *sync.Cond    // broadcast when pending empties
	writing bool
	closed  bool
	done    chan struct{}
}

func newPersister(store Store, id string, log *slog.Logger) *persister {
	p := &persister{store: store, id: id, log: log, kick: make(chan struct{}, 1), done: make(chan struct{})}
	p.drained = sync.NewCond(&p.mu)
	go p.loop()
	return p
}

// add queues an event; it is the journal listener and never blocks on I/O.
func (p *persister) add(e agent.Event) {
	p.mu.Lock()
	p.pending = append(p.pending, e)
	p.mu.Unlock()
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
			batch := p.pending
			p.pending = nil
			if len(batch) == 0 {
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
			p.mu.Unlock()
			if err := p.store.AppendEvents(p.id, batch); err != nil {
				p.log.Error("persisting journal events failed", "agent_id", p.id, "from_seq", batch[0].Seq, "events", len(batch), "err", err)
			}
		}
	}
}

// flush waits until every queued event has been written.
func (p *persister) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.pending) > 0 || p.writing {
		select {
		case p.kick <- struct{}{}:
		default:
		}
		p.drained.Wait()
	}
}

// close flushes and stops the writer.
func (p *persister) close() {
	p.flush()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
	<-p.done
}
