package manager

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/llm"
)

func toolMessage(callID, text string) *llm.Message {
	return &llm.Message{Role: llm.RoleTool, ToolCallID: callID, Content: text}
}

// release removes a from the manager and from its owning parent. A notice
// (when given) goes into the owning parent's inbox in the same critical
// section that drops the ownership, so the parent can never settle between
// the two and miss it. stored is the notice as the settlement already
// committed it (nil: not stored yet, so it is stored here).
func (m *Manager) release(a *activation, notice *inboxMsg, stored *ParentNotice) {
	delivered := false
	if pa := a.parent; pa != nil {
		pa.mu.Lock()
		if notice != nil && !pa.settling {
			pa.inbox = append(pa.inbox, *notice)
			if stored == nil || !stored.Inbox {
				pa.persist.enqueue(QueuedMessage{ID: notice.id, Text: notice.text, Source: notice.source})
			}
			pa.parked = false
			delivered = true
		}
		delete(pa.owned, a.hdr.ID)
		pa.signal()
		pa.mu.Unlock()
		if delivered {
			m.signalAddr(pa.hdr.ID)
		}
	}
	if notice != nil && !delivered {
		switch {
		case stored == nil:
			if err := m.deliver(a.hdr, Notice{Source: notice.source, Text: notice.text, StopReason: notice.stop}); err != nil {
				m.log.Error("a settlement notice could not be stored; the next start announces the epoch again", "child", a.hdr.ID, "err", err)
			}
		case stored.Inbox:
			// In the stopped parent's stored inbox: its next resume runs it.
			m.signalAddr(stored.To)
		default:
			m.announce(a.hdr, stored.Notice)
		}
	}
	m.mu.Lock()
	if m.live[a.hdr.ID] == a {
		delete(m.live, a.hdr.ID)
	}
	m.mu.Unlock()
}

// settleNotice is how a settlement's notice is committed with it: into the
// owning parent's stored inbox, or queued under the parent's address. Nil
// when there is no notice, or when the parent is a live agent that does
// not own the child (then deliver admits it after the settlement).
func (m *Manager) settleNotice(a *activation, n *inboxMsg) *ParentNotice {
	if n == nil {
		return nil
	}
	if pa := a.parent; pa != nil {
		pa.mu.Lock()
		settling := pa.settling
		pa.mu.Unlock()
		if !settling {
			return &ParentNotice{To: pa.hdr.ID, Inbox: true, Message: QueuedMessage{ID: n.id, Text: n.text, Source: n.source}}
		}
	} else {
		m.mu.Lock()
		pa := m.live[a.hdr.Parent]
		m.mu.Unlock()
		if pa != nil {
			return nil
		}
	}
	return &ParentNotice{To: a.hdr.Parent, Notice: stamp(a.hdr, Notice{Source: n.source, Text: n.text, StopReason: n.stop})}
}

// stamp fills in what a stored notice about child h carries.
func stamp(h Header, n Notice) Notice {
	n.ChildID, n.Time = h.ID, time.Now().UTC()
	if h.Parent == PrincipalAddress(h.Principal) {
		n.Session = h.Session
	}
	return n
}

// deliver hands a notice or report about child h to its parent: a live
// parent agent gets it in its inbox as a turn; a stored agent gets it with
// its next activation; a root principal gets it in band on a later call
// (of the session that started the child while it is connected), with a
// push to its connected sessions. It fails only when the notice could not
// be stored.
func (m *Manager) deliver(h Header, n Notice) error {
	parentAddr := h.Parent
	m.mu.Lock()
	pa := m.live[parentAddr]
	m.mu.Unlock()
	if pa != nil {
		if _, _, _, ok := pa.admit(n.Text, n.Source, false); ok {
			m.signalAddr(parentAddr)
			return pa.durable()
		}
	}
	n = stamp(h, n)
	if err := m.storeWrite(func() error { return m.store.AddNotice(parentAddr, n) }); err != nil {
		return &Error{Code: CodePersistenceUnavailable, AgentID: h.ID, Message: "storing a notice for " + parentAddr + " failed", Err: err}
	}
	m.announce(h, n)
	return nil
}

