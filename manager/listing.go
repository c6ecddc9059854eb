package manager

import (
	"context"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager/listing"
	"github.com/mcp-subagent/mcp-subagent/manager/remote"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// The listing's vocabulary is package listing's; these names keep the
// manager's API as its callers know it.
type (
	Row             = listing.Row
	ListQuery       = listing.Query
	ListPage        = listing.Page
	PendingQuestion = listing.PendingQuestion
	Transcript      = listing.Transcript
	TranscriptEntry = listing.TranscriptEntry
)

const (
	StatusRunning       = listing.StatusRunning
	StatusQueued        = listing.StatusQueued
	StatusIdle          = listing.StatusIdle
	StatusReady         = listing.StatusReady
	StatusInputRequired = listing.StatusInputRequired
	MaxPageLimit        = listing.MaxPageLimit
	MaxTranscriptText   = listing.MaxTranscriptText
)

// lister lists this manager's children (package listing), reading the
// live ones through listSource.
func (m *Manager) lister() listing.Lister {
	return listing.Lister{Store: m.store, Source: listSource{m}, Log: m.log}
}

func noStoreToList() error {
	return newErr(seam.CodeControlUnavailable, "listing needs a session store; none is configured")
}

// List returns one page of the caller's listing (listing.Lister.Page).
// Listing has no caller context: its reads (and the checkpoints it caches)
// are the manager's own, bounded.
func (m *Manager) List(caller seam.ParentRef, q ListQuery) (ListPage, error) {
	if m.store == nil {
		return ListPage{}, noStoreToList()
	}
	ctx, cancel := m.bg()
	defer cancel()
	return m.lister().Page(ctx, caller.Address(), q)
}

// ListDescendants lists the caller's whole subtree, live state merged over
// the store, in creation order (listing.Lister.Subtree).
func (m *Manager) ListDescendants(caller seam.ParentRef) ([]Row, error) {
	if m.store == nil {
		return nil, noStoreToList()
	}
	ctx, cancel := m.bg()
	defer cancel()
	return m.lister().Subtree(ctx, caller.Address())
}

// TreeUsage returns what the descendants of an agent (a child id) have
// used so far, all levels summed.
func (m *Manager) TreeUsage(agentID string) (seam.Usage, error) {
	if m.store == nil {
		return seam.Usage{}, noStoreToList()
	}
	ctx, cancel := m.bg()
	defer cancel()
	return m.lister().TreeUsage(ctx, agentID)
}

// listSource is the manager as listing's Source.
type listSource struct{ m *Manager }

// live is a's state for a listing row.
func (s listSource) live(a *activation) listing.Live {
	l := listing.Live{Header: a.hdr, Model: a.desc.Model, Status: a.status()}
	a.mu.Lock()
	l.Usage, l.Last = a.usage, a.last
	a.mu.Unlock()
	for _, p := range s.m.questions.Pending(a.hdr.ID) {
		q := p.Question
		l.Questions = append(l.Questions, PendingQuestion{ID: q.ID, Text: q.Message, Kind: string(q.Kind), Choices: q.Choices})
	}
	return l
}

func (s listSource) Resident(id string) (listing.Live, bool) {
	s.m.mu.Lock()
	a := s.m.live[id]
	s.m.mu.Unlock()
	if a == nil {
		return listing.Live{}, false
	}
	return s.live(a), true
}

func (s listSource) ResidentChildren(parent string) []listing.Live {
	s.m.mu.Lock()
	var as []*activation
	for _, a := range s.m.live {
		if a.hdr.Parent == parent && a.persist.Recorded() { // an id is listed once stored
			as = append(as, a)
		}
	}
	s.m.mu.Unlock()
	out := make([]listing.Live, len(as))
	for i, a := range as {
		out[i] = s.live(a)
	}
	return out
}

func (s listSource) Corrupt(id string) string {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return s.m.corrupt[id]
}

func (s listSource) NoteCorrupt(id string, err error) { s.m.noteCorrupt(id, err) }

func (s listSource) Elsewhere(ctx context.Context) map[string]seam.Claim { return s.m.elsewhere(ctx) }

func (s listSource) StatusElsewhere(ctx context.Context, id string, journal []agent.Event) string {
	return s.m.statusElsewhere(ctx, id, journal)
}

func (s listSource) ResidentElsewhere(ctx context.Context, parent string, claims map[string]seam.Claim) []seam.Listing {
	return remote.Listings(ctx, s.m.store, parent, claims)
}
