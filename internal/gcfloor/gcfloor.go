// Package gcfloor keeps the Go heap's collection target from falling below
// a floor. A server whose live heap is small and whose allocation rate is
// high (a daemon answering delegations: a few MiB live, a few hundred KiB
// allocated per call) otherwise collects every few MiB, and a fifth of its
// CPU went to the collector. With a floor, GOGC is raised while the live
// heap is small so that the next collection comes at about the floor, and
// is back at the process's own value once the live heap has grown past it:
// large heaps cost no extra memory.
//
// It re-tunes after every collection, from a finalizer the runtime runs
// once the cycle has ended; it owns no goroutine.
package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// maxPercent bounds the GOGC it sets, so a nearly empty heap is not left
// to grow unboundedly toward the floor on a stale reading.
const maxPercent = 2000

// tuned is told each GOGC set, when a test has stored a func in it.
var tuned atomic.Pointer[func(int)]

// Start keeps the collection target at least floor bytes until the
// returned func is called, which restores the GOGC in force before. base
// is that GOGC (100 unless the environment says otherwise); a process with
// the collector off (GOGC=off) is left alone.
func Start(floor uint64) (stop func()) {
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	if base < 0 || floor == 0 {
		return func() {}
	}
	var stopped atomic.Bool
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	var arm func()
	arm = func() {
		sentinel := new([16]byte) // not tiny-allocated: its finalizer runs
		runtime.SetFinalizer(sentinel, func(*[16]byte) {
			if stopped.Load() {
				return
			}
			metrics.Read(sample)
			if sample[0].Value.Kind() == metrics.KindUint64 {
				p := Percent(sample[0].Value.Uint64(), floor, base)
				debug.SetGCPercent(p)
				if f := tuned.Load(); f != nil {
					(*f)(p)
				}
			}
			arm()
		})
	}
	arm()
	return func() {
		stopped.Store(true)
		debug.SetGCPercent(base)
	}
}

// Percent is the GOGC that puts the next collection of a heap with live
// bytes at floor, at least base and at most maxPercent.
func Percent(live, floor uint64, base int) int {
	if live == 0 {
		return maxPercent
	}
	if live >= floor {
		return base
	}
	p := int((floor - live) * 100 / live)
	return min(max(p, base), maxPercent)
}