// announce tells whoever waits at h's parent that a notice was stored.
func (m *Manager) announce(h Header, n Notice) {
	if hook := m.opts.OnNotice; hook != nil && h.Parent == PrincipalAddress(h.Principal) {
		func() {
			defer func() {
				if r := recover(); r != nil {
					m.log.Error("notice hook panicked", "panic", r)
				}
			}()
			hook(h.Principal, n)
		}()
	}
	m.signalAddr(h.Parent)
}

// storeWrite runs a write outside a child's writer with the same bounded
// retry.
func (m *Manager) storeWrite(write func() error) error {
	delay := m.retry.delay
	var err error
	for i := 0; i < max(m.retry.attempts, 1); i++ {
		if i > 0 {
			time.Sleep(delay)
			delay *= 2
		}
		if err = write(); err == nil {
			return nil
		}
	}
	return err
}

// signalAddr wakes callers waiting for something pending at addr.
func (m *Manager) signalAddr(addr string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ch, ok := m.pendingSig[addr]; ok {
		close(ch)
		delete(m.pendingSig, addr)
	}
}

func (m *Manager) pendingChan(addr string) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch, ok := m.pendingSig[addr]
	if !ok {
		ch = make(chan struct{})
		m.pendingSig[addr] = ch
	}
	return ch
}

// flush drains the child's journal writer and writes its projection
// checkpoint; settled also clears its active mark and commits notify, in
// one commit where the store can. A failed settlement write stops the
// child (persistFailed) and is returned; a failed checkpoint at shutdown is
// logged: a later list folds the journal instead.
func (m *Manager) flush(a *activation, settled bool, notify *ParentNotice) error {
	a.unsubscribe()
	a.mu.Lock()
	cp := Checkpoint{Seq: int64(a.driver.Journal().Len()), Mode: a.hdr.Mode, Label: a.hdr.Label, Usage: a.usage, Stop: a.last.StopReason,
		Closing: truncateUTF8(a.last.Output, MaxClosingBytes)}
	a.mu.Unlock()
	var err error
	if settled {
		err = a.persist.flush(&cp, notify)
	} else if err = a.persist.flush(nil, nil); err == nil {
		if err := m.store.SetCheckpoint(a.hdr.ID, cp); err != nil {
			m.log.Warn("writing a child's checkpoint failed", "agent_id", a.hdr.ID, "err", err)
		}
	}
	a.persist.close()
	return err
}

// Interrupt stops a child's current turn and parks the rest of its queue;
// its descendants keep running and the next message sent wakes the queue.
// The caller must be the child's direct parent or a live ancestor agent. A
// missing, one-shot or settled target is an accepted no-op; a store that
// cannot say whether the child exists is an error, not "missing".
func (m *Manager) Interrupt(caller ParentRef, childID string) error {
	m.mu.Lock()
	a := m.live[childID]
	m.mu.Unlock()
	if a == nil {
		if m.store == nil {
			return nil
		}
		h, err := m.store.Header(childID)
		if errors.Is(err, ErrNotFound) {
			return nil // missing: a no-op
		}
		if err != nil {
			return &Error{Code: CodePersistenceUnavailable, AgentID: childID, Err: err,
				Message: fmt.Sprintf("subagent %s cannot be read from the session store (%v)", childID, err)}
		}
		if h.Parent != caller.Address() {
			ok, err := m.isStoredAncestor(caller.AgentID, h)
			if err != nil {
				return &Error{Code: CodePersistenceUnavailable, AgentID: childID, Err: err,
					Message: fmt.Sprintf("the ancestry of subagent %s cannot be read from the session store (%v)", childID, err)}
			}
			if !ok {
				return unauthorizedInterrupt(childID)
			}
		}
		return nil // settled: a no-op
	}
	if caller.AgentID == childID {
		return &Error{Code: CodeUnauthorized, AgentID: childID, Message: "an agent cannot interrupt itself; finish your turn instead"}
	}
	if a.hdr.Parent != caller.Address() && !isLiveAncestor(a, caller.AgentID) {
		return unauthorizedInterrupt(childID)
	}
	a.interrupt()
	m.log.Info("subagent interrupted", "agent_id", childID, "by", caller.Address())
	return nil
}

