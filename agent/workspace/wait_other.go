//go:build unix && !linux

package workspace

import "errors"

// waitExited is not available here: run_shell reaps the shell at once and
// kills what is left of its group afterwards.
func waitExited(int) error { return errors.ErrUnsupported }
