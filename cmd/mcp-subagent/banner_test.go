package main

import "testing"

// A daemon started from a `go run` binary is told to exit when idle.
func TestGoRunBinaryIsRecognised(t *testing.T) {
	for path, want := range map[string]bool{
		"/tmp/go-build1234/b001/exe/mcp-subagent": true,
		"/root/go/bin/mcp-subagent":               false,
		"/usr/local/bin/exe/mcp-subagent":         false,
	} {
		if got := goRunBinary(path); got != want {
			t.Errorf("goRunBinary(%s) = %v, want %v", path, got, want)
		}
	}
}
