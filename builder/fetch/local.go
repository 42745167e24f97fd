package fetch

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// HashDir returns a sha256 (64 hex digits) over the content of the tree at
// dir, for local sources whose pin is their content. What counts: every
// entry's slash-separated path relative to dir, its kind (directory, file,
// symlink), a file's executable bit and bytes, a symlink's target. What does
// not: mtimes, owners, other permission bits, the name of dir itself.
// Entries are visited depth-first in name order, so the digest is the same on
// every machine. ignore, when not nil, is given each relative path
// ("sub/file.c"); returning true leaves the entry (and, for a directory, all
// below it) out. Sockets, devices and pipes are an error.
func HashDir(dir string, ignore func(rel string) bool) (string, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("hashing local source: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("hashing local source: %s is not a directory", dir)
	}
	h, err := HashFS(os.DirFS(dir), ignore)
	if err != nil {
		return "", fmt.Errorf("hashing local source %s: %w", dir, err)
	}
	return h, nil
}

// HashFS is HashDir of a file system's root: the same records, so a copy
// of a tree (an embedded one, say) hashes like the tree itself as long as
// the exec bits agree (files of an embed.FS have none).
func HashFS(fsys fs.FS, ignore func(rel string) bool) (string, error) {
	sum := sha256.New()
	buf := make([]byte, 256<<10)
	err := fs.WalkDir(fsys, ".", func(rel string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		if ignore != nil && ignore(rel) {
			if e.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		// Each record is quoted and newline-terminated, so no choice of
		// names can make two different trees produce the same stream.
		switch t := e.Type(); {
		case t.IsDir():
			fmt.Fprintf(sum, "dir %q\n", rel)
		case t&fs.ModeSymlink != 0:
			target, err := fs.ReadLink(fsys, rel)
			if err != nil {
				return err
			}
			fmt.Fprintf(sum, "symlink %q %q\n", rel, target)
		case t.IsRegular():
			info, err := e.Info()
			if err != nil {
				return err
			}
			f, err := fsys.Open(rel)
			if err != nil {
				return err
			}
			fh := sha256.New()
			_, err = io.CopyBuffer(fh, f, buf)
			f.Close()
			if err != nil {
				return fmt.Errorf("reading %s: %w", rel, err)
			}
			fmt.Fprintf(sum, "file %q exec=%t sha256=%s\n", rel, info.Mode()&0o111 != 0, hex.EncodeToString(fh.Sum(nil)))
		default:
			return fmt.Errorf("%s: unsupported file type %v", rel, t)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(sum.Sum(nil)), nil
}
