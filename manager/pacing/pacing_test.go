package pacing

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

var errRace = errors.New("claimed elsewhere meanwhile")

// The first retry starts the watch and goes at once; later ones wait for a
// wake-up of the child or the backoff, whichever is first; the backoff
// doubles up to Max.
func TestAgainWaitsForAWakeUpOrTheBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		wake := make(chan struct{}, 1)
		watched, stopped := 0, 0
		r := New("agent-1", func(context.Context) (<-chan struct{}, func()) {
			watched++
			return wake, func() { stopped++ }
		}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		ctx := context.Background()

		t0 := time.Now()
		if err := r.Again(ctx, nil, errRace); err != nil || watched != 1 || time.Since(t0) != 0 {
			t.Fatalf("first retry: err %v, watches %d, waited %s; want at once, watching", err, watched, time.Since(t0))
		}
		// A wake-up cuts the backoff short.
		wake <- struct{}{}
		if err := r.Again(ctx, nil, errRace); err != nil || time.Since(t0) != 0 || watched != 1 {
			t.Fatalf("woken retry: err %v, waited %s, watches %d", err, time.Since(t0), watched)
		}
		// Without one, the backoff: jittered in [d/2, d], doubling to Max.
		for d := 2 * First; d <= 4*Max; d *= 2 {
			t1 := time.Now()
			if err := r.Again(ctx, nil, errRace); err != nil {
				t.Fatal(err)
			}
			want := min(d, Max)
			if got := time.Since(t1); got < want/2 || got > want {
				t.Fatalf("backoff %s, want within [%s, %s]", got, want/2, want)
			}
		}
		r.Close()
		if stopped != 1 {
			t.Errorf("Close stopped the watch %d times, want once", stopped)
		}
	})
}

// The release of the child's activation here is what a settling retry
// waits for, not the backoff.
func TestAgainWaitsForTheRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New("agent-1", func(context.Context) (<-chan struct{}, func()) { return nil, func() {} }, slog.New(slog.NewTextHandler(io.Discard, nil)))
		defer r.Close()
		released := make(chan struct{})
		go func() { time.Sleep(time.Hour); close(released) }()
		t0 := time.Now()
		if err := r.Again(context.Background(), released, errRace); err != nil || time.Since(t0) != time.Hour {
			t.Fatalf("err %v after %s; want nil after the release (1h)", err, time.Since(t0))
		}
	})
}

// The tries are capped, and the error says why; a caller's end is a
// cancellation.
func TestAgainGivesUpSayingWhy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New("agent-1", func(context.Context) (<-chan struct{}, func()) { return nil, func() {} }, slog.New(slog.NewTextHandler(io.Discard, nil)))
		defer r.Close()
		var err error
		n := 0
		for err == nil {
			n++
			err = r.Again(context.Background(), nil, errRace)
		}
		var se *seam.Error
		if n != Tries || !errors.As(err, &se) || se.Code != seam.CodeNotResumable || !errors.Is(err, errRace) ||
			!strings.Contains(se.Message, "kept changing hands") || !strings.Contains(se.Message, "32 tries") {
			t.Fatalf("after %d tries: %v", n, err)
		}

		r2 := New("agent-2", func(context.Context) (<-chan struct{}, func()) { return nil, func() {} }, slog.New(slog.NewTextHandler(io.Discard, nil)))
		defer r2.Close()
		ctx, cancel := context.WithCancel(context.Background())
		_ = r2.Again(ctx, nil, errRace) // starts the watch
		cancel()
		if err := r2.Again(ctx, nil, errRace); !errors.As(err, &se) || se.Code != seam.CodeCancelled {
			t.Fatalf("a cancelled caller's retry = %v; want CANCELLED", err)
		}
	})
}
