// Package filelock is the one cross-process lock of the module: an
// exclusive flock(2) on a named file, taken by polling so that a context can
// end the wait. The store (one lock per node), the source cache (one per
// digest) and the python env cache (one per packed env) all lock through it.
// Shared and TryLock serve the env cache's use marks: the instances using
// an env hold it shared, and pruning removes only an env it can lock
// exclusively at once.
//
// A lock file may be removed (Remove) by the holder of its exclusive lock:
// every Lock, Shared and TryLock checks, once it has the lock, that the
// path still names the file it locked, and otherwise starts again on the
// file now there.
//
// flock locks belong to an open file description, so two Lock calls in one
// process exclude each other exactly as two processes do. The kernel drops
// the lock when its holder dies, so a killed build never leaves a stale
// lock behind.
package filelock

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Polling bounds: the first retry comes quickly (locks are usually held
// briefly), later ones back off so that a long wait costs little CPU, yet
// a freed lock is noticed within maxWait.
const (
	firstWait = 10 * time.Millisecond
	maxWait   = 200 * time.Millisecond
)

// Lock takes an exclusive lock on path, creating the file if needed, and
// waits until it is free or ctx ends. The returned function releases it.
func Lock(ctx context.Context, path string) (unlock func(), err error) {
	return lock(ctx, path, unix.LOCK_EX)
}

// Shared takes a shared lock on path, as Lock does: any number of holders
// at once, none while an exclusive lock is held.
func Shared(ctx context.Context, path string) (unlock func(), err error) {
	return lock(ctx, path, unix.LOCK_SH)
}

// TryLock takes an exclusive lock on path if no one holds a lock on it
// now; ok is false, and unlock nil, when someone does.
func TryLock(path string) (unlock func(), ok bool, err error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, false, fmt.Errorf("opening lock file: %w", err)
		}
		for {
			err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		switch {
		case errors.Is(err, unix.EWOULDBLOCK):
			f.Close()
			return nil, false, nil
		case err != nil:
			f.Close()
			return nil, false, fmt.Errorf("locking %s: %w", path, err)
		}
		current, err := names(path, f)
		if err != nil {
			release(f)
			return nil, false, err
		}
		if current {
			return func() { release(f) }, true, nil
		}
		release(f) // removed while we opened it: try the file there now
	}
}

// Remove deletes the lock file at path. Call it only while holding the
// exclusive lock on path, and unlock afterwards: whoever opened the file
// before it went and locks it once it is released sees that path no
// longer names it and starts again, so two holders never meet on two
// inodes under one name. A file already gone is no error.
func Remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing lock file: %w", err)
	}
	return nil
}

func lock(ctx context.Context, path string, how int) (unlock func(), err error) {
	wait := firstWait
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("opening lock file: %w", err)
		}
		for {
			err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
			if err == nil {
				break
			}
			// EINTR: a signal arrived during the call; just try again.
			if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
				f.Close()
				return nil, fmt.Errorf("locking %s: %w", path, err)
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				f.Close()
				return nil, fmt.Errorf("waiting for lock %s: %w", path, ctx.Err())
			case <-t.C:
			}
			wait = min(2*wait, maxWait)
		}
		current, err := names(path, f)
		if err != nil {
			release(f)
			return nil, err
		}
		if current {
			return func() { release(f) }, nil
		}
		// The holder before us removed the file (Remove): our lock is on
		// an inode no one else will open, so lock the file there now.
		release(f)
	}
}

// names reports whether path still names the file f has open. An open
// inode is never reused, so equal device and inode numbers mean the same
// file.
func names(path string, f *os.File) (bool, error) {
	var held, now unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &held); err != nil {
		return false, fmt.Errorf("checking lock file %s: %w", path, err)
	}
	if err := unix.Stat(path, &now); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("checking lock file %s: %w", path, err)
	}
	return held.Dev == now.Dev && held.Ino == now.Ino, nil
}

func release(f *os.File) {
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN) // closing f releases the lock anyway
	f.Close()
}
