// Package atomicfile writes files so that a reader, or a run after a crash,
// sees either the old content or the new and never a part of it: the one
// implementation of "temporary file, fsync, rename, sync the directory"
// for the store, the caches and the image layer cache. It also holds the
// plain file copy that fills directory trees which are themselves renamed
// into place as a whole.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteFile replaces name with data, giving it permissions perm. The data
// goes to a temporary file in the same directory, is synced, and is renamed
// over name; the directory is then synced so that the rename survives a
// crash. On failure name is untouched and the temporary file removed.
func WriteFile(name string, data []byte, perm fs.FileMode) (err error) {
	dir := filepath.Dir(name)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(name)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	_, werr := tmp.Write(data)
	if werr == nil {
		werr = tmp.Sync()
	}
	if werr == nil {
		// Explicit chmod: CreateTemp makes 0600 files, and the umask must
		// not change what the caller asked for.
		werr = tmp.Chmod(perm)
	}
	if err := errors.Join(werr, tmp.Close()); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	SyncDir(dir)
	return nil
}

// SyncDir makes renames and creations in dir durable. A failure only
// weakens durability after a crash, never correctness, so it is not
// reported.
func SyncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // see above: durability only
		d.Close()
	}
}

// CopyFile copies the content of src to dst, created (or truncated) with
// permissions perm. It is not atomic by itself: callers copy into a
// private directory that they rename into place once it is complete.
func CopyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copying %s to %s: %w", src, dst, err)
	}
	return out.Close()
}
