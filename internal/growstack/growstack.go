// Package growstack grows the calling goroutine's stack in one step.
//
// A goroutine starts with a small stack and doubles it, copying it each
// time, as its calls go deeper. The goroutines that answer a request or run
// a child's turn go deep at once (mcp-go, the tools, the manager, the agent
// loop, the SDK, net/http) and are new for every call: copying their
// stacks up through four or five sizes was a tenth of a delegation's CPU.
// Calling Grow first moves the stack to its working size in one copy, of
// a stack that is still nearly empty. (CockroachDB's growstack does the
// same.)
package growstack

import "sync/atomic"

// Off turns Grow into a no-op (bench/userscale compares with and without).
var Off atomic.Bool

// Size is the stack a call to Grow leaves room for.
const Size = 32 << 10

// Grow makes the calling goroutine's stack hold at least Size bytes.
//
//go:noinline
func Grow() {
	if Off.Load() {
		return
	}
	var buf [Size]byte
	touch(buf[:])
}

// touch takes buf without keeping it: buf stays on the stack, and being
// passed to a call that is not inlined, it is not optimised away.
//
//go:noinline
func touch(buf []byte) { _ = buf }
