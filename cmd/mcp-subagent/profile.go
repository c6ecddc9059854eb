package main

import (
	"os"
	"runtime/pprof"
)

// startProfile writes a CPU profile of the whole process to the file
// MCP_SUBAGENT_CPUPROFILE names, for performance work on the server as a
// client runs it (benchmarks start it as a subprocess). The returned func
// stops it; unset, it does nothing.
func startProfile() func() {
	path := os.Getenv("MCP_SUBAGENT_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}
