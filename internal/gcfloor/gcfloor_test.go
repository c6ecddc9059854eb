package gcfloor

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestPercentPutsTheNextCollectionAtTheFloor(t *testing.T) {
	const mib = 1 << 20
	for _, tt := range []struct {
		live, floor uint64
		base, want  int
	}{
		{live: 8 * mib, floor: 64 * mib, base: 100, want: 700},   // 8 MiB × 8 = 64 MiB
		{live: 32 * mib, floor: 64 * mib, base: 100, want: 100},  // 32 × 2 = 64 already
		{live: 48 * mib, floor: 64 * mib, base: 100, want: 100},  // never below base
		{live: 200 * mib, floor: 64 * mib, base: 100, want: 100}, // a large heap: the process's own
		{live: 200 * mib, floor: 64 * mib, base: 50, want: 50},   // whatever that is
		{live: 1 * mib, floor: 64 * mib, base: 100, want: 2000},  // bounded
		{live: 0, floor: 64 * mib, base: 100, want: 2000},        // no reading
		{live: 16 * mib, floor: 64 * mib, base: 400, want: 400},  // a higher GOGC stays
	} {
		if got := Percent(tt.live, tt.floor, tt.base); got != tt.want {
			t.Errorf("Percent(%d MiB, %d MiB, %d) = %d, want %d", tt.live/mib, tt.floor/mib, tt.base, got, tt.want)
		}
	}
}

// Once started, every collection re-tunes GOGC from the live heap (here
// small, so above the default), and stop puts the process's value back.
func TestStartTunesAfterEachCollectionAndStopRestores(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	set := make(chan int, 16)
	f := func(p int) {
		select {
		case set <- p:
		default:
		}
	}
	tuned.Store(&f)
	defer tuned.Store(nil)
	stop := Start(1 << 30)
	for i := range 2 {
		runtime.GC()
		if p := <-set; p <= 100 {
			t.Errorf("collection %d: GOGC set to %d with a 1 GiB floor, want above 100", i, p)
		}
	}
	stop()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC after stop = %d, want 100", got)
	}
}
