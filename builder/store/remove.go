package store

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// RemoveTree removes the directory tree at path, which must be one
// tritonbuild created (a node, staging or work directory, or a tree inside
// one). Such trees may hold directories without write permission: Go's
// module cache makes its directories 0555, and an install tree keeps the
// modes its build gave it. Root removes those regardless; anyone else cannot
// empty them, so when the removal meets a permission error every directory
// under path is made readable, writable and searchable by its owner and the
// removal is tried again. Symlinks are removed, never followed, so nothing
// outside path is changed. A path that does not exist is no error.
func RemoveTree(path string) error {
	err := os.RemoveAll(path)
	if err == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	// Best effort: a directory that cannot be changed (another user's)
	// shows in the second removal's error, which names it.
	_ = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		// WalkDir calls this before it reads the directory, so one the
		// owner may not even list (0000) is opened up before that.
		if info, err := d.Info(); err == nil && info.Mode().Perm()&0o700 != 0o700 {
			_ = os.Chmod(p, info.Mode().Perm()|0o700)
		}
		return nil
	})
	return os.RemoveAll(path)
}
