package main

import (
	"context"
	"os"

	"golang.org/x/sys/unix"
)

// firstCache returns once root (the per-child cache root) has an entry,
// waiting for the first with inotify, or when ctx ends (its error).
func firstCache(ctx context.Context, root string) error {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return err
	}
	// Non-blocking: the runtime's poller waits, and Close ends the wait.
	f := os.NewFile(uintptr(fd), "inotify")
	defer f.Close()
	if _, err := unix.InotifyAddWatch(fd, root, unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		return err
	}
	// Watched first, listed second: an entry made in between is seen.
	if entries, err := os.ReadDir(root); err == nil && len(entries) > 0 {
		return nil
	}
	stop := context.AfterFunc(ctx, func() { f.Close() })
	defer stop()
	var buf [4096]byte
	if _, err := f.Read(buf[:]); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	return nil
}
