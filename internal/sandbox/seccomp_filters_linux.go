//go:build linux && !amd64

package sandbox

import "golang.org/x/sys/unix"

// seccompFilters are the assembled seccomp programs by network setting;
// generated for amd64 (seccomp_filters_linux_amd64.go), empty elsewhere,
// where loadSeccomp assembles the program. TestSeccompFiltersAreCurrent
// checks them against assembleSeccomp and, with -update, writes the
// running architecture's file (add it to the constraint above).
var seccompFilters = map[bool][]unix.SockFilter{}
