package manager

import "context"

// SweepNow runs one takeover sweep at once (the renewer runs one at each
// renewal once Recover ran), for tests that must not wait for a tick.
func (m *Manager) SweepNow(ctx context.Context) { m.recovery().Sweep(ctx) }

// StoreTries is storeTries, for the contention tests.
const StoreTries = storeTries
