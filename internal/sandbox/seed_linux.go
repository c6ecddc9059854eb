package sandbox

import (
	"os"

	"golang.org/x/sys/unix"
)

// reflink clones in's data into out (FICLONE: btrfs, XFS, bcachefs...).
func reflink(out, in *os.File) error {
	return unix.IoctlFileClone(int(out.Fd()), int(in.Fd()))
}
