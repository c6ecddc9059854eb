package growstack

import (
	"testing"
)

// Grow's frame must stay on the stack: a buffer moved to the heap would
// grow nothing and allocate instead.
func TestGrowDoesNotAllocate(t *testing.T) {
	if n := testing.AllocsPerRun(100, Grow); n != 0 {
		t.Fatalf("Grow allocates %v times per call", n)
	}
}

//go:noinline
func deep(n int) byte {
	var frame [256]byte
	frame[n%256] = byte(n)
	if n == 0 {
		return frame[0]
	}
	return deep(n-1) + frame[(n+1)%256]
}

// BenchmarkNewGoroutineGoingDeep is a new goroutine whose calls reach about
// 24 KiB of stack, as a request's do: growing in steps, or after Grow.
func BenchmarkNewGoroutineGoingDeep(b *testing.B) {
	for _, grow := range []bool{false, true} {
		name := "in-steps"
		if grow {
			name = "grown-first"
		}
		b.Run(name, func(b *testing.B) {
			done := make(chan byte)
			for b.Loop() {
				go func() {
					if grow {
						Grow()
					}
					done <- deep(80)
				}()
				<-done
			}
		})
	}
}
