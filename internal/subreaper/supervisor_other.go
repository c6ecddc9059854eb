//go:build !linux

package subreaper

// supported: only Linux has child subreapers.
const supported = false

func mainSupervisor() {}