func unauthorizedInterrupt(id string) error {
	return &Error{Code: CodeUnauthorized, AgentID: id,
		Message: fmt.Sprintf("you may interrupt only your own descendants; %s is not one of them", id)}
}

func isLiveAncestor(a *activation, agentID string) bool {
	if agentID == "" {
		return false
	}
	for p := a.parent; p != nil; p = p.parent {
		if p.hdr.ID == agentID {
			return true
		}
	}
	return false
}

func (m *Manager) isStoredAncestor(agentID string, h Header) (bool, error) {
	if agentID == "" {
		return false, nil
	}
	for i := 0; i < 64 && h.Parent != "" && h.Parent != PrincipalAddress(h.Principal); i++ {
		if h.Parent == agentID {
			return true, nil
		}
		next, err := m.store.Header(h.Parent)
		if errors.Is(err, ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		h = next
	}
	return false, nil
}

// Delivery says how a report reaches the parent.
type Delivery string

const (
	DeliveryQuiet    Delivery = "quiet"     // injected, no parent turn of its own
	DeliveryNextStep Delivery = "next-step" // an ordinary parent turn
)

// ReportFrom delivers a live child's report to its persisted parent. It
// does not end the child's turn.
func (m *Manager) ReportFrom(caller ParentRef, content string, delivery Delivery) (string, error) {
	m.mu.Lock()
	a := m.live[caller.AgentID]
	m.mu.Unlock()
	if caller.AgentID == "" || a == nil {
		return "", &Error{Code: CodeUnauthorized, Message: "only a running continuable subagent can report to its parent"}
	}
	text := reportText(a.hdr.ID, content)
	if a.hdr.Parent == PrincipalAddress(a.hdr.Principal) {
		if err := m.deliver(a.hdr, Notice{Source: agent.SourceReport, Text: text}); err != nil {
			return "", err
		}
		return newMessageID(), nil
	}
	m.mu.Lock()
	pa := m.live[a.hdr.Parent]
	m.mu.Unlock()
	if pa == nil {
		return "", &Error{Code: CodeParentUnavailable, AgentID: a.hdr.ID,
			Message: "your parent is not running, so the report cannot be delivered; put the result in your final answer instead"}
	}
	var id string
	var ok bool
	if delivery == DeliveryQuiet {
		id, ok = pa.inject(text, agent.SourceReport)
	} else {
		id, _, _, ok = pa.admit(text, agent.SourceReport, false)
	}
	if !ok {
		return "", &Error{Code: CodeParentUnavailable, AgentID: a.hdr.ID, Message: "your parent is finishing and cannot take the report"}
	}
	if err := pa.durable(); err != nil { // the id is handed out: commit first
		return "", err
	}
	m.signalAddr(a.hdr.Parent)
	return id, nil
}

// TakeNotices removes and returns what is pending for a root principal's
// session: the notices of children that session started, and those whose
// originating session is gone (Options.SessionConnected) or unknown. With
// session empty (a transport without sessions) it takes every notice of
// the principal whose session is not connected.
func (m *Manager) TakeNotices(principal, session string) []Notice {
	if m.store == nil {
		return nil
	}
	ns, err := m.store.TakeNotices(PrincipalAddress(principal), func(n Notice) bool {
		return m.noticeFor(n, session)
	})
	if err != nil {
		m.log.Error("reading pending notices failed", "principal", principal, "err", err)
	}
	return ns
}

// noticeFor reports whether a root notice may go to session: it is the
// child's originating session, or that session is not connected.
func (m *Manager) noticeFor(n Notice, session string) bool {
	if n.Session == "" || n.Session == session {
		return true
	}
	live := m.opts.SessionConnected
	return live == nil || !live(n.Session)
}

// WaitNotices blocks until something is pending for a root principal's
// session (see TakeNotices) or ctx ends, then takes it.
func (m *Manager) WaitNotices(ctx context.Context, principal, session string) []Notice {
	addr := PrincipalAddress(principal)
	for {
		ch := m.pendingChan(addr)
		if ns := m.TakeNotices(principal, session); len(ns) > 0 {
			return ns
		}
		select {
		case <-ch:
		case <-m.sessionsChanged():
		case <-ctx.Done():
			return m.TakeNotices(principal, session)
		}
	}
}

// SessionGone tells the manager a root session disconnected: its pending
// notices become any session's of its principal, and waiters recheck.
func (m *Manager) SessionGone() {
	m.mu.Lock()
	ch := m.sessionSig
	m.sessionSig = make(chan struct{})
	m.mu.Unlock()
	close(ch)
}

func (m *Manager) sessionsChanged() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sessionSig
}

