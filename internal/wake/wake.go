// Package wake is the in-process half of the stores' wake-up ability
// (seam.Waker): watches by key, signalled after a commit. A store that
// lives in one process signals it directly; a shared store signals it from
// the notifications its wake-up connection receives.
package wake

import "sync"

// Hub holds the watches of one store. The zero value is ready to use.
type Hub struct {
	mu sync.Mutex
	w  map[string]map[chan struct{}]struct{}
}

// Watch adds a watch of key. Its channel holds one signal (more coalesce)
// and is never closed; stop removes the watch.
func (h *Hub) Watch(key string) (<-chan struct{}, func()) {
	c := make(chan struct{}, 1)
	h.mu.Lock()
	if h.w == nil {
		h.w = map[string]map[chan struct{}]struct{}{}
	}
	if h.w[key] == nil {
		h.w[key] = map[chan struct{}]struct{}{}
	}
	h.w[key][c] = struct{}{}
	h.mu.Unlock()
	var once sync.Once
	return c, func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			delete(h.w[key], c)
			if len(h.w[key]) == 0 {
				delete(h.w, key)
			}
		})
	}
}

// Signal wakes every watch of the keys.
func (h *Hub) Signal(keys ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range keys {
		for c := range h.w[k] {
			poke(c)
		}
	}
}

// SignalAll wakes every watch: what a store does when it may have missed
// signals.
func (h *Hub) SignalAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, cs := range h.w {
		for c := range cs {
			poke(c)
		}
	}
}

func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default: // one is pending already: coalesce
	}
}
