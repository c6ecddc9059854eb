package manager

import (
	"context"
	"errors"

	"github.com/mcp-subagent/mcp-subagent/manager/pacing"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// errClaimStore marks a resume whose claim failed for a store error (not
// refused, not cancelled): the store may well answer the next try.
var errClaimStore = errors.New("the claim could not be written or read back")

// transientSend reports whether a resume failed for a race another try
// can win (see manager/pacing): errResident (a send here resumed it
// meanwhile), ErrOwned (another instance claimed it, or was writing its
// row, meanwhile), ErrStale (another instance ran a turn of it
// meanwhile), errClaimStore.
func transientSend(err error) bool {
	return errors.Is(err, errResident) || errors.Is(err, seam.ErrOwned) || errors.Is(err, seam.ErrStale) || errors.Is(err, errClaimStore)
}

// storeTries caps the tries of a send whose claim failed for a store
// error (errClaimStore): each claim is a write the store's own retry
// already tried (Options.WriteAttempts), so a few more tries, some
// 0.3 s in all, wait out a blip; a store that is down past that is
// answered as such, at once, rather than after the whole pacing.
const storeTries = 6

// storeDown counts a send's claims failed for a store error in *n and
// reports whether err is one past storeTries.
func storeDown(err error, n *int) bool {
	if !errors.Is(err, errClaimStore) {
		return false
	}
	*n++
	return *n >= storeTries
}

// pace paces the tries of one send to child id, woken by the store's
// commits that concern it.
func (m *Manager) pace(id string) *pacing.Retry {
	return pacing.New(id, func(ctx context.Context) (<-chan struct{}, func()) { return m.watchAddr(ctx, id) }, m.log)
}
