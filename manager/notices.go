package manager

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// stamp fills in what a stored notice about child h carries.
func stamp(h seam.Header, n seam.Notice) seam.Notice {
	n.ChildID, n.Time = h.ID, time.Now().UTC()
	if h.Parent == seam.PrincipalAddress(h.Principal) {
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
func (m *Manager) deliver(h seam.Header, n seam.Notice) error {
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
	// A notice must not be lost because whoever caused it left: the write
	// is the manager's own.
	ctx, cancel := m.bg()
	defer cancel()
	if err := m.storeWrite(ctx, func(ctx context.Context) error { return m.store.AddNotice(ctx, parentAddr, n) }); err != nil {
		return &seam.Error{Code: seam.CodePersistenceUnavailable, AgentID: h.ID, Message: "storing a notice for " + parentAddr + " failed", Err: err}
	}
	m.announce(h, n)
	return nil
}

// announce tells whoever waits at h's parent that a notice was stored.
func (m *Manager) announce(h seam.Header, n seam.Notice) {
	if hook := m.opts.OnNotice; hook != nil && h.Parent == seam.PrincipalAddress(h.Principal) {
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

// TakeNotices removes and returns what is pending for a root principal's
// session: the notices of children that session started, and those whose
// originating session is connected neither here (Options.SessionConnected)
// nor, on a store that shares sessions (seam.Sessions), at another
// instance. With session empty (a transport without sessions) it takes
// every notice of the principal whose session is not connected.
func (m *Manager) TakeNotices(principal, session string) []seam.Notice {
	if m.store == nil {
		return nil
	}
	// No caller context here, and WaitNotices takes once more after its
	// own ended: the read is the manager's own, bounded.
	ctx, cancel := m.bg()
	defer cancel()
	addr := seam.PrincipalAddress(principal)
	// The store is asked about other instances' sessions only when a
	// notice of a session not connected here is pending: a first take
	// leaves those, a second takes those the store says are not connected
	// elsewhere.
	var elsewhere map[string]bool
	ask := false
	take := func(n seam.Notice) bool {
		switch {
		case n.Session == "" || n.Session == session:
			return true
		case m.sessions.Here(n.Session):
			return false
		case !m.sessions.Shares():
			return true
		case elsewhere == nil:
			ask = true
			return false
		}
		return !elsewhere[n.Session]
	}
	ns, err := m.store.TakeNotices(ctx, addr, take)
	if err == nil && ask {
		if elsewhere = m.sessions.Elsewhere(ctx, principal); elsewhere != nil {
			var more []seam.Notice
			more, err = m.store.TakeNotices(ctx, addr, take)
			ns = append(ns, more...)
			slices.SortFunc(ns, func(a, b seam.Notice) int { return cmp.Compare(a.Seq, b.Seq) })
		}
	}
	if err != nil {
		m.log.Error("reading pending notices failed", "principal", principal, "err", err)
	}
	return ns
}

// WaitNotices blocks until something is pending for a root principal's
// session (see TakeNotices) or ctx ends, then takes it. A notice another
// instance sharing the store queued wakes it too (the store's wake-up).
func (m *Manager) WaitNotices(ctx context.Context, principal, session string) []seam.Notice {
	addr := seam.PrincipalAddress(principal)
	stored, stop := m.watchAddr(ctx, addr) // cluster.go
	defer stop()
	for {
		ch := m.pendingChan(addr)
		if ns := m.TakeNotices(principal, session); len(ns) > 0 {
			return ns
		}
		select {
		case <-ch:
		case <-stored:
		case <-m.sessions.Changed():
		case <-ctx.Done():
			return m.TakeNotices(principal, session)
		}
	}
}

// WaitSignal blocks until something is delivered to addr or ctx ends. A
// root principal's children may live at any instance sharing the store, so
// a notice queued for it at another wakes it too (the store's wake-up); an
// agent's children are resident where it is.
func (m *Manager) WaitSignal(ctx context.Context, addr string) {
	ch := m.pendingChan(addr)
	var stored <-chan struct{}
	if strings.HasPrefix(addr, seam.PrincipalAddress("")) {
		var stop func()
		stored, stop = m.watchAddr(ctx, addr)
		defer stop()
	}
	// Logged once the waiter holds the channels: from here on a delivery
	// wakes it (what a test waits for before delivering).
	m.log.Debug("waiting for a delivery", "address", addr)
	select {
	case <-ch:
	case <-stored:
	case <-ctx.Done():
	}
}
