//go:build !linux

package sandbox

import (
	"errors"
	"os"
)

func reflink(out, in *os.File) error { return errors.ErrUnsupported }
