// Package filelock is the one cross-process lock of the module: an
// exclusive flock(2) on a named file, taken by polling so that a context can
// end the wait. The store (one lock per node), the source cache (one per
// digest) and the python env cache (one per packed env) all lock through it.
// Shared and TryLock serve the env cache's use marks: the instances using
// an env hold it shared, and pruning removes only an env it can lock
// exclusively at once.
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
// The file is never removed: removing it would let two processes lock two
// different inodes under the same name.
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
	case err == nil:
		return func() {
			_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
			f.Close()
		}, true, nil
	case errors.Is(err, unix.EWOULDBLOCK):
		f.Close()
		return nil, false, nil
	}
	f.Close()
	return nil, false, fmt.Errorf("locking %s: %w", path, err)
}

func lock(ctx context.Context, path string, how int) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	wait := firstWait
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
	return func() {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN) // closing f releases the lock anyway
		f.Close()
	}, nil
}
