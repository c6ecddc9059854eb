package manager

import (
	"context"
	"errors"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// storeTimeout bounds one store call the manager makes on its own behalf
// (its writers, settlements, recovery, and lookups whose caller passed no
// context). bbolt and the in-memory store check a context only before they
// start; a network store aborts a call when it expires.
const storeTimeout = 30 * time.Second

// bg is the context of a store call made on the manager's own behalf: not
// cancelled by a caller leaving or by Close (a settlement write, a notice
// or a shutdown checkpoint must not be dropped), bounded by storeTimeout.
func (m *Manager) bg() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(m.ctx), storeTimeout)
}

// storeWrite runs a write outside a child's writer with the same bounded
// retry (persister.Retry.Do).
func (m *Manager) storeWrite(ctx context.Context, write func(ctx context.Context) error) error {
	return m.retry.Do(ctx, write)
}

// lostClaim reports whether err is a write refused because the child was
// taken over.
func lostClaim(err error) bool { return errors.Is(err, seam.ErrOwned) }

// now is the manager's clock (Options.Clock).
func (m *Manager) now() time.Time {
	if m.opts.Clock != nil {
		return m.opts.Clock()
	}
	return time.Now()
}

// lease is the manager's owner record as of now: claims made or renewed
// with it expire after the lease TTL.
func (m *Manager) lease() seam.Owner {
	return seam.Owner{ID: m.owner, Expires: m.now().Add(m.opts.LeaseTTL)}
}

// startRenewer starts the goroutine that renews the manager's claims while
// any child is resident or a session is recorded in the store as connected
// here (sessions.go); called under m.mu when a child becomes resident or a
// session is recorded, and by Recover. It ends on its own once nothing is resident (the next
// resident child starts it again) unless Recover made it sweep too (then
// it runs until Close: a server with nothing resident must still take
// over a dead server's children), and at Close; Close waits for it (m.wg).
func (m *Manager) startRenewer() {
	if m.renewing || m.store == nil {
		return
	}
	m.renewing = true
	m.wg.Add(1)
	go m.renew()
}

func (m *Manager) renew() {
	defer m.wg.Done()
	t := time.NewTicker(m.opts.LeaseTTL / 3)
	defer t.Stop()
	var leaseEnd time.Time // the expiry of the last renewal
	owed := false          // sessions to record again since a lapse, until they are
	for {
		select {
		case <-m.ctx.Done():
			m.mu.Lock()
			m.renewing = false
			m.mu.Unlock()
			return
		case <-t.C:
		}
		m.mu.Lock()
		resident, sweeping, sessions := len(m.live) > 0, m.sweeping, m.sessions.Any()
		if !resident && !sweeping && !sessions {
			m.renewing = false
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
		lapsed := false // the lease ran out before this renewal (a pause)
		if resident || sessions {
			// Bounded by the lease itself: a renewal later than that is moot.
			ctx, cancel := context.WithTimeout(m.ctx, m.opts.LeaseTTL/3)
			l := m.lease()
			if err := m.store.Renew(ctx, l); err != nil {
				m.log.Error("renewing the lease on resident children failed; retrying at the next tick", "owner", m.owner, "err", err)
			} else {
				lapsed = !leaseEnd.IsZero() && l.Expires.Add(-m.opts.LeaseTTL).After(leaseEnd)
				leaseEnd = l.Expires
			}
			cancel()
		}
		if sessions || sweeping {
			ctx, cancel := context.WithTimeout(m.ctx, m.opts.LeaseTTL/3)
			owed = !m.sessions.Tend(ctx, owed || lapsed)
			cancel()
		}
		if sweeping {
			m.startSweep()
		}
	}
}

// letGo ends the manager's lease at Close: its claims stay (the next start
// announces their epochs, as after a crash) but are expired, so a manager
// started next on the same store need not wait out the TTL. A failure is
// logged: the claims then expire on their own.
func (m *Manager) letGo(ctx context.Context) {
	if m.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if err := m.store.Renew(ctx, seam.Owner{ID: m.owner, Expires: m.now()}); err != nil {
		m.log.Warn("letting the lease on resident children go failed; they expire after the lease", "owner", m.owner, "err", err)
	}
}
