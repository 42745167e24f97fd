// Package filelock is the one cross-process lock of the module: an
// exclusive flock(2) on a named file, taken by polling so that a context can
// end the wait. The store (one lock per node), the source cache (one per
// digest) and the python env cache (one per packed env) all lock through it.
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
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	wait := firstWait
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
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