// WaitSignal blocks until something is delivered to addr or ctx ends.
func (m *Manager) WaitSignal(ctx context.Context, addr string) {
	select {
	case <-m.pendingChan(addr):
	case <-ctx.Done():
	}
}

// Row is one entry of a listing: a child, or a diagnostic for a child that
// cannot be read.
type Row struct {
	Kind      string    `json:"kind"` // "child" or "diagnostic"
	ID        string    `json:"id"`
	Label     string    `json:"label,omitempty"`
	Status    string    `json:"status,omitempty"` // running, idle, ready
	Provider  string    `json:"provider,omitempty"`
	Parent    string    `json:"parent,omitempty"`
	Depth     int       `json:"depth,omitempty"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	Usage     *Usage    `json:"usage,omitempty"`      // the child's own
	TreeUsage *Usage    `json:"tree_usage,omitempty"` // the child's and all its descendants'
	// LastStopReason and LastMessage are how the child's last epoch (its
	// last turn) ended and its closing message, clipped to
	// MaxClosingBytes: a model that missed a notice still learns how a
	// child ended, and a ready child that finished from one that stopped.
	LastStopReason agent.StopReason `json:"last_stop_reason,omitempty"`
	LastMessage    string           `json:"last_message,omitempty"`
	Cwd            string           `json:"cwd,omitempty"`
	Reason         string           `json:"reason,omitempty"` // corrupt, unavailable
}

// ListChildren lists the caller's direct continuable children, live state
// merged over the store, in creation order. It never loads, resumes or
// queries a child: a live child reads no journal; a stored child reads its
// checkpoint when it is current, else folds its journal once.
func (m *Manager) ListChildren(caller ParentRef) ([]Row, error) {
	return m.list(caller.Address(), false)
}

// ListDescendants lists the caller's whole subtree.
func (m *Manager) ListDescendants(caller ParentRef) ([]Row, error) {
	return m.list(caller.Address(), true)
}

func (m *Manager) list(root string, deep bool) ([]Row, error) {
	if m.store == nil {
		return nil, newErr(CodeControlUnavailable, "listing needs a session store; none is configured")
	}
	if !deep {
		ls, err := m.listings(root)
		if err != nil {
			return m.liveRows(root, err), nil
		}
		rows := make([]Row, 0, len(ls))
		for _, l := range ls {
			if l.Corrupt {
				rows = append(rows, Row{Kind: "diagnostic", ID: l.Header.ID, Reason: "corrupt"})
				continue
			}
			r := m.row(l)
			r.TreeUsage = r.Usage
			if l.HasChildren && r.Usage != nil {
				if below, err := m.TreeUsage(r.ID); err == nil {
					t := r.Usage.plus(below)
					r.TreeUsage = &t
				}
			}
			rows = append(rows, r)
		}
		return rows, nil
	}
	// The whole subtree, breadth first; tree usage summed bottom-up.
	var rows []Row
	depthOf := map[string]int{root: 0}
	parentOf := map[string]string{}
	queue := []string{root}
	for len(queue) > 0 {
		addr := queue[0]
		queue = queue[1:]
		ls, err := m.listings(addr)
		if err != nil {
			// What is live still lists; the rest of this branch is one
			// diagnostic row.
			for _, r := range m.liveRows(addr, err) {
				if _, seen := depthOf[r.ID]; seen && r.Kind == "child" {
					continue
				}
				if r.Kind == "child" {
					depthOf[r.ID], parentOf[r.ID] = depthOf[addr]+1, addr
					queue = append(queue, r.ID)
				}
				rows = append(rows, r)
			}
			continue
		}
		for _, l := range ls {
			id := l.Header.ID
			if _, seen := depthOf[id]; seen {
				continue
			}
			depthOf[id], parentOf[id] = depthOf[addr]+1, addr
			if l.Corrupt {
				rows = append(rows, Row{Kind: "diagnostic", ID: id, Reason: "corrupt"})
				continue
			}
			rows = append(rows, m.row(l))
			queue = append(queue, id)
		}
	}
	tree := make(map[string]Usage, len(rows))
	for i := len(rows) - 1; i >= 0; i-- { // breadth-first order reversed: children before parents
		r := &rows[i]
		if r.Usage == nil {
			continue
		}
		t := tree[r.ID].plus(*r.Usage)
		tree[r.ID] = t
		r.TreeUsage = &t
		p := parentOf[r.ID]
		tree[p] = tree[p].plus(t)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].CreatedAt.Before(rows[j].CreatedAt) })
	return rows, nil
}

// liveRows is a listing of parent's children when the store cannot be
// read: the live ones from memory, and one diagnostic row that says the
// store failed (so a listing never fails outright, and never passes an
// unreadable store off as an empty one).
func (m *Manager) liveRows(parent string, err error) []Row {
	m.log.Error("listing children: the session store cannot be read", "parent", parent, "err", err)
	m.mu.Lock()
	var live []*activation
	for _, a := range m.live {
		if a.hdr.Parent == parent {
			live = append(live, a)
		}
	}
	m.mu.Unlock()
	sort.Slice(live, func(i, j int) bool { return live[i].hdr.CreatedAt.Before(live[j].hdr.CreatedAt) })
	rows := make([]Row, 0, len(live)+1)
	for _, a := range live {
		h := a.hdr
		r := Row{Kind: "child", ID: h.ID, Label: h.Label, Provider: h.Provider, Parent: h.Parent, Depth: h.Depth, CreatedAt: h.CreatedAt, Cwd: h.Cwd,
			Status: a.status()}
		a.mu.Lock()
		u, last := a.usage, a.last
		a.mu.Unlock()
		r.Usage, r.TreeUsage = &u, &u
		r.LastStopReason, r.LastMessage = last.StopReason, truncateUTF8(last.Output, MaxClosingBytes)
		rows = append(rows, r)
	}
	return append(rows, Row{Kind: "diagnostic", ID: StoreRowID, Reason: "unavailable"})
}

// StoreRowID is the id of the diagnostic row a listing carries when the
// session store itself cannot be read.
const StoreRowID = "session-store"

func (u Usage) plus(v Usage) Usage {
	return Usage{InputTokens: u.InputTokens + v.InputTokens, OutputTokens: u.OutputTokens + v.OutputTokens, CostUSD: u.CostUSD + v.CostUSD}
}

// TreeUsage returns what the descendants of an agent (a child id) have
// used so far, all levels summed.
func (m *Manager) TreeUsage(agentID string) (Usage, error) {
	rows, err := m.list(agentID, true)
	if err != nil {
		return Usage{}, err
	}
	var u Usage
	for _, r := range rows {
		if r.Usage != nil {
			u = u.plus(*r.Usage)
		}
	}
	return u, nil
}

// listings reads a parent's children: in one read where the store can,
// else a header list plus per-child reads.
func (m *Manager) listings(parent string) ([]Listing, error) {
	if l, ok := m.store.(Lister); ok {
		return l.Listings(parent)
	}
	hdrs, corrupt, err := m.store.Children(parent)
	if err != nil {
		return nil, err
	}
	bad := map[string]bool{}
	for _, id := range corrupt {
		bad[id] = true
	}
	out := make([]Listing, 0, len(hdrs))
	for _, h := range hdrs {
		l := Listing{Header: h, Corrupt: bad[h.ID]}
		if !l.Corrupt {
			if _, err := m.store.Descriptor(h.ID); errors.Is(err, ErrCorrupt) {
				l.Corrupt = true
			}
			if cp, ok, err := m.store.Checkpoint(h.ID); err == nil && ok {
				l.Checkpoint = &cp
			}
			l.JournalLen, _ = m.store.JournalLen(h.ID)
			if kids, _, err := m.store.Children(h.ID); err == nil {
				l.HasChildren = len(kids) > 0
			}
		}
		out = append(out, l)
	}
	return out, nil
}

// row projects one child on the three-step ladder: a live child reads its
// activation (no journal read); a stored child its checkpoint when the
// sequence gate passes; otherwise its journal is folded once and the
// checkpoint cached.
func (m *Manager) row(l Listing) Row {
	h := l.Header
	r := Row{Kind: "child", ID: h.ID, Label: h.Label, Provider: h.Provider, Parent: h.Parent, Depth: h.Depth, CreatedAt: h.CreatedAt, Cwd: h.Cwd}
	m.mu.Lock()
	a := m.live[h.ID]
	m.mu.Unlock()
	if a != nil {
		r.Status = a.status()
		a.mu.Lock()
		u, last := a.usage, a.last
		a.mu.Unlock()
		r.Usage = &u
		r.LastStopReason, r.LastMessage = last.StopReason, truncateUTF8(last.Output, MaxClosingBytes)
		return r
	}
	r.Status = "ready"
	m.mu.Lock()
	bad := m.corrupt[h.ID]
	m.mu.Unlock()
	if bad != "" {
		return Row{Kind: "diagnostic", ID: h.ID, Reason: bad}
	}
	if cp := l.Checkpoint; cp != nil && l.JournalLen <= cp.Seq {
		u := cp.Usage
		r.Usage = &u
		r.LastStopReason, r.LastMessage = cp.Stop, cp.Closing
		return r
	}
	events, err := m.store.Events(h.ID)
	if err != nil {
		m.noteCorrupt(h.ID, err)
		return diagnostic(h.ID, err)
	}
	u := foldUsage(events)
	r.Usage = &u
	last := lastOutcome(events)
	r.LastStopReason, r.LastMessage = last.StopReason, truncateUTF8(last.Output, MaxClosingBytes)
	if err := m.store.SetCheckpoint(h.ID, Checkpoint{Seq: int64(len(events)), Mode: h.Mode, Label: h.Label, Usage: u,
		Stop: last.StopReason, Closing: r.LastMessage}); err != nil {
		m.log.Debug("caching a checkpoint failed", "agent_id", h.ID, "err", err)
	}
	return r
}

func diagnostic(id string, err error) Row {
	reason := "unavailable"
	if errors.Is(err, ErrCorrupt) {
		reason = "corrupt"
	}
	return Row{Kind: "diagnostic", ID: id, Reason: reason}
}

func foldUsage(events []agent.Event) Usage {
	var u Usage
	for _, e := range events {
		if e.Usage != nil {
			u.InputTokens += e.Usage.InputTokens
			u.OutputTokens += e.Usage.OutputTokens
			u.CostUSD += e.Usage.CostUSD
		}
	}
	return u
}

// Recover finds the children a crash (or a shutdown) left active, closes
// their interrupted turns so they can be resumed, and announces each ended
// epoch to its parent: the closing events, the checkpoint, the clearing of
// the mark and the notice are one write, so a crash during recovery
// repeats it, never half of it. Call it once after the providers are
// registered.
//
// A child whose journal cannot be read keeps its mark (clearing it would
// forget the epoch for good; once the file is repaired, a later start
// closes and announces it) and lists as corrupt, and its parent gets a
// notice saying so, once per start while it stays unreadable.
func (m *Manager) Recover() error {
	if m.store == nil {
		return nil
	}
	ids, err := m.store.Active()
	if err != nil {
		return err
	}
	for _, id := range ids {
		h, err := m.store.Header(id)
		if err != nil {
			m.log.Error("an active child cannot be read; leaving it", "agent_id", id, "err", err)
			continue
		}
		events, err := m.store.Events(id)
		if err != nil {
			m.log.Error("an active child's journal cannot be read; keeping its mark", "agent_id", id, "err", err)
			m.noteUnreadable(id, err)
			n := Notice{Source: agent.SourceSettled, StopReason: agent.StopError, Text: unreadableText(id, err)}
			if err := m.deliver(h, n); err != nil {
				m.log.Error("telling the parent of an unreadable child failed", "agent_id", id, "err", err)
			}
			continue
		}
		all, closing := closeOpenTurn(events)
		last := lastOutcome(all)
		if last.StopReason == "" {
			// No turn of the epoch reached the journal: the crash stopped
			// it before it began (its prompt is still queued, and a resume
			// runs it).
			last.StopReason = agent.StopAborted
		}
		cp := Checkpoint{Seq: int64(len(all)), Mode: h.Mode, Label: h.Label, Usage: foldUsage(all), Stop: last.StopReason,
			Closing: truncateUTF8(last.Output, MaxClosingBytes)}
		n := stamp(h, Notice{Source: agent.SourceSettled, Text: settlementText(id, last), StopReason: last.StopReason})
		w := ChildWrite{Events: closing, Settle: &cp, Notify: &ParentNotice{To: h.Parent, Notice: n}}
		if err := m.storeWrite(func() error { return writeChild(m.store, id, w) }); err != nil {
			m.log.Error("closing an interrupted epoch failed; the next start tries again", "agent_id", id, "err", err)
			continue
		}
		m.announce(h, n)
		m.log.Info("recovered a child left active", "agent_id", id, "closed_turn", len(closing) > 0)
	}
	return nil
}

// unreadableText is the notice about an active child whose journal cannot
// be read.
func unreadableText(id string, err error) string {
	return fmt.Sprintf("Background subagent %s cannot be read from the session store, so how its last run ended is unknown (%s). "+
		"It lists as corrupt; stop the server and run `mcp-subagent doctor` to copy every readable child into a fresh store.",
		id, truncateUTF8(err.Error(), 300))
}

// lastOutcome reads how the journal's last turn ended and its last
// assistant message.
func lastOutcome(events []agent.Event) Result {
	var r Result
	for _, e := range events {
		switch {
		case e.Kind == agent.EventTurnStart:
			r.Output = ""
		case e.Kind == agent.EventMessage && e.Message != nil && e.Message.Role == llm.RoleAssistant && e.Message.Content != "":
			r.Output = e.Message.Content
		case e.Kind == agent.EventTurnEnd:
			r.StopReason, r.Diagnostic = e.StopReason, e.Diagnostic
		}
	}
	return r
}
