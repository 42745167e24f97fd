// Package atomicfile writes files so that a reader, or a run after a crash,
// sees either the old content or the new and never a part of it: the one
// implementation of "temporary file, fsync, rename, sync the directory"
// for the store, the caches, the image layer cache and packed python envs
// (File, for content streamed to disk). It also holds the
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
func WriteFile(name string, data []byte, perm fs.FileMode) error {
	f, err := Create(name, perm)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return f.Commit()
}

// File is WriteFile for content too large to hold in memory: it is written
// (and may be read back, through TempName) at a temporary name in the
// target's directory and appears at the target's name only on Commit.
type File struct {
	*os.File
	name string
	perm fs.FileMode
	done bool
}

// Create starts writing name, which gets permissions perm on Commit. The
// caller must end with Commit or Abort (deferring Abort is safe).
func Create(name string, perm fs.FileMode) (*File, error) {
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("writing %s: %w", name, err)
	}
	return &File{File: tmp, name: name, perm: perm}, nil
}

// TempName is where the content is until Commit.
func (f *File) TempName() string { return f.Name() }

// Commit syncs the content, renames it over the target and syncs the
// directory. On failure the target is untouched and the temporary file
// removed.
func (f *File) Commit() error {
	if f.done {
		return fmt.Errorf("writing %s: already committed or aborted", f.name)
	}
	werr := f.Sync()
	if werr == nil {
		// Explicit chmod: CreateTemp makes 0600 files, and the umask must
		// not change what the caller asked for.
		werr = f.Chmod(f.perm)
	}
	if err := errors.Join(werr, f.Close()); err != nil {
		f.Abort()
		return fmt.Errorf("writing %s: %w", f.name, err)
	}
	if err := os.Rename(f.TempName(), f.name); err != nil {
		f.Abort()
		return fmt.Errorf("writing %s: %w", f.name, err)
	}
	f.done = true
	SyncDir(filepath.Dir(f.name))
	return nil
}

// Abort removes the temporary file; after Commit it does nothing.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.Close()
	os.Remove(f.TempName())
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
