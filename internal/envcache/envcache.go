// Package envcache is the layout of the python backend's cache of
// extracted envs, which the server (runtime/python) fills and prunes and
// `tritonbuild gc` prunes too, so that both follow one protocol:
//
//   - <dir> (a sha256 of the packed env) is an extracted env, complete once
//     it holds ReadyMarker, whose modification time is its last use;
//   - every holder using the env holds <dir>.use (UseSuffix) shared;
//   - its extraction holds <dir>.lock (LockSuffix) exclusively;
//   - an env is removed only while both can be locked exclusively at once,
//     its marker first, and its two lock files go with it (Remove).
package envcache

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/tritonbuild/tritonbuild/internal/filelock"
)

const (
	// ReadyMarker is written into an extracted env once it is complete
	// (all files, link check and conda-unpack done); a directory without
	// it is a leftover of an interrupted extraction and is redone.
	ReadyMarker = ".tritonbuild-env-ready"
	// UseSuffix names the lock file whose shared holders use the
	// extracted env beside it: every instance (and auto-completion stub)
	// of every server sharing the cache holds it while its stub may run.
	UseSuffix = ".use"
	// LockSuffix names the lock file an extraction of the env holds.
	LockSuffix = ".lock"
)

// Remove deletes the extracted env dir and its lock files if nothing uses
// or extracts it now (removed false otherwise, and nothing touched); with
// locksOnly, only if dir itself is gone (the lock files of an extraction
// that failed, or of a removal interrupted between the two).
func Remove(dir string, locksOnly bool) (removed bool, err error) {
	unuse, ok, err := filelock.TryLock(dir + UseSuffix)
	if err != nil || !ok {
		return false, err
	}
	defer unuse()
	unlock, ok, err := filelock.TryLock(dir + LockSuffix)
	if err != nil || !ok {
		return false, err
	}
	defer unlock()
	if _, err := os.Lstat(dir); locksOnly && !errors.Is(err, fs.ErrNotExist) {
		return false, nil // extracted again since the caller looked
	}
	// The marker first: a half-removed env is then an incomplete one,
	// which the next user extracts again.
	if err := os.Remove(filepath.Join(dir, ReadyMarker)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return true, err
	}
	// The two lock files go too, while both are held (each waiter for them
	// then starts again on a new file), or every archive ever used would
	// leave two behind.
	if err := filelock.Remove(dir + LockSuffix); err != nil {
		return true, err
	}
	return true, filelock.Remove(dir + UseSuffix)
}

// Busy reports whether someone uses or extracts the env dir (its use or
// extraction lock held). It creates no lock file: one that is not there is
// held by no one; one that cannot be tried counts as held.
func Busy(dir string) bool {
	for _, suffix := range []string{UseSuffix, LockSuffix} {
		if _, err := os.Lstat(dir + suffix); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		unlock, ok, err := filelock.TryLock(dir + suffix)
		if err != nil || !ok {
			return true
		}
		unlock()
	}
	return false
}
